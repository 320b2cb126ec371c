package probe

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

// Run: go test -run '^$' -fuzz FuzzDecodeAnswer ./node/probe/
//
// DecodeChallenge and DecodeAnswer never panic, refuse with ErrMalformed,
// and what they accept is within the limits (an answer's digests are the
// challenge's blocks).
func FuzzDecodeAnswer(f *testing.F) {
	cfg := scaled(device.DefaultCatalog())
	ch, _, err := cfg.NewChallenge(map[string]uint64{"h100-sxm-80g": 81920})
	if err != nil {
		f.Fatal(err)
	}
	ok, _ := json.Marshal(Answer{Nonce: ch.Nonce, Cards: []CardAnswer{{Card: "GPU-a", Model: "h100-sxm-80g", Digests: make([]uint64, ch.Blocks)}}})
	chRaw, _ := json.Marshal(ch)
	f.Add(ok)
	f.Add(chRaw)
	f.Add([]byte(`{"cards":[{"err":"busy","model":"h100-sxm-80g"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := DecodeChallenge(b); err == nil {
			if c.Check() != nil {
				t.Fatal("an accepted challenge fails its check")
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatalf("refusal without ErrMalformed: %v", err)
		}
		a, err := DecodeAnswer(b, ch)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refusal without ErrMalformed: %v", err)
			}
			return
		}
		for _, c := range a.Cards {
			if c.Err == "" && len(c.Digests) != ch.Blocks {
				t.Fatalf("accepted %d digests", len(c.Digests))
			}
		}
	})
}
