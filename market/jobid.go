package market

import (
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidJobID is wrapped by the error ValidateJobID returns.
var ErrInvalidJobID = errors.New("invalid job id")

// MaxJobIDLen is the longest job ID accepted.
const MaxJobIDLen = 64

// JobIDRandomBytes is how many random bytes NewJobID needs.
const JobIDRandomBytes = 10

var jobIDEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewJobID makes a job ID from random bytes: "j" and 16 characters of
// Crockford-style lower-case base32 (80 bits). The caller supplies the
// randomness (crypto/rand in node, fixed bytes in tests) so this package stays
// deterministic. It needs at least JobIDRandomBytes bytes and uses the first
// JobIDRandomBytes.
func NewJobID(random []byte) (string, error) {
	if len(random) < JobIDRandomBytes {
		return "", fmt.Errorf("%w: need %d random bytes, got %d", ErrInvalidJobID, JobIDRandomBytes, len(random))
	}
	return "j" + jobIDEncoding.EncodeToString(random[:JobIDRandomBytes]), nil
}

// ValidateJobID checks a job ID a submitter provides: 1 to MaxJobIDLen
// characters of lower-case letters, digits, '.', '_' and '-', starting with a
// letter or digit. IDs from NewJobID always pass. Job IDs are compared
// exactly (they seed coordinator choice and tie-breaking).
func ValidateJobID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: required", ErrInvalidJobID)
	}
	if len(id) > MaxJobIDLen {
		return fmt.Errorf("%w: at most %d characters, got %d", ErrInvalidJobID, MaxJobIDLen, len(id))
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (i > 0 && strings.ContainsRune("._-", r))
		if !ok {
			return fmt.Errorf("%w: %q: want lower-case letters, digits, '.', '_' and '-', starting with a letter or digit", ErrInvalidJobID, id)
		}
	}
	return nil
}
