package gossip

import (
	"bytes"
	"testing"
	"time"
)

// Run: go test -run '^$' -fuzz FuzzDecodeMessage ./gossip/
//
// Whatever DecodeMessage accepts from a sender re-encodes to an envelope
// that decodes to the same message, and nothing it accepts claims another
// sender or lies outside its lifetime.
func FuzzDecodeMessage(f *testing.F) {
	now := time.UnixMilli(fuzzNowMs)
	sender := fuzzSender()
	good, err := EncodeMessage(Message{Sender: sender, Seq: 7, IssuedAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Minute),
		Nonce: bytes.Repeat([]byte{1}, NonceSize), Kind: "market", Data: []byte(`{"type":"bid"}`)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMessage(data, sender, now, MaxDirectSize)
		if err != nil {
			return
		}
		if m.Sender != sender || !now.Before(m.ExpiresAt) || m.Kind == "" {
			t.Fatalf("accepted %+v", m)
		}
		again, err := EncodeMessage(m)
		if err != nil {
			t.Fatalf("accepted message does not re-encode: %v", err)
		}
		m2, err := DecodeMessage(again, sender, now, MaxDirectSize)
		if err != nil || m2.Kind != m.Kind || !bytes.Equal(m2.Data, m.Data) || m2.Seq != m.Seq {
			t.Fatalf("round trip: %+v, %v", m2, err)
		}
	})
}
