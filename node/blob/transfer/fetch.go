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
// after a cut fetches only what is still missing. What it brings is not
// synced chunk by chunk (blob.Writer.SkipSync): it can be fetched again,
// and a chunk a crash left torn is found and removed when it is next
// read (blob.Store.Restore). A push's receiver syncs each chunk.
//
// The manifest comes from the first holder that has it. The chunks are
// split among the holders that are left: HolderStreams streams to each,
// each with Pipeline requests of Batch chunks in flight, at most Window
// chunks out overall. Each chunk is streamed to disk and hashed as it
// arrives, then checked against its digest (and, for a push, synced) by one of Commits
// committers while its stream reads on; it is visible only once checked.
// A chunk a holder lacks or serves corrupt is asked of the others; a
// holder that fails (a cut, a stall past Timeout, a refusal, a protocol
// error, MaxCorrupt corrupt chunks) is dropped and its chunks are asked
// of the others.
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
	return s.fetch(ctx, m, holders, lease, false)
}

// fetch is Fetch for a caller already counted in s.wg. A durable fetch
// syncs each object it stores before it counts it (a push's receiver,
// which answers that it holds what it was pushed); the others leave
// syncing to the kernel (blob.Writer.SkipSync): what they bring can be
// fetched again.
func (s *Service) fetch(ctx context.Context, m blob.Digest, holders []peer.ID, lease string, durable bool) (FetchStats, error) {
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
	f := &fetch{s: s, m: m, stats: &stats, durable: durable}
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
	f.commits = make(chan commit, s.cfg.Window)
	var committers sync.WaitGroup
	for range s.cfg.Commits {
		committers.Go(f.committer)
	}
	f.drop = make(map[peer.ID]context.CancelFunc)
	var live []peer.ID
	for _, h := range hs {
		if stats.Holders[h].Err == nil { // not failed when asked for the manifest
			live = append(live, h)
			var hctx context.Context
			hctx, f.drop[h] = context.WithCancel(ctx)
			defer f.drop[h]()
			f.hctx = append(f.hctx, hctx)
		}
	}
	var wg sync.WaitGroup
	for i, h := range live {
		for range s.cfg.HolderStreams {
			wg.Go(func() { f.work(ctx, f.hctx[i], h) })
		}
	}
	wg.Wait()
	close(f.commits)
	committers.Wait()
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
	s       *Service
	m       blob.Digest
	durable bool // sync what is stored (fetch)
	q       *schedule
	commits chan commit // chunks received whole, to check and sync
	// drop ends a holder's streams; hctx are their contexts. Both are
	// set before the streams start and only read after.
	drop  map[peer.ID]context.CancelFunc
	hctx  []context.Context
	mu    sync.Mutex
	stats *FetchStats
	fatal error // ends the fetch: the store failed or is full
}

// commit is a chunk received whole, for a committer.
type commit struct {
	w  *blob.Writer
	h  peer.ID
	it *item
}

// note updates a holder's figures.
func (f *fetch) note(h peer.ID, fn func(*HolderStats)) {
	f.mu.Lock()
	hs := f.stats.Holders[h]
	fn(&hs)
	f.stats.Holders[h] = hs
	f.mu.Unlock()
}

// dropHolder takes a holder out of the fetch for err, and ends its
// streams. The first reason a holder is dropped for is the one kept.
func (f *fetch) dropHolder(h peer.ID, err error) {
	first := false
	f.note(h, func(hs *HolderStats) {
		if hs.Err == nil {
			hs.Err, first = err, true
		}
	})
	if f.q != nil {
		f.q.drop(h)
	}
	if cancel := f.drop[h]; cancel != nil {
		cancel()
	}
	if first {
		f.s.log.Info("blob holder dropped from a fetch", "peer", h.ShortString(), "manifest", f.m.Short(), "err", err)
	}
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
	for _, h := range hs {
		held, err := f.getManifest(ctx, h)
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
		if held {
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

// getManifest asks holder h for the manifest on a stream of its own and
// stores it. It reports whether h had it, or an error that drops h. Like
// a chunk stream (work), it asks once more when the stream's connection
// turns out to be dead.
func (f *fetch) getManifest(ctx context.Context, h peer.ID) (bool, error) {
	held, dead, err := f.askManifest(ctx, h)
	if err != nil && dead && !f.ending(ctx) {
		f.s.log.Debug("blob stream on a dead connection; opening another", "peer", h.ShortString(), "err", err)
		held, _, err = f.askManifest(ctx, h)
	}
	return held, err
}

// askManifest is one try of getManifest; dead says its stream failed
// because its connection is gone.
func (f *fetch) askManifest(ctx context.Context, h peer.ID) (held, dead bool, err error) {
	c, err := f.s.send(ctx, h, request{typ: frameGet, scope: f.m, digests: []blob.Digest{f.m}})
	if err != nil {
		return false, false, err
	}
	defer c.reset() // after a clean end, a no-op
	w, held, err := f.answer(ctx, c, h, blob.KindManifest, blob.ChunkRef{Digest: f.m}, make([]byte, MaxData))
	if err != nil || !held {
		return false, err != nil && c.st.Conn().IsClosed(), err
	}
	c.close()
	if w == nil {
		return true, false, nil // stored meanwhile
	}
	res, drop := f.settle(h, blob.KindManifest, w.Size(), w.Commit())
	switch {
	case drop != nil:
		return false, false, drop
	case isCorrupt(res):
		return false, false, nil // ask the next holder
	case res != nil:
		return false, false, res // the fetch is ending
	}
	return true, false, nil
}

// work is one stream's worth of a holder's share: it keeps up to
// Pipeline requests in flight on one stream to h, and reads their
// answers in order. It ends when h has nothing more to do, or fails
// (then h is dropped), or hctx ends (h was dropped).
//
// A stream that fails before its first answer because its connection
// is gone is opened once more: a link that was cut and healed leaves a
// connection that died meanwhile, which the host learns of only when it
// is used; the next stream goes over a fresh one.
func (f *fetch) work(ctx, hctx context.Context, h peer.ID) {
	var c *conn
	var sent [][]*item // requests sent and not wholly answered, oldest first
	requeue := func() {
		for _, batch := range sent {
			for _, it := range batch {
				f.q.retry(it, "")
			}
		}
		sent = nil
	}
	answered, redialed := false, false // on c; c was opened again
	var lost error                     // why c was opened again, until it answers
	defer func() {
		requeue()
		if c != nil {
			c.reset() // after a clean end, a no-op
		}
		if lost != nil && !f.ending(ctx) {
			f.dropHolder(h, lost) // no stream to h worked since
		}
	}()
	// fail drops h for err, unless c is worth opening again: it reports
	// whether work goes on.
	fail := func(err error) bool {
		if !answered && !redialed && c != nil && c.st.Conn().IsClosed() && !f.ending(ctx) && hctx.Err() == nil {
			f.s.log.Debug("blob stream on a dead connection; opening another", "peer", h.ShortString(), "err", err)
			requeue()
			c.reset()
			c, redialed, lost = nil, true, err
			return true
		}
		lost = nil // dropped for err instead
		if !f.ending(ctx) {
			f.dropHolder(h, err)
		}
		return false
	}
	buf := make([]byte, MaxData)
	for {
		for len(sent) < f.s.cfg.Pipeline {
			batch := f.q.tryTake(h, f.s.cfg.Batch)
			if batch == nil && len(sent) == 0 {
				// Nothing to ask for now: let the stream go while
				// waiting (an idle stream is reset after Timeout).
				if c != nil {
					c.close()
					c = nil
				}
				batch = f.q.take(ctx, h, f.s.cfg.Batch)
			}
			if batch == nil {
				break
			}
			sent = append(sent, batch)
			if c == nil {
				var err error
				if c, err = f.s.dial(hctx, h); err != nil {
					fail(err)
					return
				}
				answered = false
			}
			ds := make([]blob.Digest, len(batch))
			for i, it := range batch {
				ds[i] = it.ref.Digest
			}
			if err := c.request(request{typ: frameGet, scope: f.m, digests: ds}); err != nil {
				if fail(err) {
					continue
				}
				return
			}
		}
		if len(sent) == 0 {
			if c != nil {
				c.close()
			}
			return
		}
		for len(sent[0]) > 0 {
			it := sent[0][0]
			w, held, err := f.answer(hctx, c, h, blob.KindChunk, it.ref, buf)
			if err != nil {
				if fail(err) {
					break
				}
				return
			}
			answered, lost = true, nil
			sent[0] = sent[0][1:]
			switch {
			case !held:
				f.q.retry(it, h) // ask the others
			case w == nil:
				f.q.done(it) // stored meanwhile
			default:
				f.commits <- commit{w: w, h: h, it: it}
			}
		}
		if len(sent) > 0 { // not requeued
			sent = sent[1:]
		}
	}
}

// committer checks and syncs the chunks the streams received, until the
// fetch's streams have all ended.
func (f *fetch) committer() {
	for c := range f.commits {
		if !f.durable {
			c.w.SkipSync()
		}
		res, drop := f.settle(c.h, blob.KindChunk, c.it.ref.Size, c.w.Commit())
		switch {
		case res == nil:
			f.q.done(c.it)
		case isCorrupt(res):
			f.q.retry(c.it, c.h) // ask the others
		default:
			f.q.retry(c.it, "") // the fetch is ending
		}
		if drop != nil {
			f.dropHolder(c.h, drop)
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

// answer reads the answer about one object from c: MISSING (held is
// false), or the object, written to a store writer for the caller to
// commit (w is nil when the store got it meanwhile: its bytes are read
// past). An error drops the holder, or ends the fetch (a store that
// fails); the writer is then closed.
func (f *fetch) answer(ctx context.Context, c *conn, h peer.ID, kind blob.Kind, ref blob.ChunkRef, buf []byte) (w *blob.Writer, held bool, err error) {
	c.deadline()
	t, p, err := readFrame(c.r, buf)
	if err != nil {
		return nil, false, f.readErr(ctx, h, c.explain(err))
	}
	switch t {
	case frameMissing:
		d, err := decodeDigest(p)
		if err != nil {
			return nil, false, err
		}
		if d != ref.Digest {
			return nil, false, malformed("MISSING %s, asked for %s", d.Short(), ref.Digest.Short())
		}
		f.note(h, func(hs *HolderStats) { hs.Missing++ })
		return nil, false, nil
	case frameObject:
		o, err := decodeObject(p)
		if err != nil {
			return nil, false, err
		}
		if o.kind != kind || o.digest != ref.Digest || (kind == blob.KindChunk && o.size != ref.Size) {
			return nil, false, malformed("OBJECT %s %s of %d bytes, asked for %s %s of %d", o.kind, o.digest.Short(), o.size, kind, ref.Digest.Short(), ref.Size)
		}
		w, err := f.receive(ctx, c, h, o, buf)
		return w, err == nil, err
	case frameError:
		code, msg, err := decodeError(p)
		if err != nil {
			return nil, false, err
		}
		return nil, false, &RemoteError{Peer: h, Code: code, Message: msg}
	}
	return nil, false, malformed("frame %q in answer to GET", t)
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

// receive writes one object's DATA frames to a store writer, hashing
// them as they come, and returns the writer uncommitted (nil when the
// store got the object meanwhile), or an error that drops the holder or
// ends the fetch.
func (f *fetch) receive(ctx context.Context, c *conn, h peer.ID, o objectHeader, buf []byte) (*blob.Writer, error) {
	w, err := f.s.store.Writer(o.kind, o.digest, o.size)
	switch {
	case errors.Is(err, blob.ErrExists):
		w = nil // stored meanwhile: read the bytes past
	case err != nil:
		err = fmt.Errorf("transfer: fetch %s: %w", f.m, err)
		f.fail(err)
		return nil, err
	}
	for left := o.size; left > 0; {
		c.deadline()
		t, p, err := readFrame(c.r, buf)
		if err == nil && t != frameData {
			err = malformed("frame %q inside %s %s", t, o.kind, o.digest.Short())
		} else if err != nil {
			err = f.readErr(ctx, h, c.explain(err))
		} else if int64(len(p)) > left {
			err = malformed("%s %s overruns its %d bytes", o.kind, o.digest.Short(), o.size)
		}
		if err == nil && w != nil {
			if _, err = w.Write(p); err != nil {
				err = fmt.Errorf("transfer: fetch %s: %w", f.m, err)
				f.fail(err)
			}
		}
		if err != nil {
			if w != nil {
				w.Close()
			}
			return nil, err
		}
		left -= int64(len(p))
	}
	return w, nil
}

// settle accounts for a commit's outcome err of an object of size bytes
// from h. It
// returns the object's result (nil: stored; a *CorruptError; another
// error, which ended the fetch) and, when h must be dropped for it, why.
func (f *fetch) settle(h peer.ID, kind blob.Kind, size int64, err error) (res, drop error) {
	var de *blob.DigestError
	switch {
	case errors.As(err, &de):
		ce := &CorruptError{Peer: h, Err: de}
		f.s.log.Warn("blob holder served a corrupt object", "peer", h.ShortString(), "digest", de.Want.Short(), "err", de)
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
		err = fmt.Errorf("transfer: fetch %s: %w", f.m, err)
		f.fail(err)
		return err, nil
	}
	chunk := 0
	if kind == blob.KindChunk {
		chunk = 1
	}
	f.note(h, func(hs *HolderStats) { hs.Chunks += chunk; hs.Bytes += size })
	f.mu.Lock()
	f.stats.Fetched += chunk
	f.stats.Bytes += size
	f.mu.Unlock()
	return nil, nil
}
