package blob

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseDigest(t *testing.T) {
	good := Sum([]byte("hello"))
	if d, err := ParseDigest(good.String()); err != nil || d != good {
		t.Fatalf("ParseDigest(%s) = %v, %v", good, d, err)
	}
	for _, tc := range []struct{ in, why string }{
		{"", "want sha256:"},
		{good.Hex(), "want sha256:"},
		{"sha512:" + good.Hex(), "want sha256:"},
		{"sha256:" + good.Hex()[:63], "63 hex digits"},
		{"sha256:" + strings.ToUpper(good.Hex()), "not a lower-case hex digit"},
		{"sha256:" + good.Hex()[:63] + "g", "'g' at 70"},
		{"sha256:" + strings.Repeat("0", 64), "zero digest"},
	} {
		_, err := ParseDigest(tc.in)
		if !errors.Is(err, ErrBadDigest) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseDigest(%q) = %v, want ErrBadDigest saying %q", tc.in, err, tc.why)
		}
	}
}

func TestDigestJSON(t *testing.T) {
	d := Sum([]byte("x"))
	b, err := json.Marshal(d)
	if err != nil || string(b) != `"`+d.String()+`"` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back Digest
	if err := json.Unmarshal(b, &back); err != nil || back != d {
		t.Fatalf("Unmarshal = %v, %v", back, err)
	}
	if _, err := json.Marshal(Digest{}); err == nil {
		t.Fatal("the zero digest marshalled")
	}
}

func TestPolynomialIsIrreducibleOfDegree53(t *testing.T) {
	if Polynomial.Deg() != 53 || !Polynomial.Irreducible() {
		t.Fatalf("Polynomial %v: degree %d, irreducible %v", Polynomial, Polynomial.Deg(), Polynomial.Irreducible())
	}
}
