package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Digest names an object of the store: the SHA-256 of its bytes. Its text
// form is "sha256:" and 64 lower-case hex digits, the form the market's
// payload references use. The zero Digest names nothing.
type Digest [sha256.Size]byte

// digestPrefix is the algorithm part of a digest's text form.
const digestPrefix = "sha256:"

// ErrBadDigest reports text that is not a digest.
var ErrBadDigest = errors.New("blob: bad digest")

// Sum returns the digest of b.
func Sum(b []byte) Digest { return sha256.Sum256(b) }

// ParseDigest reads a digest's text form. Upper-case hex is refused, so a
// digest has one spelling.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	hexPart, ok := strings.CutPrefix(s, digestPrefix)
	if !ok {
		return d, fmt.Errorf("%w %q: want %s and 64 hex digits", ErrBadDigest, clip(s), digestPrefix)
	}
	if len(hexPart) != 2*len(d) {
		return d, fmt.Errorf("%w %q: %d hex digits, want 64", ErrBadDigest, clip(s), len(hexPart))
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return d, fmt.Errorf("%w %q: %q at %d is not a lower-case hex digit", ErrBadDigest, clip(s), c, len(digestPrefix)+i)
		}
	}
	if _, err := hex.Decode(d[:], []byte(hexPart)); err != nil {
		return d, fmt.Errorf("%w %q: %w", ErrBadDigest, clip(s), err)
	}
	if d.IsZero() {
		return d, fmt.Errorf("%w: the zero digest names nothing", ErrBadDigest)
	}
	return d, nil
}

// String returns the text form.
func (d Digest) String() string { return digestPrefix + d.Hex() }

// Hex returns the 64 hex digits without the algorithm.
func (d Digest) Hex() string { return hex.EncodeToString(d[:]) }

// Short returns the first 12 hex digits, for logs.
func (d Digest) Short() string { return d.Hex()[:12] }

// IsZero reports whether d is the zero Digest.
func (d Digest) IsZero() bool { return d == Digest{} }

// MarshalText implements encoding.TextMarshaler; the zero Digest has no
// text form.
func (d Digest) MarshalText() ([]byte, error) {
	if d.IsZero() {
		return nil, fmt.Errorf("%w: the zero digest names nothing", ErrBadDigest)
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseDigest.
func (d *Digest) UnmarshalText(b []byte) error {
	v, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
