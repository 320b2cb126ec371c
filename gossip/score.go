package gossip

import (
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Peer score thresholds. A peer's score is the sum of the terms set by
// scoreParams; these are the lines it crosses on the way down.
//
//   - GossipThreshold -10: one invalid message (P4 = -20) takes even a peer
//     with the full positive credit (+10) to -10 and an uncredited one to
//     -20: we stop exchanging IHAVE/IWANT gossip with it.
//   - PublishThreshold -40: we no longer flood-publish our own ads to it.
//   - GraylistThreshold -60: two invalid messages on one topic (P4 =
//     -20 × 2² = -80) put any peer below it: every RPC it sends is dropped
//     unread, so a peer sending garbage stops costing us CPU after its
//     second message (one on each topic costs -40; a third graylists).
//   - AcceptPXThreshold 10: peer exchange is off (peers come from mesh's
//     membership), so PX is accepted only from peers at the positive cap.
//   - OpportunisticGraftThreshold 1: graft better peers when the mesh's
//     median score is below one delivery's worth of credit.
const (
	GossipThreshold             = -10
	PublishThreshold            = -40
	GraylistThreshold           = -60
	acceptPXThreshold           = 10
	opportunisticGraftThreshold = 1
)

// scoreThresholds returns the thresholds above.
func scoreThresholds() *pubsub.PeerScoreThresholds {
	return &pubsub.PeerScoreThresholds{
		GossipThreshold:             GossipThreshold,
		PublishThreshold:            PublishThreshold,
		GraylistThreshold:           GraylistThreshold,
		AcceptPXThreshold:           acceptPXThreshold,
		OpportunisticGraftThreshold: opportunisticGraftThreshold,
	}
}

// scoreParams returns the peer scoring of the network's topics. Why each
// term, on the capacity topic:
//
//   - P1 time in mesh, +0.01 per second up to +3 (5 minutes): a small
//     preference for peers that have stayed, not enough to absorb abuse.
//   - P2 first deliveries, +1 per first delivery up to +7, decaying to zero
//     over 10 minutes: credit for peers that bring us ads first.
//   - TopicScoreCap +10 bounds the sum of the topics' scores, so good
//     behaviour cannot bank enough credit to pay for garbage.
//   - P3/P3b mesh delivery deficits: off. Capacity ads arrive only on change
//     and on slow refreshes, so a quiet mesh would punish honest peers for
//     not delivering messages that were never sent (the gossipsub authors
//     advise P3 only for topics with a steady, known rate).
//   - P4 invalid messages, -20 × count², decaying to zero over 30 minutes:
//     the penalty that makes a peer sending garbage drop (see the
//     thresholds). Honest peers never earn it: gossipsub forwards only what
//     its own validator accepted, and every verdict that an honest forwarder
//     could disagree with (expired, stale, from the future) is Ignore, which
//     carries no penalty. Two invalid messages keep a peer graylisted for
//     about 7 minutes.
//
// On the bid-request topic (broadcast requests, the fallback when a
// coordinator's Book cannot place a job):
//
//   - P4 exactly as on capacity, -20 × count² over 30 minutes: its validator
//     rejects only what no honest peer sends (garbled, oversized, unsigned or
//     forged envelopes, a body that is no payload, a bad nonce, kind or
//     lifetime) and ignores what an honest forwarder may pass on (expired,
//     from the future), so a rejected request is as sure a sign of a broken
//     or hostile peer as a rejected ad. Counts are per topic: one invalid
//     message on each topic costs -40, two on either graylists.
//   - P1 and P2 off: requests are rare and bursty, and anyone may publish
//     them, so first deliveries there say nothing about a peer's worth; and
//     since TopicScoreCap caps the sum after the penalties are added, credit
//     earned here would cancel a penalty earned on capacity (+10 + 10 - 20 =
//     0, never below GossipThreshold). Capacity alone earns credit.
//   - P3/P3b off, for the reason given for capacity: no steady rate.
//
// Across topics:
//
//   - P5 application score: weight 0 for now; node may plug in reputation.
//   - P6 IP colocation: -0.5 × (peers - 64)² beyond 64 peers behind one IP.
//     An internet café puts dozens of honest machines behind one NAT
//     address, so the threshold is generous; a hundred sybils on one
//     address still end up graylisted.
//   - P7 behaviour (broken IHAVE promises, GRAFT spam): -10 × (count - 6)²,
//     decaying over 10 minutes, as deployed gossipsub networks do.
//   - RetainScore 10 minutes: a peer cannot launder a penalty by
//     reconnecting. DecayInterval 1 s, DecayToZero 0.01 (the defaults).
func scoreParams(t Topics) *pubsub.PeerScoreParams {
	p := &pubsub.PeerScoreParams{
		Topics:                      map[string]*pubsub.TopicScoreParams{},
		TopicScoreCap:               10,
		AppSpecificScore:            func(peer.ID) float64 { return 0 },
		AppSpecificWeight:           0,
		IPColocationFactorWeight:    -0.5,
		IPColocationFactorThreshold: 64,
		BehaviourPenaltyWeight:      -10,
		BehaviourPenaltyThreshold:   6,
		BehaviourPenaltyDecay:       pubsub.ScoreParameterDecay(10 * time.Minute),
		DecayInterval:               pubsub.DefaultDecayInterval,
		DecayToZero:                 pubsub.DefaultDecayToZero,
		RetainScore:                 10 * time.Minute,
	}
	p.Topics[t.Capacity] = &pubsub.TopicScoreParams{
		TopicWeight:                    1,
		TimeInMeshWeight:               0.01,
		TimeInMeshQuantum:              time.Second,
		TimeInMeshCap:                  300,
		FirstMessageDeliveriesWeight:   1,
		FirstMessageDeliveriesDecay:    pubsub.ScoreParameterDecay(10 * time.Minute),
		FirstMessageDeliveriesCap:      7,
		InvalidMessageDeliveriesWeight: invalidMessageWeight,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(30 * time.Minute),
	}
	p.Topics[t.BidRequest] = &pubsub.TopicScoreParams{
		TopicWeight:                    1,
		TimeInMeshQuantum:              time.Second, // required even with P1 off
		InvalidMessageDeliveriesWeight: invalidMessageWeight,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(30 * time.Minute),
	}
	return p
}

// invalidMessageWeight is P4's weight on every topic (see scoreParams).
const invalidMessageWeight = -20
