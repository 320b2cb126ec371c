package node

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// kindMarket is the payload kind of market messages, on direct streams and
// on the bid-request topic.
const kindMarket = "market"

// outgoing is a batch of encoded market messages for one peer, or for the
// broadcast topic when to is "".
type outgoing struct {
	to   peer.ID
	msgs []gossip.Out
}

// send encodes the market's messages, groups them by destination and hands
// them to the send workers without blocking the driver. A batch that finds
// the queue full is dropped: the market retries what matters.
func (n *Node) send(msgs []market.Message) {
	if len(msgs) == 0 {
		return
	}
	batches := map[string]*outgoing{}
	var order []string
	for _, m := range msgs {
		data, err := market.EncodeMessage(m)
		if err != nil {
			n.log.Error("cannot encode a market message", "type", m.Payload.Type(), "err", err)
			continue
		}
		b := batches[m.To]
		if b == nil {
			b = &outgoing{}
			if m.To != market.Broadcast {
				id, err := peer.Decode(m.To)
				if err != nil {
					n.log.Error("market message to a bad peer ID", "to", m.To, "err", err)
					continue
				}
				b.to = id
			}
			batches[m.To] = b
			order = append(order, m.To)
		}
		b.msgs = append(b.msgs, gossip.Out{Kind: kindMarket, Data: data})
	}
	for _, to := range order {
		select {
		case n.outbox <- *batches[to]:
		default:
			n.log.Warn("send queue full; messages dropped", "to", to, "count", len(batches[to].msgs))
		}
	}
}

// sendWorker delivers batches until the node closes.
func (n *Node) sendWorker() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case b := <-n.outbox:
			ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
			var err error
			if b.to == "" {
				for _, m := range b.msgs {
					if err = n.gossip.Broadcast(ctx, m.Kind, m.Data); err != nil {
						break
					}
				}
			} else {
				n.dialable(b.to)
				err = n.direct.Send(ctx, b.to, b.msgs...)
			}
			cancel()
			if err != nil && n.ctx.Err() == nil {
				n.log.Debug("market messages not delivered", "to", b.to, "count", len(b.msgs), "err", err)
			}
		}
	}
}

// onDirect receives a market message from a peer's stream: decoded and
// checked against the authenticated sender, then stepped on the driver.
func (n *Node) onDirect(m gossip.Message) {
	if m.Kind != kindMarket {
		n.log.Debug("direct message of unknown kind", "from", m.Sender, "kind", m.Kind)
		return
	}
	n.receive(m)
}

// onBroadcast receives a message of the bid-request topic. This node's own
// broadcasts are handled by its market when sent.
func (n *Node) onBroadcast(m gossip.Message) {
	if m.Sender == n.id || m.Kind != kindMarket {
		return
	}
	n.receive(m)
}

func (n *Node) receive(m gossip.Message) {
	msg, err := market.DecodeMessage(m.Data)
	if err != nil {
		n.log.Info("malformed market message refused", "from", m.Sender, "err", err)
		return
	}
	if msg.From != m.Sender.String() {
		n.log.Info("market message with a forged sender refused", "from", m.Sender, "claims", msg.From)
		return
	}
	if msg.To != market.Broadcast && msg.To != n.id.String() {
		n.log.Info("market message for another node refused", "from", m.Sender, "to", msg.To)
		return
	}
	if !n.post(func() { n.step(market.MessageReceived{Now: time.Now(), Message: msg}) }) && n.ctx.Err() == nil {
		n.log.Warn("input queue full; market message dropped", "from", m.Sender, "type", msg.Payload.Type())
	}
}

// addrTTL is how long addresses learned from membership stay in the
// peerstore; membership updates refresh them.
const addrTTL = time.Hour

// dialable makes sure the host knows addresses of a member it may never
// have been connected to (a peer it heard of through gossip): it copies
// them from the member's metadata.
//
// A member that membership hears from is up: a dial backoff libp2p keeps
// from before (it was down, or restarting) is cleared, so that the call
// is not refused without a try.
func (n *Node) dialable(id peer.ID) {
	m, member := n.mesh.Member(id)
	if member && m.State == mesh.StateAlive {
		n.clearBackoff(id)
	}
	ps := n.mesh.Host().Peerstore()
	if len(ps.Addrs(id)) > 0 {
		return
	}
	if member && len(m.Addrs) > 0 {
		ps.AddAddrs(id, m.Addrs, addrTTL)
	}
}

// clearBackoff forgets the failed dials to a member that has just joined
// or come back: libp2p backs off dialing a peer whose dial failed (for
// seconds, growing), so the first calls to a node that restarted, a
// submission forwarded to it among them, would fail although it is up.
func (n *Node) clearBackoff(id peer.ID) {
	if sw, ok := n.mesh.Host().Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(id)
	}
}
