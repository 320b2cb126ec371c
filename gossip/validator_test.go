package gossip

import (
	"bytes"
	"context"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip/gossippb"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// validatorRig is a victim node with one honest friend whose ad (seq 10) is
// in the victim's Book, ready for attackers.
type validatorRig struct {
	tn             *testNet
	victim, friend *Gossip
	friendID       peer.ID
	topic          string // the attackers'
	now            time.Time
	broadcasts     atomic.Int64 // bid requests the victim delivered to OnBroadcast
}

func newValidatorRig(t *testing.T) *validatorRig { return newRigOn(t, false) }

// newBroadcastRig is a validatorRig whose attackers speak on the
// bid-request topic, which the victim and the friend joined (OnBroadcast).
func newBroadcastRig(t *testing.T) *validatorRig { return newRigOn(t, true) }

func newRigOn(t *testing.T, broadcast bool) *validatorRig {
	tn := newTestNet(t)
	vh, fh := tn.addHost(), tn.addHost()
	vcfg, fcfg := Config{ScoreInspectPeriod: 20 * time.Millisecond}, Config{}
	r := &validatorRig{tn: tn, friendID: fh.ID(), now: time.Now()}
	if broadcast {
		vcfg.OnBroadcast = func(Message) { r.broadcasts.Add(1) }
		fcfg.OnBroadcast = func(Message) {}
	}
	r.victim, r.friend = startGossip(t, vh, vcfg), startGossip(t, fh, fcfg)
	r.topic = r.victim.Topics().Capacity
	if broadcast {
		r.topic = r.victim.Topics().BidRequest
	}
	tn.connect(vh, fh)
	waitMesh(t, r.victim, r.friend)
	if err := r.friend.PublishAd(context.Background(), testAd(fh.ID(), 10, r.now)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the friend's ad reaches the victim", func() bool {
		_, ok := r.victim.Book().Get(fh.ID(), time.Now())
		return ok
	})
	return r
}

func waitMesh(t testing.TB, gs ...*Gossip) {
	t.Helper()
	for _, g := range gs {
		select {
		case <-g.MeshReady():
		case <-time.After(10 * time.Second):
			t.Fatal("no gossipsub mesh after 10 s")
		}
	}
}

// env encodes ad as an envelope after mut has had its way with it.
func env(ad Ad, mut func(*gossippb.Envelope)) []byte {
	return marshalMutated(envelopeOf(ad, bytes.Repeat([]byte{7}, NonceSize)), mut)
}

// marshalMutated encodes e after mut (if any) has had its way with it.
func marshalMutated(e *gossippb.Envelope, mut func(*gossippb.Envelope)) []byte {
	if mut != nil {
		mut(e)
	}
	b, err := proto.Marshal(e)
	if err != nil {
		panic(err)
	}
	return b
}

func capacity(e *gossippb.Envelope) *gossippb.CapacityAd {
	return e.Body.(*gossippb.Envelope_CapacityAd).CapacityAd
}

func (r *validatorRig) count(reason Reason) uint64 {
	s := r.victim.Stats().Topics[r.topic]
	if reason.Verdict() == Reject {
		return s.Rejected[reason.String()]
	}
	return s.Ignored[reason.String()]
}

func (r *validatorRig) score(p peer.ID) (float64, uint64) {
	r.victim.scoresMu.Lock()
	defer r.victim.scoresMu.Unlock()
	return r.victim.scores[p], r.victim.scoresGen
}

// Every kind of bad message a peer can send is refused for the right
// reason: Reject kinds lower the sender's score below the gossip threshold,
// Ignore kinds (which an honest forwarder can send) leave it alone, and the
// victim's Book does not change either way.
func TestValidatorRefusesBadMessages(t *testing.T) {
	r := newValidatorRig(t)
	friendKey := r.tn.hosts[1].Peerstore().PrivKey(r.friendID)
	now := r.now
	own := func(a *attacker, seq uint64) Ad { return testAd(a.h.ID(), seq, now) }
	signed := func(mut func(*gossippb.Envelope)) func(a *attacker) *pubsubpb.Message {
		return func(a *attacker) *pubsubpb.Message { return a.signed(env(own(a, 1), mut)) }
	}
	friendSigned := func(ad Ad) func(a *attacker) *pubsubpb.Message {
		return func(a *attacker) *pubsubpb.Message { return a.message(env(ad, nil), r.friendID, friendKey) }
	}
	friendAd := func(seq uint64, issued time.Time) Ad { return testAd(r.friendID, seq, issued) }
	group := func(mut func(*gossippb.CardGroup)) func(a *attacker) *pubsubpb.Message {
		return signed(func(e *gossippb.Envelope) { mut(capacity(e).Cards[0]) })
	}

	cases := []validatorCase{
		{"garbled bytes", ReasonMalformed, func(a *attacker) *pubsubpb.Message {
			b := env(own(a, 1), nil)
			return a.signed(b[:len(b)/2]) // cut inside a field
		}},
		{"oversized envelope", ReasonOversized, func(a *attacker) *pubsubpb.Message {
			return a.signed(make([]byte, MaxEnvelopeSize+1))
		}},
		{"unsigned", ReasonUnsigned, func(a *attacker) *pubsubpb.Message {
			return a.message(env(own(a, 1), nil), a.h.ID(), nil)
		}},
		{"signed by another key than its author's", ReasonBadSignature, func(a *attacker) *pubsubpb.Message {
			return a.message(env(friendAd(11, now), nil), r.friendID, a.key)
		}},
		{"sender field forged to the friend", ReasonForgedSender, signed(func(e *gossippb.Envelope) { e.Sender = []byte(r.friendID) })},
		{"claims to come from the victim itself", ReasonProtocol, func(a *attacker) *pubsubpb.Message {
			return a.message(env(own(a, 1), nil), r.tn.hosts[0].ID(), a.key)
		}},
		{"wrong version", ReasonVersion, signed(func(e *gossippb.Envelope) { e.Version = 2 })},
		{"no body", ReasonUnexpectedBody, signed(func(e *gossippb.Envelope) { e.Body = nil })},
		{"sender not a peer ID", ReasonBadSender, signed(func(e *gossippb.Envelope) { e.Sender = []byte("mallory") })},
		{"short nonce", ReasonBadField, signed(func(e *gossippb.Envelope) { e.Nonce = e.Nonce[:4] })},
		{"seq 0", ReasonBadField, signed(func(e *gossippb.Envelope) { e.Seq = 0 })},
		{"a million cards", ReasonBadField, group(func(g *gossippb.CardGroup) { g.Free = 1_000_000 })},
		{"cards over the per-ad limit in sum", ReasonBadField, group(func(g *gossippb.CardGroup) { g.Free, g.Reserved, g.Busy = 1000, 1000, 1000 })},
		{"NaN price", ReasonBadField, group(func(g *gossippb.CardGroup) { g.PriceCnyPerHour = math.NaN() })},
		{"negative price", ReasonBadField, group(func(g *gossippb.CardGroup) { g.PriceCnyPerHour = -1 })},
		{"infinite compute units", ReasonBadField, group(func(g *gossippb.CardGroup) { g.ComputeUnits = math.Inf(1) })},
		{"zero memory", ReasonBadField, group(func(g *gossippb.CardGroup) { g.MemoryMib = 0 })},
		{"empty model", ReasonBadField, group(func(g *gossippb.CardGroup) { g.Model = "" })},
		{"model twice", ReasonBadField, signed(func(e *gossippb.Envelope) {
			c := capacity(e)
			c.Cards[1].Model = c.Cards[0].Model
		})},
		{"control characters in region", ReasonBadField, signed(func(e *gossippb.Envelope) { capacity(e).Region = "cn\x1b[31m" })},
		{"expiry a year after issue", ReasonBadField, signed(func(e *gossippb.Envelope) { e.ExpiresAtMs = now.Add(365 * 24 * time.Hour).UnixMilli() })},
		{"expiry before issue", ReasonBadField, signed(func(e *gossippb.Envelope) { e.ExpiresAtMs = e.IssuedAtMs - 1 })},
		{"uptime over a century", ReasonBadField, signed(func(e *gossippb.Envelope) { capacity(e).Availability.UptimeS = math.MaxUint64 })},

		{"expired replay of the friend's ad", ReasonExpired, friendSigned(friendAd(11, now.Add(-time.Hour)))},
		{"issued an hour ahead", ReasonFuture, signed(func(e *gossippb.Envelope) {
			e.IssuedAtMs = now.Add(time.Hour).UnixMilli()
			e.ExpiresAtMs = now.Add(time.Hour + time.Minute).UnixMilli()
		})},
		{"stale replay of the friend's ad", ReasonStale, friendSigned(friendAd(9, now))},
		{"duplicate of the friend's seq", ReasonDuplicate, friendSigned(friendAd(10, now))},
	}
	r.refuses(t, cases)

	r.nothingForwarded(t)
}

// validatorCase is one bad message and the reason the victim must give.
type validatorCase struct {
	name   string
	reason Reason
	msg    func(a *attacker) *pubsubpb.Message
}

// refuses sends each case's message from a fresh attacker on the rig's
// topic: the victim counts it under the case's reason; a Reject drops the
// attacker's score below the gossip threshold, an Ignore leaves it alone;
// and nothing is accepted, the Book does not change and OnBroadcast hears
// nothing.
func (r *validatorRig) refuses(t *testing.T, cases []validatorCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAttacker(t, r.tn, r.tn.hosts[0], r.topic)
			book := r.victim.Book().Snapshot(time.Now())
			accepted := r.victim.Stats().Topics[r.topic].Accepted
			delivered := r.broadcasts.Load()
			n := r.count(c.reason)

			a.send(c.msg(a))

			eventually(t, 5*time.Second, "the victim counts "+c.reason.String(), func() bool { return r.count(c.reason) == n+1 })
			if c.reason.Verdict() == Reject {
				eventually(t, 5*time.Second, "the attacker's score drops below the gossip threshold", func() bool {
					s, _ := r.score(a.h.ID())
					return s < GossipThreshold
				})
			} else {
				_, gen := r.score(a.h.ID())
				eventually(t, 5*time.Second, "two more score inspections", func() bool {
					_, g := r.score(a.h.ID())
					return g >= gen+2
				})
				if s, _ := r.score(a.h.ID()); s < 0 {
					t.Errorf("score %v after an ignored message: want >= 0", s)
				}
			}
			if got := r.victim.Book().Snapshot(time.Now()); !reflect.DeepEqual(got, book) {
				t.Errorf("Book changed:\n got %+v\nwant %+v", got, book)
			}
			if got := r.victim.Stats().Topics[r.topic].Accepted; got != accepted {
				t.Errorf("accepted %d messages, want %d", got, accepted)
			}
			if got := r.broadcasts.Load(); got != delivered {
				t.Errorf("OnBroadcast heard %d bid requests, want none", got-delivered)
			}
		})
	}
}

// nothingForwarded checks that the victim passed none of the attackers'
// messages on to the friend, and that the friend keeps its standing.
func (r *validatorRig) nothingForwarded(t *testing.T) {
	t.Helper()
	if s, _ := r.score(r.friendID); s < 0 {
		t.Errorf("friend's score %v: want >= 0", s)
	}
	if fs := r.friend.Stats().Topics[r.topic]; fs.Accepted != 0 || fs.Rejects() != 0 || fs.Ignores() != 0 {
		t.Errorf("the friend heard %+v: the victim forwarded something", fs)
	}
}

// bidEnv encodes a bid request from sender, issued at now, as a payload
// envelope after mut has had its way with it.
func bidEnv(sender peer.ID, now time.Time, mut func(*gossippb.Envelope)) []byte {
	e := &gossippb.Envelope{
		Version:     Version,
		Sender:      []byte(sender),
		Seq:         1,
		IssuedAtMs:  now.UnixMilli(),
		ExpiresAtMs: now.Add(DefaultMessageTTL).UnixMilli(),
		Nonce:       bytes.Repeat([]byte{7}, NonceSize),
		Body:        &gossippb.Envelope_Payload{Payload: &gossippb.Payload{Kind: "bid-request", Data: []byte(`{"cards":8}`)}},
	}
	return marshalMutated(e, mut)
}

func payloadOf(e *gossippb.Envelope) *gossippb.Payload {
	return e.Body.(*gossippb.Envelope_Payload).Payload
}

// The bid-request topic refuses every kind of bad message for the right
// reason, and a rejected one costs its sender score as on the capacity
// topic.
func TestValidatorRefusesBadBidRequests(t *testing.T) {
	r := newBroadcastRig(t)
	friendKey := r.tn.hosts[1].Peerstore().PrivKey(r.friendID)
	now := r.now
	signed := func(mut func(*gossippb.Envelope)) func(a *attacker) *pubsubpb.Message {
		return func(a *attacker) *pubsubpb.Message { return a.signed(bidEnv(a.h.ID(), now, mut)) }
	}
	cases := []validatorCase{
		{"garbled bytes", ReasonMalformed, func(a *attacker) *pubsubpb.Message {
			b := bidEnv(a.h.ID(), now, nil)
			return a.signed(b[:len(b)-3]) // cut inside the payload
		}},
		{"oversized envelope", ReasonOversized, func(a *attacker) *pubsubpb.Message {
			return a.signed(make([]byte, MaxEnvelopeSize+1))
		}},
		{"oversized payload", ReasonOversized, signed(func(e *gossippb.Envelope) {
			payloadOf(e).Data = make([]byte, MaxEnvelopeSize)
		})},
		{"unsigned", ReasonUnsigned, func(a *attacker) *pubsubpb.Message {
			return a.message(bidEnv(a.h.ID(), now, nil), a.h.ID(), nil)
		}},
		{"signed by another key than its author's", ReasonBadSignature, func(a *attacker) *pubsubpb.Message {
			return a.message(bidEnv(r.friendID, now, nil), r.friendID, a.key)
		}},
		{"sender field forged to the friend", ReasonForgedSender, signed(func(e *gossippb.Envelope) { e.Sender = []byte(r.friendID) })},
		{"claims to come from the victim itself", ReasonProtocol, func(a *attacker) *pubsubpb.Message {
			return a.message(bidEnv(r.tn.hosts[0].ID(), now, nil), r.tn.hosts[0].ID(), a.key)
		}},
		{"wrong version", ReasonVersion, signed(func(e *gossippb.Envelope) { e.Version = 2 })},
		{"no body", ReasonUnexpectedBody, signed(func(e *gossippb.Envelope) { e.Body = nil })},
		{"a capacity ad on the bid-request topic", ReasonUnexpectedBody, func(a *attacker) *pubsubpb.Message {
			return a.signed(env(testAd(a.h.ID(), 1, now), nil))
		}},
		{"sender not a peer ID", ReasonBadSender, signed(func(e *gossippb.Envelope) { e.Sender = []byte("mallory") })},
		{"short nonce", ReasonBadField, signed(func(e *gossippb.Envelope) { e.Nonce = e.Nonce[:4] })},
		{"no nonce", ReasonBadField, signed(func(e *gossippb.Envelope) { e.Nonce = nil })},
		{"empty kind", ReasonBadField, signed(func(e *gossippb.Envelope) { payloadOf(e).Kind = "" })},
		{"kind with control characters", ReasonBadField, signed(func(e *gossippb.Envelope) { payloadOf(e).Kind = "bid\x1b[31m" })},
		{"kind over the length limit", ReasonBadField, signed(func(e *gossippb.Envelope) { payloadOf(e).Kind = strings.Repeat("k", MaxKindLen+1) })},
		{"lifetime over the limit", ReasonBadField, signed(func(e *gossippb.Envelope) { e.ExpiresAtMs = now.Add(MaxTTL + time.Minute).UnixMilli() })},
		{"expiry before issue", ReasonBadField, signed(func(e *gossippb.Envelope) { e.ExpiresAtMs = e.IssuedAtMs - 1 })},

		{"expired replay of the friend's request", ReasonExpired, func(a *attacker) *pubsubpb.Message {
			return a.message(bidEnv(r.friendID, now.Add(-time.Hour), nil), r.friendID, friendKey)
		}},
		{"issued an hour ahead", ReasonFuture, signed(func(e *gossippb.Envelope) {
			e.IssuedAtMs = now.Add(time.Hour).UnixMilli()
			e.ExpiresAtMs = now.Add(time.Hour + time.Minute).UnixMilli()
		})},
	}
	r.refuses(t, cases)
	r.nothingForwarded(t)
}

// barrier publishes the friend's ad seq and waits until the victim holds
// it. Anything the victim read from another peer before it has been through
// validation by then.
func (r *validatorRig) barrier(t *testing.T, seq uint64) {
	t.Helper()
	if err := r.friend.PublishAd(context.Background(), testAd(r.friendID, seq, time.Now())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the friend's next ad lands", func() bool {
		ad, ok := r.victim.Book().Get(r.friendID, time.Now())
		return ok && ad.Seq == seq
	})
}

// A peer that keeps sending garbage is graylisted: after its second invalid
// message, even a valid ad from it is dropped unread.
func TestGarbageSenderIsGraylisted(t *testing.T) {
	r := newValidatorRig(t)
	a := newAttacker(t, r.tn, r.tn.hosts[0], r.topic)
	a.send(a.signed([]byte("garbage")), a.signed([]byte("more garbage")))
	eventually(t, 5*time.Second, "score below the graylist threshold", func() bool {
		s, _ := r.score(a.h.ID())
		return s < GraylistThreshold
	})
	before := r.victim.Stats()
	a.send(a.signed(env(testAd(a.h.ID(), 1, time.Now()), nil)))
	eventually(t, 5*time.Second, "the victim reads the RPC", func() bool { return r.victim.Stats().RPCsIn > before.RPCsIn })
	r.barrier(t, 11)

	if _, ok := r.victim.Book().Get(a.h.ID(), time.Now()); ok {
		t.Error("a graylisted peer's ad reached the Book")
	}
	after := r.victim.Stats().Topics[r.topic]
	friendBytes := uint64(len(mustEncode(t, testAd(r.friendID, 11, time.Now()))))
	if got := after.PayloadBytesIn - before.Topics[r.topic].PayloadBytesIn; got != friendBytes {
		t.Errorf("validated %d payload bytes since the valid ad, want %d (the friend's only): the graylisted ad reached validation", got, friendBytes)
	}
	if after.Rejected[ReasonMalformed.String()] != 2 {
		t.Errorf("rejected %v, want 2 malformed", after.Rejected)
	}
}

// A frame beyond MaxPubSubMessageSize never reaches validation: gossipsub
// resets the stream. The Book does not change and the victim keeps working.
func TestFrameOverWireLimitIsDropped(t *testing.T) {
	r := newValidatorRig(t)
	a := newAttacker(t, r.tn, r.tn.hosts[0], r.topic)
	book := r.victim.Book().Snapshot(time.Now())
	before := r.victim.Stats().Topics[r.topic]
	_ = a.tryWriteRPC(&pubsubpb.RPC{Publish: []*pubsubpb.Message{a.signed(make([]byte, MaxPubSubMessageSize+1))}})
	eventually(t, 5*time.Second, "the victim resets the attacker's stream", func() bool {
		return a.tryWriteRPC(&pubsubpb.RPC{}) != nil
	})
	if got := r.victim.Book().Snapshot(time.Now()); !reflect.DeepEqual(got, book) {
		t.Errorf("Book changed: %+v", got)
	}
	if after := r.victim.Stats().Topics[r.topic]; after.PayloadBytesIn != before.PayloadBytesIn || after.Rejects() != 0 {
		t.Errorf("stats %+v: the oversized frame was read", after)
	}
	r.barrier(t, 11) // the victim still takes good ads
}
