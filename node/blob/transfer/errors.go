package transfer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Sentinel errors of transfers.
var (
	// ErrDenied: a peer's Authorizer refused the request. Every
	// *RemoteError of CodeDenied matches it.
	ErrDenied = errors.New("transfer: denied")
	// ErrIncomplete: a fetch ended with chunks no holder served. Every
	// *IncompleteError matches it.
	ErrIncomplete = errors.New("transfer: incomplete")
	// ErrClosed: the Service was closed.
	ErrClosed = errors.New("transfer: closed")
)

// RemoteError is an ERROR frame a peer sent.
type RemoteError struct {
	Peer    peer.ID
	Code    Code
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("transfer: %s: %s: %s", e.Peer.ShortString(), e.Code, e.Message)
}

// Is matches ErrDenied for CodeDenied and blob.ErrQuota for CodeQuota.
func (e *RemoteError) Is(target error) bool {
	return (target == ErrDenied && e.Code == CodeDenied) || (target == blob.ErrQuota && e.Code == CodeQuota)
}

// IncompleteError reports a fetch that could not get every chunk, or
// the manifest itself.
type IncompleteError struct {
	Manifest blob.Digest
	// NoManifest says that no holder served the manifest (so nothing else
	// was asked for).
	NoManifest bool
	Chunks     int   // chunks not fetched
	Bytes      int64 // their size
	// Holders says why each holder that stopped serving stopped (a
	// holder that merely lacked chunks is not listed, unless the manifest
	// was what it lacked).
	Holders map[peer.ID]error
}

func (e *IncompleteError) Error() string {
	var b strings.Builder
	if e.NoManifest {
		fmt.Fprintf(&b, "transfer: manifest %s: no holder served it", e.Manifest)
	} else {
		fmt.Fprintf(&b, "transfer: manifest %s: %d chunks (%d bytes) not fetched", e.Manifest, e.Chunks, e.Bytes)
	}
	for _, p := range slices.Sorted(maps.Keys(e.Holders)) {
		fmt.Fprintf(&b, "; %s: %v", p.ShortString(), e.Holders[p])
	}
	if len(e.Holders) == 0 && !e.NoManifest {
		b.WriteString(": no holder has them")
	}
	if len(e.Holders) == 0 && e.NoManifest {
		b.WriteString(" (no holder to ask)")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrIncomplete) true.
func (e *IncompleteError) Is(target error) bool { return target == ErrIncomplete }

// CorruptError reports a chunk a holder served that did not hash to its
// digest. A fetch counts it and gets the chunk elsewhere.
type CorruptError struct {
	Peer peer.ID
	Err  *blob.DigestError
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("transfer: %s served a corrupt chunk: %v", e.Peer.ShortString(), e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }
