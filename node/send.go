package node

import (
	"context"
	"errors"
	"sync"
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

// Market messages leave through one lane per destination (a peer, or the
// broadcast topic when the key is ""): a lane sends what is queued for its
// destination in order, one batch at a time, each bounded by sendTimeout,
// and at most Config.SendWorkers lanes send at once. A peer that does not
// answer (frozen, cut off) holds up only its own lane. A shared pool of
// workers did not: with a peer frozen for a few seconds every worker ended
// up waiting on it, the renewal acks to the other runners queued behind,
// and those runners fenced themselves (a 300-fault soak saw it).
const (
	sendTimeout  = 3 * time.Second
	maxLaneQueue = 4096 // messages waiting for one destination; more are dropped
	maxLaneBatch = 256  // messages in one send
)

// lanes are the send lanes, by destination. deliver sends one batch; a
// lane's goroutine is counted in wg and ends when its queue is empty or ctx
// ends.
type lanes struct {
	ctx     context.Context
	wg      *sync.WaitGroup
	deliver func(ctx context.Context, to peer.ID, msgs []gossip.Out) error
	failed  func(to peer.ID, count int, err error)

	mu    sync.Mutex
	by    map[peer.ID]*lane
	slots chan struct{} // one per lane sending now
}

// lane is the queue of one destination; a goroutine runs it while it is
// not empty.
type lane struct {
	msgs []gossip.Out
}

func newLanes(ctx context.Context, wg *sync.WaitGroup, workers int,
	deliver func(context.Context, peer.ID, []gossip.Out) error, failed func(peer.ID, int, error)) *lanes {
	return &lanes{ctx: ctx, wg: wg, deliver: deliver, failed: failed, by: map[peer.ID]*lane{}, slots: make(chan struct{}, workers)}
}

// push queues msgs for to, starting its lane if it has none, and returns
// how many did not fit. The caller must be counted in wg (the driver is),
// so that a lane started now is waited for.
func (ls *lanes) push(to peer.ID, msgs []gossip.Out) (dropped int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.by[to]
	if l == nil {
		l = &lane{}
		ls.by[to] = l
		ls.wg.Add(1)
		go ls.run(to, l)
	}
	if room := max(maxLaneQueue-len(l.msgs), 0); len(msgs) > room {
		dropped, msgs = len(msgs)-room, msgs[:room]
	}
	l.msgs = append(l.msgs, msgs...)
	return dropped
}

// run sends a lane's messages until its queue is empty (then the lane is
// gone, and the next message starts another) or ctx ends.
func (ls *lanes) run(to peer.ID, l *lane) {
	defer ls.wg.Done()
	for {
		ls.mu.Lock()
		k := min(len(l.msgs), maxLaneBatch)
		if k == 0 {
			delete(ls.by, to)
			ls.mu.Unlock()
			return
		}
		batch := l.msgs[:k:k]
		l.msgs = l.msgs[k:]
		ls.mu.Unlock()
		select {
		case ls.slots <- struct{}{}:
		case <-ls.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(ls.ctx, sendTimeout)
		err := ls.deliver(ctx, to, batch)
		cancel()
		<-ls.slots
		if err != nil && ls.ctx.Err() == nil {
			ls.failed(to, len(batch), err)
		}
	}
}

// send encodes the market's messages, groups them by destination and
// queues them on their lanes without blocking the driver. Messages beyond
// a lane's bound are dropped: the market retries what matters. It runs on
// the driver, or, for messages a commit released (commit.go), on the
// goroutine that saw the commit: it reads no state of the driver's.
func (n *Node) send(msgs []market.Message) {
	if len(msgs) == 0 || n.ctx.Err() != nil {
		return
	}
	batches := map[peer.ID][]gossip.Out{}
	var order []peer.ID
	for _, m := range msgs {
		data, err := market.EncodeMessage(m)
		if err != nil {
			n.log.Error("cannot encode a market message", "type", m.Payload.Type(), "err", err)
			continue
		}
		var to peer.ID
		if m.To != market.Broadcast {
			if to, err = peer.Decode(m.To); err != nil {
				n.log.Error("market message to a bad peer ID", "to", m.To, "err", err)
				continue
			}
		}
		if _, ok := batches[to]; !ok {
			order = append(order, to)
		}
		batches[to] = append(batches[to], gossip.Out{Kind: kindMarket, Data: data})
	}
	for _, to := range order {
		if dropped := n.out.push(to, batches[to]); dropped > 0 {
			n.log.Warn("send queue full; messages dropped", "to", to, "count", dropped)
		}
	}
}

// deliver sends one batch of market messages: to a peer's stream, or on
// the bid-request topic when to is "".
func (n *Node) deliver(ctx context.Context, to peer.ID, msgs []gossip.Out) error {
	if to == "" {
		for _, m := range msgs {
			if err := n.gossip.Broadcast(ctx, m.Kind, m.Data); err != nil {
				return err
			}
		}
		return nil
	}
	n.dialable(to)
	return n.direct.Send(ctx, to, msgs...)
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
	var newer *market.NewerVersionError
	if errors.As(err, &newer) {
		n.versions.Note(m.Sender, "market", uint32(newer.Version), market.WireVersion, time.Now())
		n.log.Info("market message of a newer version refused", "from", m.Sender, "err", err)
		return
	}
	if err != nil {
		n.log.Info("malformed market message refused", "from", m.Sender, "err", err)
		return
	}
	if msg.From != m.Sender.String() {
		n.log.Info("market message with a forged sender refused", "from", m.Sender, "claims", msg.From)
		return
	}
	if msg.To != market.Broadcast && msg.To != n.self {
		n.log.Info("market message for another node refused", "from", m.Sender, "to", msg.To)
		return
	}
	if r, ok := msg.Payload.(*market.Renewal); ok {
		n.stages.Renewed(r.Job, time.Now())
	}
	if !n.post(func() {
		after := n.receiptsIn(&msg)
		n.step(market.MessageReceived{Now: time.Now(), Message: msg})
		if after != nil {
			after()
		}
	}) && n.ctx.Err() == nil {
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
