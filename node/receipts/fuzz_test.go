package receipts

import (
	"bytes"
	"testing"
	"time"
)

// Run: go test -run '^$' -fuzz FuzzUnmarshal ./node/receipts/
//
// Unmarshal never panics; what it accepts re-encodes to the same bytes;
// what it refuses wraps ErrMalformed.
func FuzzUnmarshal(f *testing.F) {
	coord, runner := newParty(f, 1), newParty(f, 2)
	is := NewIssuer("lab", runner.id, runner.key, time.Second, nil)
	a := Attempt{"j1", 3, 7}
	r := is.Issue(a, Terms{Owner: "o1x", Coordinator: coord.id, Term: 2, Cards: 8, PriceCNY: 22.5}, 42.5, false, t0)
	f.Add(r.Marshal())
	r.Accept(coord.key)
	f.Add(r.Marshal())
	f.Add([]byte(bodyDomain))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Unmarshal(b)
		if err != nil {
			if !bytesHasErr(err) {
				t.Fatalf("refusal without ErrMalformed: %v", err)
			}
			return
		}
		if again := r.Marshal(); !bytes.Equal(again, b) {
			t.Fatalf("accepted bytes re-encode differently:\n%x\n%x", b, again)
		}
	})
}

func bytesHasErr(err error) bool { return err != nil && isMalformed(err) }
