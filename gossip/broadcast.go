package gossip

import (
	"context"
	"crypto/rand"
	"fmt"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// joinBroadcast joins the bid-request topic when Config.OnBroadcast is set.
func (g *Gossip) joinBroadcast() error {
	if g.cfg.OnBroadcast == nil {
		return nil
	}
	g.bseq.Store(uint64(g.cfg.Clock.Now().UnixMicro()))
	topic := g.topics.BidRequest
	if err := g.ps.RegisterTopicValidator(topic, pubsub.ValidatorEx(g.validateBroadcast), pubsub.WithValidatorInline(true)); err != nil {
		return fmt.Errorf("gossip: validator for %s: %w", topic, err)
	}
	var err error
	if g.broadcast, err = g.ps.Join(topic); err != nil {
		return fmt.Errorf("gossip: join %s: %w", topic, err)
	}
	if g.bsub, err = g.broadcast.Subscribe(pubsub.WithBufferSize(1024)); err != nil {
		return fmt.Errorf("gossip: subscribe %s: %w", topic, err)
	}
	return nil
}

// validateBroadcast checks a bid-request topic message: a payload envelope
// of at most MaxEnvelopeSize whose sender is the message's signer, within
// its lifetime. What the payload says is for OnBroadcast's owner to judge.
func (g *Gossip) validateBroadcast(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	m, err := DecodeMessage(msg.GetData(), msg.GetFrom(), g.cfg.Clock.Now(), MaxEnvelopeSize)
	r := ReasonOf(err)
	noteVersion(g.cfg.Versions, msg.GetFrom(), err, g.cfg.Clock.Now())
	g.counters.verdict(msg.GetTopic(), from == g.self, r)
	switch r.Verdict() {
	case Accept:
		msg.ValidatorData = m
		return pubsub.ValidationAccept
	case Ignore:
		return pubsub.ValidationIgnore
	default:
		g.log.Debug("rejected broadcast", "from", from, "author", msg.GetFrom(), "err", err)
		return pubsub.ValidationReject
	}
}

// deliverBroadcasts hands checked broadcasts to OnBroadcast until Close.
func (g *Gossip) deliverBroadcasts() {
	defer close(g.bdone)
	if g.bsub == nil {
		return
	}
	for {
		msg, err := g.bsub.Next(g.ctx)
		if err != nil {
			return
		}
		if m, ok := msg.ValidatorData.(Message); ok {
			g.cfg.OnBroadcast(m)
		}
	}
}

// Broadcast publishes a payload of kind on the bid-request topic, valid for
// DefaultMessageTTL. It needs Config.OnBroadcast (the topic joined).
func (g *Gossip) Broadcast(ctx context.Context, kind string, data []byte) error {
	if g.ctx.Err() != nil {
		return ErrClosed
	}
	if g.broadcast == nil {
		return fmt.Errorf("gossip: broadcast needs Config.OnBroadcast")
	}
	now := g.cfg.Clock.Now()
	nonce := make([]byte, NonceSize)
	_, _ = rand.Read(nonce)
	b, err := EncodeMessage(Message{Sender: g.self, Seq: g.bseq.Add(1), IssuedAt: now,
		ExpiresAt: now.Add(DefaultMessageTTL), Nonce: nonce, Kind: kind, Data: data})
	if err != nil {
		return err
	}
	if len(b) > MaxEnvelopeSize {
		return msgErr(ReasonOversized, "broadcast of %d bytes, limit %d", len(b), MaxEnvelopeSize)
	}
	return g.broadcast.Publish(ctx, b)
}
