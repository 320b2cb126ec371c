package transfer

import (
	"context"
	"slices"
	"sync"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// schedule splits a fetch's chunks among its holders. Each holder's
// workers take batches from the front of one queue in manifest order, so
// a fast holder takes more and a slow one less; a chunk a holder lacked
// or served corrupt goes back in its place, never to that holder again; a
// holder dropped from the fetch takes no more. At most window chunks are
// out at once.
//
// The fetch ends when no worker can take anything: every chunk stored, or
// those left failed by every holder still in the fetch and none out.
type schedule struct {
	mu       sync.Mutex
	pending  []*item
	out      int // chunks taken and not yet stored or put back
	window   int
	dropped  map[peer.ID]bool
	changed  chan struct{} // closed at every change, then replaced
	finished bool
}

// item is one chunk to fetch.
type item struct {
	seq    int // its place in the manifest's order
	ref    blob.ChunkRef
	failed map[peer.ID]bool // holders that lacked it or served it corrupt
}

func newSchedule(refs []blob.ChunkRef, window int) *schedule {
	q := &schedule{window: window, dropped: make(map[peer.ID]bool), changed: make(chan struct{})}
	for i, r := range refs {
		q.pending = append(q.pending, &item{seq: i, ref: r})
	}
	return q
}

// signal wakes the waiting workers; the caller holds q.mu.
func (q *schedule) signal() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// take returns up to max chunks for holder h, waiting while none is
// available but some may come back. It returns nil when h has nothing
// more to do (or ctx ended).
func (q *schedule) take(ctx context.Context, h peer.ID, max int) []*item {
	for {
		q.mu.Lock()
		got, more := q.grab(h, max)
		wait := q.changed
		q.mu.Unlock()
		if got != nil || !more {
			return got
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil
		}
	}
}

// tryTake is take without the wait: it returns nil when nothing is
// available to h now.
func (q *schedule) tryTake(h peer.ID, max int) []*item {
	q.mu.Lock()
	defer q.mu.Unlock()
	got, _ := q.grab(h, max)
	return got
}

// grab takes up to max chunks for h; more is false when h has nothing
// more to do. The caller holds q.mu.
func (q *schedule) grab(h peer.ID, max int) (got []*item, more bool) {
	if q.dropped[h] || q.finished {
		return nil, false
	}
	// Scan from the front; the chunks h failed that the scan passes are
	// moved up to just before the rest, so taking costs what was
	// scanned, not the length of the queue.
	var skipped []*item
	eligible := false
	i := 0
	for ; i < len(q.pending); i++ {
		it := q.pending[i]
		if it.failed[h] {
			skipped = append(skipped, it)
			continue
		}
		eligible = true
		if len(got) == max || q.out+len(got) >= q.window {
			break
		}
		got = append(got, it)
	}
	if len(got) > 0 {
		start := i - len(skipped)
		copy(q.pending[start:i], skipped)
		clear(q.pending[:start])
		q.pending = q.pending[start:]
		q.out += len(got)
		return got, true
	}
	// Nothing now; more only if h could serve something, or something
	// out could come back.
	return nil, eligible || q.out > 0
}

// done records a chunk stored.
func (q *schedule) done(it *item) {
	q.mu.Lock()
	q.out--
	q.signal()
	q.mu.Unlock()
}

// retry puts a chunk back in its place; failedBy, when set, never gets
// it again.
func (q *schedule) retry(it *item, failedBy peer.ID) {
	q.mu.Lock()
	if failedBy != "" {
		if it.failed == nil {
			it.failed = make(map[peer.ID]bool)
		}
		it.failed[failedBy] = true
	}
	q.out--
	// Back in its place: pending stays in manifest order.
	i, _ := slices.BinarySearchFunc(q.pending, it.seq, func(p *item, seq int) int { return p.seq - seq })
	q.pending = slices.Insert(q.pending, i, it)
	q.signal()
	q.mu.Unlock()
}

// drop takes a holder out of the fetch.
func (q *schedule) drop(h peer.ID) {
	q.mu.Lock()
	q.dropped[h] = true
	q.signal()
	q.mu.Unlock()
}

// finish stops every worker (a fatal error).
func (q *schedule) finish() {
	q.mu.Lock()
	q.finished = true
	q.signal()
	q.mu.Unlock()
}

// left returns the chunks not fetched.
func (q *schedule) left() []blob.ChunkRef {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]blob.ChunkRef, len(q.pending))
	for i, it := range q.pending {
		out[i] = it.ref
	}
	return out
}
