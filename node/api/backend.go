package api

import (
	"context"
	"io"
	"net/http"

	"github.com/gpumesh/gpumesh/market"
)

// LogRequest names the output a GET /v1/jobs/{id}/logs wants.
type LogRequest struct {
	Job   string
	Share int // default 0
	// Epoch names one attempt of the share (its epoch, parameter "epoch");
	// 0, the default, is its latest.
	Epoch  uint64
	Stream string // "stdout" (default) or "stderr"
	Offset int64  // bytes already read
	Follow bool   // keep streaming until the attempt ends
}

// Backend is what the API serves: the node. Its methods are called from
// request goroutines, concurrently, and return *HTTPError for expected
// failures (400 with Field for a bad spec, 404 for an unknown job); any
// other error is a 500.
type Backend interface {
	// Submit validates spec, hands it to the job's coordinator and returns
	// the job's record once the coordinator has acknowledged it.
	Submit(ctx context.Context, spec market.JobSpec) (market.JobRecord, error)
	// Jobs lists the jobs this node knows: those it coordinates or holds a
	// replica of, and those submitted through it.
	Jobs(ctx context.Context) ([]market.JobRecord, error)
	// Job returns a job's record from whichever peer holds it.
	Job(ctx context.Context, id string) (market.JobRecord, error)
	// Cancel cancels a job through its coordinator.
	Cancel(ctx context.Context, id string) (market.JobRecord, error)
	// Scale changes an elastic job's card count through its coordinator.
	Scale(ctx context.Context, id string, cards int) (market.JobRecord, error)
	// Logs writes a share's output to w from req.Offset, following it while
	// the attempt runs when req.Follow is set; flush is called after each
	// chunk.
	Logs(ctx context.Context, req LogRequest, w io.Writer, flush func()) error
	// Peers lists the mesh's members, this node first.
	Peers(ctx context.Context) ([]Peer, error)
	// Cards lists this node's cards.
	Cards(ctx context.Context) ([]Card, error)
	// Status is the operator's one-screen summary (GET /v1/status).
	Status(ctx context.Context) (any, error)
	// Subscribe returns a channel of events and a function that ends the
	// subscription. The channel is closed when the subscription ends.
	Subscribe() (<-chan Event, func())
	// Drain makes the node leave on purpose: it stops offering its cards
	// and moves the shares it runs elsewhere (a service's replacement
	// first), returning when none is left here or ctx ends.
	Drain(ctx context.Context) error
	// Ready reports the readiness checks of /readyz by name: nil for a check
	// that passes, else why it does not. /readyz answers 503 while any
	// fails. It must not block.
	Ready() map[string]error
	// Metrics serves /metrics; nil serves 404.
	Metrics() http.Handler
}

// SignedSubmitter is implemented by a Backend that takes owners' signed
// specs: POST /v1/jobs then calls SubmitSigned with what came, a spec with
// its signature or a bare spec (zero Signature) that the Backend signs for
// an owner whose key it holds (Caller.Key) or refuses. A Backend without it
// gets Submit with the spec alone.
type SignedSubmitter interface {
	SubmitSigned(ctx context.Context, s market.SignedSpec) (market.JobRecord, error)
}

// CheckpointRequest names the checkpoint a GET /v1/jobs/{id}/checkpoint
// wants: the latest accepted one of a share.
type CheckpointRequest struct {
	Job   string
	Share int // default 0
}

// CheckpointReader is implemented by a Backend that serves jobs' latest
// checkpoints (the archive a job's checkpoint directory was packed into) to
// their owners. Without it the route answers 404.
type CheckpointReader interface {
	// Checkpoint writes the share's latest checkpoint archive to w, or
	// returns an *HTTPError (404 when there is none) before writing.
	Checkpoint(ctx context.Context, req CheckpointRequest, w io.Writer) error
}

// PayloadStore is implemented by a Backend that takes payloads as chunks
// of a manifest (node/blob) from their owners. Without it the payload
// routes answer 404.
type PayloadStore interface {
	// PutPayloadManifest takes the canonical encoding of a payload's
	// manifest for the calling owner, keeps it for a while, and says
	// which of its chunks the node lacks: 400 for a malformed manifest,
	// 403 for a caller that is no owner, 413 for a payload over the
	// node's limit or past the owner's quota there, 507 when the store has
	// no room for it. A refusal keeps nothing.
	PutPayloadManifest(ctx context.Context, manifest []byte) (PayloadUpload, error)
	// PutPayloadChunk stores one chunk of a manifest the caller put
	// before, read from body, and checks it against its digest: 404 when
	// the manifest was not put by the caller or lists no such chunk, 400
	// when the bytes are not the chunk, 507 when the store is full.
	PutPayloadChunk(ctx context.Context, manifest, chunk string, body io.Reader) error
}

// FilesRequest names what a GET /v1/jobs/{id}/files wants: what Path
// names in the working directory of a share of the job, its running
// attempt's or, once none runs, what its newest ended attempt left there
// (market.Placement.Outputs).
type FilesRequest struct {
	Job   string
	Share int // default 0
	// Path is slash-separated and relative to the working directory; a
	// leading "/" is the working directory itself ("/outputs" is
	// "outputs"), and "", "." and "/" name the whole of it.
	Path string
}

// FileCopier is implemented by a Backend that copies files out of jobs'
// working directories to their owners. Without it the route answers 404.
type FileCopier interface {
	// Files writes what req names to w as a tar archive: for a directory
	// an entry "./" first, then its tree under paths relative to it; for
	// a regular file one entry, under its name. Directories, regular
	// files (with their permission bits) and symbolic links, as they
	// are; no times or owners. It returns an *HTTPError before writing
	// anything: 404 for a job, share or path that is not there (or a
	// working directory no longer kept), 403 for another owner's job,
	// 400 for a path that leaves the working directory.
	Files(ctx context.Context, req FilesRequest, w io.Writer) error
}

// SecretStore is implemented by a Backend that keeps owners' secrets for
// the jobs they submit through it. Without it the route answers 404.
type SecretStore interface {
	// PutSecrets keeps values (variable names to values) for the calling
	// owner for a while, and returns what a spec's data.secrets names:
	// 403 for a caller that is no owner, 400 for a bad name or value.
	PutSecrets(ctx context.Context, values map[string]string) (market.SecretsRef, error)
}
