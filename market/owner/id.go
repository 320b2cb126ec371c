package owner

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
)

// ID names an owner: IDPrefix and the lower-case, unpadded base32 of the
// owner's ed25519 public key followed by a 4-byte checksum. Build one with
// IDOf or ParseID; the zero ID names nobody.
type ID string

// IDPrefix starts every owner ID; the digit is the format's version.
const IDPrefix = "o1"

// IDLen is the length of an owner ID in bytes.
const IDLen = len(IDPrefix) + 58 // base32 of 36 bytes, unpadded

const checksumLen = 4

// ErrBadID is wrapped by the errors of ParseID.
var ErrBadID = errors.New("not an owner ID")

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func checksum(pub []byte) []byte {
	h := sha256.New()
	h.Write([]byte("gpumesh owner id\x00"))
	h.Write(pub)
	return h.Sum(nil)[:checksumLen]
}

// IDOf returns the owner ID of an ed25519 public key. It panics if pub is
// not ed25519.PublicKeySize bytes, as that is a programming error.
func IDOf(pub ed25519.PublicKey) ID {
	if len(pub) != ed25519.PublicKeySize {
		panic(fmt.Sprintf("owner: public key of %d bytes", len(pub)))
	}
	raw := append(append(make([]byte, 0, ed25519.PublicKeySize+checksumLen), pub...), checksum(pub)...)
	return ID(IDPrefix + idEncoding.EncodeToString(raw))
}

// ParseID checks that s is an owner ID (prefix, length, alphabet and
// checksum) and returns it. Surrounding spaces are not accepted.
func ParseID(s string) (ID, error) {
	_, err := ID(s).PublicKey()
	if err != nil {
		return "", err
	}
	return ID(s), nil
}

// PublicKey returns the public key the ID names, or an error wrapping
// ErrBadID saying what is wrong with it.
func (id ID) PublicKey() (ed25519.PublicKey, error) {
	s := string(id)
	show := s
	if len(show) > 80 {
		show = show[:80] + "..."
	}
	switch {
	case s == "":
		return nil, fmt.Errorf("%w: empty", ErrBadID)
	case !strings.HasPrefix(s, IDPrefix):
		return nil, fmt.Errorf("%w: %q does not start with %q", ErrBadID, show, IDPrefix)
	case len(s) != IDLen:
		return nil, fmt.Errorf("%w: %q has %d characters, want %d", ErrBadID, show, len(s), IDLen)
	}
	raw, err := idEncoding.DecodeString(s[len(IDPrefix):])
	if err != nil || len(raw) != ed25519.PublicKeySize+checksumLen {
		return nil, fmt.Errorf("%w: %q: want lower-case letters a-z and digits 2-7 after %q", ErrBadID, show, IDPrefix)
	}
	pub, sum := raw[:ed25519.PublicKeySize], raw[ed25519.PublicKeySize:]
	if !bytes.Equal(sum, checksum(pub)) {
		return nil, fmt.Errorf("%w: %q: checksum does not match (a typo?)", ErrBadID, show)
	}
	// The last character carries 3 bits of the key and 2 spare ones, which
	// the decoder ignores: only the canonical spelling names the key, so
	// that one key has one ID (allow and deny lists compare IDs as text).
	if IDOf(pub) != id {
		return nil, fmt.Errorf("%w: %q: the last character is not the canonical one (a typo?)", ErrBadID, show)
	}
	return ed25519.PublicKey(pub), nil
}

// Short is the ID cut for display: its prefix and first 8 characters.
func (id ID) Short() string {
	if len(id) <= len(IDPrefix)+8 {
		return string(id)
	}
	return string(id[:len(IDPrefix)+8])
}

// String returns the ID as text.
func (id ID) String() string { return string(id) }
