package node

import (
	"bytes"
	"crypto/ed25519"

	"github.com/gpumesh/gpumesh/market/owner"
)

// testOwner is a fixed owner key: seed i, so failures reproduce.
func testOwner(i byte) *owner.Key {
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{i + 1}, ed25519.SeedSize))
	if err != nil {
		panic(err)
	}
	return &k
}
