package gossip

import (
	"context"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// validateCapacity is the capacity topic's validator. Gossipsub has already
// checked the signature (StrictSign) by the time it runs, so msg.GetFrom()
// is the proven author. It decodes and checks the ad (DecodeAd), asks the
// Book whether the seq is new, counts the verdict, and hands the decoded ad
// to the delivery loop as ValidatorData. It takes no lock but the Book's
// read lock and does no I/O.
func (g *Gossip) validateCapacity(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	now := g.cfg.Clock.Now()
	local := from == g.self
	ad, err := DecodeAd(msg.GetData(), msg.GetFrom(), now)
	if err == nil {
		err = g.cfg.Book.CheckSeq(ad.Peer, ad.Seq, now)
	}
	r := ReasonOf(err)
	noteVersion(g.cfg.Versions, msg.GetFrom(), err, now)
	g.counters.verdict(msg.GetTopic(), local, r)
	switch r.Verdict() {
	case Accept:
		msg.ValidatorData = ad
		return pubsub.ValidationAccept
	case Ignore:
		g.log.Debug("ignored capacity ad", "from", from, "author", msg.GetFrom(), "err", err)
		return pubsub.ValidationIgnore
	default:
		g.log.Debug("rejected capacity ad", "from", from, "author", msg.GetFrom(), "err", err)
		return pubsub.ValidationReject
	}
}
