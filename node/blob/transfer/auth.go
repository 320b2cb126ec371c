package transfer

import (
	"context"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Authorizer decides what peers may do with this node's store. The node
// implements it from what it knows of jobs: a job's owner and its current
// attempt may read the job's payload and checkpoints; a runner may push
// the checkpoint its coordinator accepted; a coordinator may push a
// checkpoint to its replicas.
//
// Its methods are called from stream handlers, concurrently, once per
// request (a fetch makes a request per batch of chunks). They may block
// (look something up) for as long as ctx allows; ctx ends when the
// request does. The peer ID is the stream's authenticated remote peer.
type Authorizer interface {
	// AllowRead returns nil if peer p may read manifest m and the chunks
	// it lists, or the reason it may not (sent back to p).
	AllowRead(ctx context.Context, p peer.ID, m blob.Digest) error
	// AllowPush decides whether peer p may have this node fetch manifest
	// m from it and keep it. It returns the lease that will keep the
	// manifest and its chunks (it must exist when the fetch starts), or
	// the reason it refuses (sent back to p). What the fetch stores counts
	// against the store's limit like anything else.
	AllowPush(ctx context.Context, p peer.ID, m blob.Digest) (lease string, err error)
}
