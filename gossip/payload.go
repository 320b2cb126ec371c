package gossip

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/gossip/gossippb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Limits of payload messages.
const (
	// MaxDirectSize bounds one envelope on a direct stream: room for a job
	// record of a thousand-card job. Payload archives are streamed in chunks
	// far below it.
	MaxDirectSize = 4 << 20
	// MaxKindLen bounds Message.Kind.
	MaxKindLen = 64
	// DefaultMessageTTL is how long a payload message stays valid unless its
	// author says otherwise.
	DefaultMessageTTL = time.Minute
)

// Message is a payload of a layer above gossip in its envelope: who wrote it,
// when, until when it is valid, what kind it is and its bytes. gossip checks
// the envelope; the owner of Kind decodes Data.
type Message struct {
	Sender    peer.ID
	Seq       uint64
	IssuedAt  time.Time
	ExpiresAt time.Time
	Nonce     []byte // NonceSize bytes
	Kind      string
	Data      []byte
}

// EncodeMessage encodes m as a version-1 envelope. Kind must be 1 to
// MaxKindLen bytes and Nonce NonceSize bytes; ExpiresAt must lie after
// IssuedAt, at most MaxTTL later.
func EncodeMessage(m Message) ([]byte, error) {
	if err := checkKind(m.Kind); err != nil {
		return nil, err
	}
	if len(m.Nonce) != NonceSize {
		return nil, msgErr(ReasonBadField, "nonce: %d bytes, want %d", len(m.Nonce), NonceSize)
	}
	if ttl := m.ExpiresAt.Sub(m.IssuedAt); ttl <= 0 || ttl > MaxTTL {
		return nil, msgErr(ReasonBadField, "lifetime %s: want (0, %s]", ttl, MaxTTL)
	}
	env := &gossippb.Envelope{
		Version:     Version,
		Sender:      []byte(m.Sender),
		Seq:         m.Seq,
		IssuedAtMs:  m.IssuedAt.UnixMilli(),
		ExpiresAtMs: m.ExpiresAt.UnixMilli(),
		Nonce:       m.Nonce,
		Body:        &gossippb.Envelope_Payload{Payload: &gossippb.Payload{Kind: m.Kind, Data: m.Data}},
	}
	out, err := proto.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("gossip: encoding %s message: %w", m.Kind, err)
	}
	if len(out) > MaxDirectSize {
		return nil, msgErr(ReasonOversized, "%s message of %d bytes, limit %d", m.Kind, len(out), MaxDirectSize)
	}
	return out, nil
}

// DecodeMessage parses a payload envelope received from peer from (the
// stream's remote peer, or the topic message's signer) and checks it at time
// now: at most limit bytes, this wire version, a payload body, sender ==
// from, a nonce, a kind, and a lifetime that covers now.
func DecodeMessage(data []byte, from peer.ID, now time.Time, limit int) (Message, error) {
	env, err := decodeEnvelope(data, limit)
	if err != nil {
		return Message{}, err
	}
	body, ok := env.GetBody().(*gossippb.Envelope_Payload)
	if !ok || body.Payload == nil {
		return Message{}, msgErr(ReasonUnexpectedBody, "want a payload, got %T", env.GetBody())
	}
	m := Message{
		Sender:    peer.ID(env.GetSender()),
		Seq:       env.GetSeq(),
		IssuedAt:  time.UnixMilli(env.GetIssuedAtMs()),
		ExpiresAt: time.UnixMilli(env.GetExpiresAtMs()),
		Nonce:     env.GetNonce(),
		Kind:      body.Payload.GetKind(),
		Data:      body.Payload.GetData(),
	}
	if m.Sender != from {
		return Message{}, msgErr(ReasonForgedSender, "sender %s, delivered by %s", m.Sender, from)
	}
	if len(m.Nonce) != NonceSize {
		return Message{}, msgErr(ReasonBadField, "nonce: %d bytes, want %d", len(m.Nonce), NonceSize)
	}
	if err := checkKind(m.Kind); err != nil {
		return Message{}, err
	}
	if ttl := m.ExpiresAt.Sub(m.IssuedAt); ttl <= 0 || ttl > MaxTTL {
		return Message{}, msgErr(ReasonBadField, "lifetime %s: want (0, %s]", ttl, MaxTTL)
	}
	return m, CheckTime(m.IssuedAt, m.ExpiresAt, now)
}

func checkKind(kind string) error {
	if kind == "" || len(kind) > MaxKindLen {
		return msgErr(ReasonBadField, "kind %q: want 1 to %d bytes", kind, MaxKindLen)
	}
	for _, r := range kind {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return msgErr(ReasonBadField, "kind %q: want a-z, 0-9, '.', '-', '_'", kind)
		}
	}
	return nil
}
