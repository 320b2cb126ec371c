package owner

import (
	"crypto/ed25519"
	"errors"
	"fmt"
)

// Purpose separates what an owner signs, so that a signature made for one
// purpose never verifies for another.
type Purpose string

// The purposes gpumesh signs for.
const (
	// PurposeSpec: a job spec for one mesh (see market.SignSpec).
	PurposeSpec Purpose = "spec/v1"
	// PurposeRequest: a request to a node's API (see SignRequest).
	PurposeRequest Purpose = "request/v1"
)

// ErrBadSignature is wrapped by Verify's error when a signature does not
// verify.
var ErrBadSignature = errors.New("signature does not verify")

func (p Purpose) message(msg []byte) []byte {
	out := make([]byte, 0, len("gpumesh/")+len(p)+1+len(msg))
	out = append(out, "gpumesh/"...)
	out = append(out, p...)
	out = append(out, 0)
	return append(out, msg...)
}

// Verify checks that sig is id's signature of msg for purpose. The error
// wraps ErrBadID for a malformed ID and ErrBadSignature for a signature that
// does not verify.
func Verify(id ID, purpose Purpose, msg, sig []byte) error {
	pub, err := id.PublicKey()
	if err != nil {
		return err
	}
	if len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadSignature, len(sig), ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, purpose.message(msg), sig) {
		return fmt.Errorf("%w: not signed by owner %s", ErrBadSignature, id.Short())
	}
	return nil
}
