package market

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gpumesh/gpumesh/internal/text"
)

// MaxMessageBytes bounds the JSON form of one message that DecodeMessage
// accepts (a bid or an award for 4096 cards fits well within it).
const MaxMessageBytes = 1 << 20

// wireMessage is the JSON form of a Message: the payload tagged by type.
type wireMessage struct {
	From    string          `json:"from"`
	To      string          `json:"to"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// newPayload returns an empty payload of the named type.
func newPayload(typ string) (Payload, bool) {
	switch typ {
	case "bid_request":
		return &BidRequest{}, true
	case "bid":
		return &Bid{}, true
	case "decline":
		return &Decline{}, true
	case "award":
		return &Award{}, true
	case "accept":
		return &Accept{}, true
	case "reject":
		return &Reject{}, true
	case "release":
		return &Release{}, true
	case "start":
		return &Start{}, true
	case "renewal":
		return &Renewal{}, true
	case "renewal_ack":
		return &RenewalAck{}, true
	case "stop":
		return &Stop{}, true
	case "attempt_ended":
		return &AttemptEnded{}, true
	case "end_ack":
		return &EndAck{}, true
	case "superseded":
		return &Superseded{}, true
	case "moving":
		return &Moving{}, true
	case "probe_request":
		return &ProbeRequest{}, true
	}
	return nil, false
}

// EncodeMessage returns the JSON form of m: {"from", "to", "type",
// "payload"}. It is one possible wire form (gossip may choose another) and
// the form logs and tests print.
func EncodeMessage(m Message) ([]byte, error) {
	if m.Payload == nil {
		return nil, fmt.Errorf("%w: no payload", ErrBadMessage)
	}
	p, err := json.Marshal(m.Payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wireMessage{From: m.From, To: m.To, Type: m.Payload.Type(), Payload: p})
}

// DecodeMessage reads the JSON form of a message and checks every field as
// Step would. Any error wraps ErrBadMessage. Unknown fields are refused,
// so a typo in a hand-written message does not pass for a default.
func DecodeMessage(b []byte) (Message, error) {
	if len(b) > MaxMessageBytes {
		return Message{}, fmt.Errorf("%w: %s, at most %s", ErrBadMessage, text.Bytes(int64(len(b))), text.Bytes(MaxMessageBytes))
	}
	var w wireMessage
	if err := strictUnmarshal(b, &w); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	p, ok := newPayload(w.Type)
	if !ok {
		return Message{}, fmt.Errorf("%w: unknown type %q", ErrBadMessage, w.Type)
	}
	if err := strictUnmarshal(w.Payload, p); err != nil {
		return Message{}, fmt.Errorf("%w: %s: %v", ErrBadMessage, w.Type, err)
	}
	if err := checkID("from", w.From); err != nil {
		return Message{}, err
	}
	if err := p.validate(); err != nil {
		return Message{}, err
	}
	return Message{From: w.From, To: w.To, Payload: p}, nil
}

func strictUnmarshal(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
