package transfer

import (
	"context"
	"fmt"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// PushStats says what a push moved.
type PushStats struct {
	Chunks int   // chunks the receiver fetched
	Bytes  int64 // bytes it stored (chunks and manifest)
}

// Pusher ships a stored manifest to a peer. *Service implements it.
type Pusher interface {
	Push(ctx context.Context, to peer.ID, m blob.Digest) (PushStats, error)
}

var _ Pusher = (*Service)(nil)

// Push has peer to store manifest m, which this store holds whole: to asks
// its Authorizer (AllowPush), then fetches from this node what it lacks of
// m, which this node lets it read for the length of the push. So only the
// chunks to lacks move, each checked on arrival, within to's quota, and to
// decides what it takes. A push to R holders is R Pushes run at once.
//
// Push returns when to has m whole, or with to's refusal (matching
// ErrDenied or blob.ErrQuota) or failure as a *RemoteError; ctx bounds it.
func (s *Service) Push(ctx context.Context, to peer.ID, m blob.Digest) (PushStats, error) {
	if !s.start() {
		return PushStats{}, ErrClosed
	}
	defer s.wg.Done()
	if missing, err := s.store.Missing(m); err != nil || len(missing) > 0 {
		if err == nil {
			err = &blob.MissingError{Manifest: m, Chunks: len(missing), First: missing[0].Digest}
		}
		return PushStats{}, fmt.Errorf("transfer: push %s: %w", m, err)
	}
	g := grant{to, m}
	s.addGrant(g)
	defer s.dropGrant(g)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	c, err := s.send(ctx, to, request{typ: framePush, scope: m})
	if err != nil {
		return PushStats{}, err
	}
	defer c.reset() // after a clean end, a no-op
	// The receiver answers once its fetch ends: no deadline but ctx.
	c.noDeadline()
	t, p, err := readFrame(c.r, nil)
	if err != nil {
		if ctx.Err() != nil {
			return PushStats{}, ctx.Err()
		}
		return PushStats{}, fmt.Errorf("transfer: push %s to %s: %w", m, to.ShortString(), err)
	}
	switch t {
	case frameDone:
		chunks, bytes, err := decodeDone(p)
		if err != nil {
			return PushStats{}, err
		}
		c.close()
		return PushStats{Chunks: chunks, Bytes: bytes}, nil
	case frameError:
		code, msg, err := decodeError(p)
		if err != nil {
			return PushStats{}, err
		}
		return PushStats{}, &RemoteError{Peer: to, Code: code, Message: msg}
	}
	return PushStats{}, malformed("frame %q in answer to PUSH", t)
}

// Lacks asks peer p which of the given digests it does not hold under
// manifest m: m itself, or chunks m lists (a peer without m holds none of
// them, as far as serving them goes). With chunks nil it asks about m and
// every chunk of m, which this store must hold. Asking needs p's
// permission to read m. A coordinator uses it to learn whether a
// checkpoint sits whole on a holder.
func (s *Service) Lacks(ctx context.Context, p peer.ID, m blob.Digest, chunks []blob.Digest) ([]blob.Digest, error) {
	if !s.start() {
		return nil, ErrClosed
	}
	defer s.wg.Done()
	if chunks == nil {
		man, err := s.store.Manifest(m)
		if err != nil {
			return nil, fmt.Errorf("transfer: lacks %s: %w", m, err)
		}
		chunks = append(chunks, m)
		for _, c := range man.Chunks() {
			chunks = append(chunks, c.Digest)
		}
	}
	var lacking []blob.Digest
	for len(chunks) > 0 {
		n := min(len(chunks), MaxBatch)
		held, err := s.has(ctx, p, m, chunks[:n])
		if err != nil {
			return nil, err
		}
		for i, h := range held {
			if !h {
				lacking = append(lacking, chunks[i])
			}
		}
		chunks = chunks[n:]
	}
	return lacking, nil
}

// has sends one HAS request.
func (s *Service) has(ctx context.Context, p peer.ID, m blob.Digest, ds []blob.Digest) ([]bool, error) {
	c, err := s.send(ctx, p, request{typ: frameHas, scope: m, digests: ds})
	if err != nil {
		return nil, err
	}
	defer c.reset()
	c.deadline()
	t, payload, err := readFrame(c.r, nil)
	if err != nil {
		return nil, fmt.Errorf("transfer: asking %s: %w", p.ShortString(), c.explain(err))
	}
	switch t {
	case frameHave:
		held, err := decodeHave(payload, len(ds))
		if err == nil {
			c.close()
		}
		return held, err
	case frameError:
		code, msg, err := decodeError(payload)
		if err != nil {
			return nil, err
		}
		return nil, &RemoteError{Peer: p, Code: code, Message: msg}
	}
	return nil, malformed("frame %q in answer to HAS", t)
}
