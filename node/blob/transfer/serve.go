package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// serve answers the requests of an inbound stream, in order, until the
// asker half-closes it. A PUSH is a stream's only request.
func (s *Service) serve(ctx context.Context, st network.Stream) {
	c := newConn(st, s.cfg.Timeout)
	from := st.Conn().RemotePeer()
	log := s.log.With("peer", from.ShortString())
	var buf []byte // DATA frames' buffer, made at the first GET
	for n := 0; ; n++ {
		c.deadline()
		t, p, err := readFrame(c.r, nil)
		if n > 0 && errors.Is(err, io.EOF) {
			c.close() // the asker is done
			return
		}
		if errors.Is(err, ErrMalformed) {
			s.refuse(c, CodeBadRequest, err.Error())
			return
		}
		if err != nil {
			log.Debug("blob request unreadable", "err", c.explain(err))
			c.reset()
			return
		}
		q, err := decodeRequest(t, p)
		if err == nil && q.typ == framePush && n > 0 {
			err = malformed("PUSH after other requests on a stream")
		}
		if err != nil {
			s.refuse(c, CodeBadRequest, err.Error())
			return
		}
		if q.typ == frameGet && buf == nil {
			buf = make([]byte, MaxData)
		}
		if !s.serveOne(ctx, c, from, log.With("manifest", q.scope.Short()), q, buf) {
			return
		}
		if q.typ == framePush {
			c.close()
			return
		}
	}
}

// serveOne answers one request, when a turn comes within Timeout. It
// reports whether the stream goes on.
func (s *Service) serveOne(ctx context.Context, c *conn, from peer.ID, log *slog.Logger, q request, buf []byte) bool {
	wait := time.NewTimer(s.cfg.Timeout)
	select {
	case s.slots <- struct{}{}:
		wait.Stop()
		defer func() { <-s.slots }()
	case <-wait.C:
		s.refuse(c, CodeBusy, "too many blob requests in progress")
		return false
	case <-ctx.Done():
		c.reset()
		return false
	}

	var err error
	switch q.typ {
	case frameGet, frameHas:
		if err := s.mayRead(ctx, from, q.scope); err != nil {
			log.Info("blob read refused", "err", err)
			s.refuse(c, CodeDenied, err.Error())
			return false
		}
		if q.typ == frameGet {
			err = s.serveGet(c, q, buf)
		} else {
			err = s.serveHas(c, q)
		}
	case framePush:
		err = s.servePush(ctx, c, from, q.scope)
	}
	if err != nil {
		log.Debug("blob request failed", "err", c.explain(err))
		c.reset()
		return false
	}
	if c.ended { // refused
		return false
	}
	c.deadline()
	if err := c.w.Flush(); err != nil {
		c.reset()
		return false
	}
	return true
}

// refuse answers with an ERROR frame and ends the stream.
func (s *Service) refuse(c *conn, code Code, msg string) {
	c.deadline()
	if writeFrame(c.w, frameError, encodeError(code, msg)) != nil || c.w.Flush() != nil {
		c.reset()
		return
	}
	c.close()
}

// serveGet sends the objects asked for, in order: the manifest itself or
// chunks it lists, each as OBJECT and DATA frames, or MISSING.
func (s *Service) serveGet(c *conn, q request, buf []byte) error {
	members := s.members(q.scope)
	for _, d := range q.digests {
		kind := blob.KindChunk
		switch {
		case d == q.scope:
			kind = blob.KindManifest
		case members == nil:
			// Without the manifest nothing can be served under it.
			if err := s.missing(c, d); err != nil {
				return err
			}
			continue
		default:
			if _, ok := members[d]; !ok {
				s.refuse(c, CodeBadRequest, fmt.Sprintf("%s is not a chunk of manifest %s", d, q.scope))
				return nil
			}
		}
		if err := s.sendObject(c, kind, d, buf); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) missing(c *conn, d blob.Digest) error {
	c.deadline()
	return writeFrame(c.w, frameMissing, d[:])
}

// sendObject streams one stored object, or MISSING.
func (s *Service) sendObject(c *conn, kind blob.Kind, d blob.Digest, buf []byte) error {
	r, size, err := s.store.Reader(kind, d)
	if errors.Is(err, blob.ErrNotFound) {
		return s.missing(c, d)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	c.deadline()
	if err := writeFrame(c.w, frameObject, objectHeader{kind: kind, digest: d, size: size}.encode()); err != nil {
		return err
	}
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return fmt.Errorf("reading %s %s: %w", kind, d, err)
		}
		c.deadline()
		if err := writeFrame(c.w, frameData, buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// serveHas answers which of the digests this node holds under the
// manifest (the manifest itself, or chunks it lists).
func (s *Service) serveHas(c *conn, q request) error {
	members := s.members(q.scope)
	held := make([]bool, len(q.digests))
	for i, d := range q.digests {
		if d == q.scope {
			held[i] = s.store.Has(blob.KindManifest, d)
			continue
		}
		if _, ok := members[d]; ok {
			held[i] = s.store.Has(blob.KindChunk, d)
		}
	}
	c.deadline()
	return writeFrame(c.w, frameHave, encodeHave(held))
}

// servePush fetches a manifest from the peer pushing it, when the
// Authorizer agrees, and answers DONE with what it fetched.
func (s *Service) servePush(ctx context.Context, c *conn, from peer.ID, m blob.Digest) error {
	lease, err := s.cfg.Auth.AllowPush(ctx, from, m)
	if err != nil {
		s.log.Info("blob push refused", "peer", from.ShortString(), "manifest", m.Short(), "err", err)
		s.refuse(c, CodeDenied, err.Error())
		return nil
	}
	// The fetch takes as long as it takes; its own requests have
	// deadlines. The pusher waits without one.
	c.noDeadline()
	st, err := s.fetch(ctx, m, []peer.ID{from}, lease, true)
	if err != nil {
		code := CodeFailed
		if errors.Is(err, blob.ErrQuota) {
			code = CodeQuota
		}
		s.refuse(c, code, err.Error())
		return nil
	}
	c.deadline()
	return writeFrame(c.w, frameDone, encodeDone(st.Fetched, st.Bytes))
}

// members returns the set of chunks a stored manifest lists, or nil when
// the store does not hold it (or it does not decode).
func (s *Service) members(m blob.Digest) map[blob.Digest]struct{} {
	if set := s.scopes.get(m); set != nil {
		return set
	}
	man, err := s.store.Manifest(m)
	if err != nil {
		return nil
	}
	set := make(map[blob.Digest]struct{})
	for _, c := range man.Chunks() {
		set[c.Digest] = struct{}{}
	}
	s.scopes.put(m, set)
	return set
}

// scopeCache keeps the chunk sets of the manifests served last: a fetch
// asks for a manifest's chunks in many requests.
type scopeCache struct {
	mu    sync.Mutex
	max   int
	order []blob.Digest
	sets  map[blob.Digest]map[blob.Digest]struct{}
}

func newScopeCache(max int) *scopeCache {
	return &scopeCache{max: max, sets: make(map[blob.Digest]map[blob.Digest]struct{})}
}

func (c *scopeCache) get(m blob.Digest) map[blob.Digest]struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sets[m]
}

func (c *scopeCache) put(m blob.Digest, set map[blob.Digest]struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sets[m]; ok {
		return
	}
	if len(c.order) == c.max {
		delete(c.sets, c.order[0])
		c.order = c.order[1:]
	}
	c.order = append(c.order, m)
	c.sets[m] = set
}
