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

// WireVersion is the version of the JSON form of market messages that this
// build writes and reads. It rises with any change an older reader would
// refuse or misread (DecodeMessage refuses unknown fields, so adding a
// field is such a change); the golden files under testdata/wire/ hold the
// messages of each version, and every later build must decode them.
const WireVersion = 2

// wireMessage is the JSON form of a Message: the payload tagged by type.
// V is the wire version; version 1 leaves it out (the nodes of before it
// was introduced refuse unknown fields), later ones write it.
type wireMessage struct {
	V       int             `json:"v,omitempty"`
	From    string          `json:"from"`
	To      string          `json:"to"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// payloads makes an empty payload of each wire type.
var payloads = map[string]func() Payload{
	"bid_request":   func() Payload { return &BidRequest{} },
	"bid":           func() Payload { return &Bid{} },
	"decline":       func() Payload { return &Decline{} },
	"award":         func() Payload { return &Award{} },
	"accept":        func() Payload { return &Accept{} },
	"reject":        func() Payload { return &Reject{} },
	"release":       func() Payload { return &Release{} },
	"start":         func() Payload { return &Start{} },
	"renewal":       func() Payload { return &Renewal{} },
	"renewal_ack":   func() Payload { return &RenewalAck{} },
	"stop":          func() Payload { return &Stop{} },
	"attempt_ended": func() Payload { return &AttemptEnded{} },
	"end_ack":       func() Payload { return &EndAck{} },
	"superseded":    func() Payload { return &Superseded{} },
	"moving":        func() Payload { return &Moving{} },
	"probe_request": func() Payload { return &ProbeRequest{} },
}

// newPayload returns an empty payload of the named type.
func newPayload(typ string) (Payload, bool) {
	f, ok := payloads[typ]
	if !ok {
		return nil, false
	}
	return f(), true
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
	w := wireMessage{From: m.From, To: m.To, Type: m.Payload.Type(), Payload: p}
	if WireVersion > 1 {
		w.V = WireVersion
	}
	return json.Marshal(w)
}

// NewerVersionError is a message of a newer wire version than this build
// reads: its sender runs a newer gpumesh.
type NewerVersionError struct {
	Version int // what the message carries
}

func (e *NewerVersionError) Error() string {
	return fmt.Sprintf("%v: wire version %d, this node reads %d (the sender runs a newer gpumesh)", ErrBadMessage, e.Version, WireVersion)
}

// Unwrap makes errors.Is(err, ErrBadMessage) hold.
func (e *NewerVersionError) Unwrap() error { return ErrBadMessage }

// DecodeMessage reads the JSON form of a message and checks every field as
// Step would. Any error wraps ErrBadMessage. Unknown fields are refused,
// so a typo in a hand-written message does not pass for a default.
func DecodeMessage(b []byte) (Message, error) {
	if len(b) > MaxMessageBytes {
		return Message{}, fmt.Errorf("%w: %s, at most %s", ErrBadMessage, text.Bytes(int64(len(b))), text.Bytes(MaxMessageBytes))
	}
	// The version first, leniently: a newer message may have fields this
	// build does not know, and should be named as newer, not as malformed.
	var v struct {
		V int `json:"v"`
	}
	if json.Unmarshal(b, &v) == nil && v.V > WireVersion {
		return Message{}, &NewerVersionError{Version: v.V}
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
