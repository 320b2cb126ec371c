package gossip

import (
	"context"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// attacker is a host that speaks gossipsub's wire protocol by hand, so it
// can send what an honest gossipsub never would: unsigned messages, bad
// signatures, garbage. It writes RPCs straight onto a stream to its victim.
type attacker struct {
	t     testing.TB
	h     host.Host
	key   crypto.PrivKey
	topic string
	w     msgio.WriteCloser
	seqno uint64
}

// newAttacker connects a fresh host to victim and opens a gossipsub stream
// to it, subscribed to topic. It returns once the victim's gossipsub has
// greeted it, which is after the victim started scoring it.
func newAttacker(t testing.TB, tn *testNet, victim host.Host, topic string) *attacker {
	t.Helper()
	h := tn.addHost()
	// Gossipsub tells messages apart by author and seqno; the attacker also
	// signs as other peers, so its seqnos start at random.
	a := &attacker{t: t, h: h, key: h.Peerstore().PrivKey(h.ID()), topic: topic, seqno: mrand.Uint64() >> 1}
	hello := make(chan struct{})
	var helloOnce sync.Once
	h.SetStreamHandler(pubsub.GossipSubID_v12, func(s network.Stream) {
		r := msgio.NewVarintReaderSize(s, MaxPubSubMessageSize)
		first := true
		for {
			b, err := r.ReadMsg()
			if err != nil {
				s.Reset()
				return
			}
			r.ReleaseMsg(b)
			if first {
				helloOnce.Do(func() { close(hello) })
				first = false
			}
		}
	})
	// The victim's gossipsub opens its stream once identify tells it that
	// the attacker speaks gossipsub. A connection made right after
	// SetStreamHandler can be identified from a stale protocol list, with no
	// update pushed later; reconnecting identifies afresh.
	for attempt := 1; ; attempt++ {
		tn.connect(h, victim)
		select {
		case <-hello:
		case <-time.After(500 * time.Millisecond):
			if attempt == 20 {
				t.Fatal("victim's gossipsub never opened a stream to the attacker")
			}
			if err := tn.mn.DisconnectPeers(h.ID(), victim.ID()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		break
	}
	s, err := h.NewStream(context.Background(), victim.ID(), pubsub.GossipSubID_v12)
	if err != nil {
		t.Fatal(err)
	}
	a.w = msgio.NewVarintWriter(s)
	sub := true
	a.writeRPC(&pubsubpb.RPC{Subscriptions: []*pubsubpb.RPC_SubOpts{{Subscribe: &sub, Topicid: &topic}}})
	return a
}

func (a *attacker) writeRPC(rpc *pubsubpb.RPC) {
	a.t.Helper()
	if err := a.tryWriteRPC(rpc); err != nil {
		a.t.Fatalf("attacker write: %v", err)
	}
}

func (a *attacker) tryWriteRPC(rpc *pubsubpb.RPC) error {
	b, err := proto.Marshal(rpc)
	if err != nil {
		a.t.Fatal(err)
	}
	return a.w.WriteMsg(b)
}

// send publishes msgs to the victim in one RPC.
func (a *attacker) send(msgs ...*pubsubpb.Message) {
	a.t.Helper()
	a.writeRPC(&pubsubpb.RPC{Publish: msgs})
}

// message returns a message carrying data on the attacker's topic, authored
// by from and signed with key (unsigned when key is nil).
func (a *attacker) message(data []byte, from peer.ID, key crypto.PrivKey) *pubsubpb.Message {
	a.t.Helper()
	a.seqno++
	return pubsubMessage(a.t, a.topic, from, a.seqno, data, key)
}

// pubsubMessage builds a pubsub message as gossipsub signs one: key signs
// the message without signature and key, prefixed with pubsub.SignPrefix.
// A nil key leaves it unsigned.
func pubsubMessage(t testing.TB, topic string, from peer.ID, seqno uint64, data []byte, key crypto.PrivKey) *pubsubpb.Message {
	t.Helper()
	m := &pubsubpb.Message{From: []byte(from), Data: data, Seqno: binary.BigEndian.AppendUint64(nil, seqno), Topic: &topic}
	if key == nil {
		return m
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := key.Sign(append([]byte(pubsub.SignPrefix), b...))
	if err != nil {
		t.Fatal(err)
	}
	m.Signature = sig
	return m
}

// signed returns data as a message authored and signed by the attacker.
func (a *attacker) signed(data []byte) *pubsubpb.Message {
	return a.message(data, a.h.ID(), a.key)
}
