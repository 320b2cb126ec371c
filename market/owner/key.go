package owner

import (
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
)

// Key is an owner's ed25519 private key. The zero Key is not usable; build
// one with NewKey, KeyFromSeed or ParseKey.
type Key struct {
	priv ed25519.PrivateKey
}

// ErrBadKey is wrapped by the errors of ParseKey and KeyFromSeed.
var ErrBadKey = errors.New("not an owner key")

// pemType is the PEM block type of a key file.
const pemType = "GPUMESH OWNER KEY"

// idHeader is the PEM header that repeats the key's owner ID for people.
const idHeader = "Owner-Id"

// NewKey makes a new key from random (crypto/rand.Reader in production).
func NewKey(random io.Reader) (Key, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(random, seed); err != nil {
		return Key{}, fmt.Errorf("owner: making a key: %w", err)
	}
	return KeyFromSeed(seed)
}

// KeyFromSeed returns the key of a 32-byte ed25519 seed.
func KeyFromSeed(seed []byte) (Key, error) {
	if len(seed) != ed25519.SeedSize {
		return Key{}, fmt.Errorf("%w: seed of %d bytes, want %d", ErrBadKey, len(seed), ed25519.SeedSize)
	}
	return Key{priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// Valid reports whether k holds a key (the zero Key does not).
func (k Key) Valid() bool { return len(k.priv) == ed25519.PrivateKeySize }

// ID returns the owner ID of the key, "" for the zero Key.
func (k Key) ID() ID {
	if !k.Valid() {
		return ""
	}
	return IDOf(k.priv.Public().(ed25519.PublicKey))
}

// Sign signs msg for purpose (see Verify). It panics on the zero Key.
func (k Key) Sign(purpose Purpose, msg []byte) []byte {
	if !k.Valid() {
		panic("owner: Sign with the zero Key")
	}
	return ed25519.Sign(k.priv, purpose.message(msg))
}

// MarshalText returns the key file's contents: a PEM block of type
// "GPUMESH OWNER KEY" holding the seed, with the owner ID in a header.
func (k Key) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("%w: the zero Key", ErrBadKey)
	}
	return pem.EncodeToMemory(&pem.Block{
		Type:    pemType,
		Headers: map[string]string{idHeader: string(k.ID())},
		Bytes:   k.priv.Seed(),
	}), nil
}

// ParseKey reads a key file's contents (see MarshalText). It refuses
// anything else, trailing data, and a file whose Owner-Id header names
// another key.
func ParseKey(data []byte) (Key, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return Key{}, fmt.Errorf("%w: no %q PEM block", ErrBadKey, pemType)
	}
	if block.Type != pemType {
		return Key{}, fmt.Errorf("%w: PEM block of type %q, want %q", ErrBadKey, block.Type, pemType)
	}
	for _, b := range rest {
		if b != ' ' && b != '\t' && b != '\n' && b != '\r' {
			return Key{}, fmt.Errorf("%w: data after the PEM block", ErrBadKey)
		}
	}
	for h := range block.Headers {
		if h != idHeader {
			return Key{}, fmt.Errorf("%w: unknown PEM header %q", ErrBadKey, h)
		}
	}
	k, err := KeyFromSeed(block.Bytes)
	if err != nil {
		return Key{}, err
	}
	if want, ok := block.Headers[idHeader]; ok && ID(want) != k.ID() {
		return Key{}, fmt.Errorf("%w: header says owner %s, the key is %s", ErrBadKey, ID(want).Short(), k.ID().Short())
	}
	return k, nil
}
