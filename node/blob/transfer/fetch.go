package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// FetchStats says what a fetch did.
type FetchStats struct {
	Manifest blob.Digest
	// Chunks counts the chunks the manifest lists (each once); Present
	// those the store held before; Fetched those this fetch brought.
	Chunks, Present, Fetched int
	// Bytes is what the fetch stored: its chunks and the manifest.
	Bytes int64
	// Corrupt counts chunks that failed their digest on arrival (each was
	// fetched again from another holder).
	Corrupt int
	// Holders says what each holder served, and why it was dropped.
	Holders map[peer.ID]HolderStats
}

// HolderStats is one holder's part in a fetch.
type HolderStats struct {
	Chunks  int   // chunks stored from it
	Bytes   int64 // their bytes (and the manifest's)
	Missing int   // chunks it did not have
	Corrupt int   // chunks it served corrupt
	// Err is why it was dropped from the fetch (nil if it was not).
	Err error
}

// Fetcher gets a manifest and its chunks from peers into the store.
// *Service implements it.
type Fetcher interface {
	Fetch(ctx context.Context, m blob.Digest, holders []peer.ID, lease string) (FetchStats, error)
}

var _ Fetcher = (*Service)(nil)

// Fetch brings manifest m and every chunk of it the store lacks from
// holders into the store, and adds m to the lease named lease (which must
// exist) before it stores anything, so that what it brings is kept from
// the first chunk, across a failure and a restart: a fetch run again
// after a cut fetches only what is still missing.
//
// The manifest comes from the first holder that has it. The chunks are
// split among the holders that are left: HolderStreams requests of Batch
// chunks in flight to each, at most Window chunks out overall, each
// streamed to disk and checked against its digest by the store's writer
// before it is visible. A chunk a holder lacks or serves corrupt is asked
// of the others; a holder that fails (a cut, a stall past Timeout, a
// refusal, a protocol error, MaxCorrupt corrupt chunks) is dropped and
// its chunks are asked of the others.
//
// Fetch returns an *IncompleteError when chunks are left that no holder
// served, an error matching blob.ErrQuota when the store cannot hold the
// missing chunks (checked with blob.Store.Fits before any is asked for,
// and again by each write), and
// ctx's error when ctx ends. It blocks until all its requests ended.
func (s *Service) Fetch(ctx context.Context, m blob.Digest, holders []peer.ID, lease string) (FetchStats, error) {
	if !s.start() {
		return FetchStats{Manifest: m}, ErrClosed
	}
	defer s.wg.Done()
	return s.fetch(ctx, m, holders, lease)
}

// fetch is Fetch for a caller already counted in s.wg.
func (s *Service) fetch(ctx context.Context, m blob.Digest, holders []peer.ID, lease string) (FetchStats, error) {
	stats := FetchStats{Manifest: m, Holders: make(map[peer.ID]HolderStats)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	var hs []peer.ID
	for _, h := range holders {
		if h != s.h.ID() && h != "" && !slices.Contains(hs, h) {
			hs = append(hs, h)
		}
	}
	if err := s.store.AddToLease(lease, []blob.Digest{m}, nil); err != nil {
		return stats, fmt.Errorf("transfer: fetch %s: %w", m, err)
	}
	f := &fetch{s: s, m: m, stats: &stats}
	if !s.store.Has(blob.KindManifest, m) {
		if err := f.manifest(ctx, hs); err != nil {
			return stats, err
		}
	}
	man, err := s.store.Manifest(m)
	if err != nil {
		return stats, fmt.Errorf("transfer: fetch %s: %w", m, err)
	}
	all := man.Chunks()
	ds := make([]blob.Digest, len(all))
	for i, c := range all {
		ds[i] = c.Digest
	}
	lacked := make(map[blob.Digest]bool)
	for _, d := range s.store.Lacks(ds) {
		lacked[d] = true
	}
	var missing []blob.ChunkRef
	for _, c := range all {
		if lacked[c.Digest] {
			missing = append(missing, c)
		}
	}
	stats.Chunks, stats.Present = len(all), len(all)-len(missing)
	if len(missing) == 0 {
		return stats, nil
	}
	var need int64
	for _, c := range missing {
		need += c.Size
	}
	if err := s.store.Fits(need); err != nil {
		return stats, fmt.Errorf("transfer: fetch %s: %d chunks missing: %w", m, len(missing), err)
	}
	f.q = newSchedule(missing, s.cfg.Window)
	var live []peer.ID
	for _, h := range hs {
		if stats.Holders[h].Err == nil { // not failed when asked for the manifest
			live = append(live, h)
		}
	}
	var wg sync.WaitGroup
	for _, h := range live {
		for range s.cfg.HolderStreams {
			wg.Go(func() { f.work(ctx, h) })
		}
	}
	wg.Wait()
	if f.fatal != nil {
		return stats, f.fatal
	}
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	if left := f.q.left(); len(left) > 0 {
		ie := &IncompleteError{Manifest: m, Chunks: len(left), Holders: make(map[peer.ID]error)}
		for _, c := range left {
			ie.Bytes += c.Size
		}
		for h, hst := range stats.Holders {
			if hst.Err != nil {
				ie.Holders[h] = hst.Err
			}
		}
		return stats, ie
	}
	return stats, nil
}

// fetch is one Fetch in progress.
type fetch struct {
	s     *Service
	m     blob.Digest
	q     *schedule
	mu    sync.Mutex
	stats *FetchStats
	fatal error // ends the fetch: the store failed or is full
}

// note updates a holder's figures.
func (f *fetch) note(h peer.ID, fn func(*HolderStats)) {
	f.mu.Lock()
	hs := f.stats.Holders[h]
	fn(&hs)
	f.stats.Holders[h] = hs
	f.mu.Unlock()
}

// dropHolder takes a holder out of the fetch for err.
func (f *fetch) dropHolder(h peer.ID, err error) {
	f.note(h, func(hs *HolderStats) {
		if hs.Err == nil {
			hs.Err = err
		}
	})
	if f.q != nil {
		f.q.drop(h)
	}
	f.s.log.Info("blob holder dropped from a fetch", "peer", h.ShortString(), "manifest", f.m.Short(), "err", err)
}

// fail ends the fetch for an error no holder can help with.
func (f *fetch) fail(err error) {
	f.mu.Lock()
	if f.fatal == nil {
		f.fatal = err
	}
	f.mu.Unlock()
	if f.q != nil {
		f.q.finish()
	}
}

// manifest gets the manifest from the first holder that has it.
func (f *fetch) manifest(ctx context.Context, hs []peer.ID) error {
	ref := blob.ChunkRef{Digest: f.m}
	for _, h := range hs {
		res, err := f.get(ctx, h, blob.KindManifest, []blob.ChunkRef{ref})
		if err != nil {
			if f.ending(ctx) {
				if f.fatal != nil {
					return f.fatal
				}
				return ctx.Err()
			}
			f.dropHolder(h, err)
			continue
		}
		if res[0] == nil {
			return nil
		}
	}
	return &IncompleteError{Manifest: f.m, NoManifest: true, Holders: f.holderErrors()}
}

func (f *fetch) holderErrors() map[peer.ID]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[peer.ID]error)
	for h, hs := range f.stats.Holders {
		if hs.Err != nil {
			out[h] = hs.Err
		} else if hs.Missing > 0 {
			out[h] = errors.New("does not have it")
		}
	}
	return out
}

// work is one stream's worth of a holder's share.
func (f *fetch) work(ctx context.Context, h peer.ID) {
	for {
		batch := f.q.take(ctx, h, f.s.cfg.Batch)
		if batch == nil {
			return
		}
		refs := make([]blob.ChunkRef, len(batch))
		for i, it := range batch {
			refs[i] = it.ref
		}
		res, err := f.get(ctx, h, blob.KindChunk, refs)
		for i, it := range batch {
			switch {
			case i < len(res) && res[i] == nil:
				f.q.done(it)
			case i < len(res) && res[i] != errNotHeld && !isCorrupt(res[i]):
				f.q.retry(it, "") // the fetch is ending
			case i < len(res):
				f.q.retry(it, h) // lacked or corrupt here: ask the others
			default:
				f.q.retry(it, "") // not answered: the holder is dropped
			}
		}
		if err != nil {
			if !f.ending(ctx) {
				f.dropHolder(h, err)
			}
			return
		}
	}
}

// ending reports whether the fetch is ending for a reason of its own (a
// fatal error, its context), not the holder's.
func (f *fetch) ending(ctx context.Context) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal != nil || ctx.Err() != nil
}

func isCorrupt(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce)
}

// errNotHeld is a MISSING answer.
var errNotHeld = errors.New("not held")

// get asks holder h for objects and stores what comes. It returns one
// result per object answered (nil: stored; errNotHeld; a *CorruptError),
// and an error that drops the holder: the request failed before every
// object was answered, or the holder misbehaved.
func (f *fetch) get(ctx context.Context, h peer.ID, kind blob.Kind, refs []blob.ChunkRef) ([]error, error) {
	ds := make([]blob.Digest, len(refs))
	for i, r := range refs {
		ds[i] = r.Digest
	}
	c, err := f.s.send(ctx, h, request{typ: frameGet, scope: f.m, digests: ds})
	if err != nil {
		return nil, err
	}
	defer c.reset() // after a clean end, a no-op
	buf := make([]byte, MaxData)
	var res []error
	for _, ref := range refs {
		c.deadline()
		t, p, err := readFrame(c.r, buf)
		if err != nil {
			return res, f.readErr(ctx, h, c.explain(err))
		}
		switch t {
		case frameMissing:
			d, err := decodeDigest(p)
			if err != nil {
				return res, err
			}
			if d != ref.Digest {
				return res, malformed("MISSING %s, asked for %s", d.Short(), ref.Digest.Short())
			}
			f.note(h, func(hs *HolderStats) { hs.Missing++ })
			res = append(res, errNotHeld)
		case frameObject:
			o, err := decodeObject(p)
			if err != nil {
				return res, err
			}
			if o.kind != kind || o.digest != ref.Digest || (kind == blob.KindChunk && o.size != ref.Size) {
				return res, malformed("OBJECT %s %s of %d bytes, asked for %s %s of %d", o.kind, o.digest.Short(), o.size, kind, ref.Digest.Short(), ref.Size)
			}
			r, err := f.receive(ctx, c, h, o, buf)
			if err != nil {
				return res, err
			}
			res = append(res, r)
		case frameError:
			code, msg, err := decodeError(p)
			if err != nil {
				return res, err
			}
			return res, &RemoteError{Peer: h, Code: code, Message: msg}
		default:
			return res, malformed("frame %q in answer to GET", t)
		}
	}
	c.close()
	return res, nil
}

// readErr explains a failed read.
func (f *fetch) readErr(ctx context.Context, h peer.ID, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("transfer: reading from %s: %w", h.ShortString(), err)
}

// receive stores one object's DATA frames through a writer. It returns
// the object's result, or an error that drops the holder.
func (f *fetch) receive(ctx context.Context, c *conn, h peer.ID, o objectHeader, buf []byte) (error, error) {
	w, err := f.s.store.Writer(o.kind, o.digest, o.size)
	switch {
	case errors.Is(err, blob.ErrExists):
		w = nil // stored meanwhile: read the bytes past
	case err != nil:
		f.fail(fmt.Errorf("transfer: fetch %s: %w", f.m, err))
		return err, err
	default:
		defer w.Close()
	}
	for left := o.size; left > 0; {
		c.deadline()
		t, p, err := readFrame(c.r, buf)
		if err != nil {
			return nil, f.readErr(ctx, h, c.explain(err))
		}
		if t != frameData {
			return nil, malformed("frame %q inside %s %s", t, o.kind, o.digest.Short())
		}
		if int64(len(p)) > left {
			return nil, malformed("%s %s overruns its %d bytes", o.kind, o.digest.Short(), o.size)
		}
		left -= int64(len(p))
		if w != nil {
			if _, err := w.Write(p); err != nil {
				f.fail(fmt.Errorf("transfer: fetch %s: %w", f.m, err))
				return err, err
			}
		}
	}
	if w == nil {
		return nil, nil
	}
	err = w.Commit()
	var de *blob.DigestError
	switch {
	case errors.As(err, &de):
		ce := &CorruptError{Peer: h, Err: de}
		f.s.log.Warn("blob holder served a corrupt object", "peer", h.ShortString(), "digest", o.digest.Short(), "err", de)
		corrupt := 0
		f.note(h, func(hs *HolderStats) { hs.Corrupt++; corrupt = hs.Corrupt })
		f.mu.Lock()
		f.stats.Corrupt++
		f.mu.Unlock()
		if corrupt >= f.s.cfg.MaxCorrupt {
			return ce, fmt.Errorf("transfer: %d corrupt objects: %w", corrupt, ce)
		}
		return ce, nil
	case err != nil:
		f.fail(fmt.Errorf("transfer: fetch %s: %w", f.m, err))
		return err, err
	}
	chunk := 0
	if o.kind == blob.KindChunk {
		chunk = 1
	}
	f.note(h, func(hs *HolderStats) { hs.Chunks += chunk; hs.Bytes += o.size })
	f.mu.Lock()
	f.stats.Fetched += chunk
	f.stats.Bytes += o.size
	f.mu.Unlock()
	return nil, nil
}
