package jobstate

import (
	"sync"

	"github.com/gpumesh/gpumesh/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Queue queues records waiting to go to their replicas (the newest
// of each job), hands out at most one of each job at a time, and remembers
// the jobs whose last replication missed a replica.
type Queue struct {
	mu       sync.Mutex
	pending  map[string]market.JobRecord
	inflight map[string]bool
	failed   map[string]bool
	// acks is the newest record of each job each replica acknowledged:
	// what a submission waiting for its replicas names when some did not.
	acks map[string]map[peer.ID]Mark
	wake chan struct{}
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	return &Queue{pending: map[string]market.JobRecord{}, inflight: map[string]bool{}, failed: map[string]bool{},
		acks: map[string]map[peer.ID]Mark{}, wake: make(chan struct{}, 1)}
}

// Wake receives when a record was queued or a replication ended
// (Enqueue, Done, Nudge): the sender should Take again. It holds at most
// one wake-up; those that come while one waits are merged into it.
func (r *Queue) Wake() <-chan struct{} { return r.wake }

// Acked notes that replica t holds job's record at m.
func (r *Queue) Acked(job string, t peer.ID, m Mark) {
	r.mu.Lock()
	defer r.mu.Unlock()
	by := r.acks[job]
	if by == nil {
		by = map[peer.ID]Mark{}
		r.acks[job] = by
	}
	if m.atLeast(by[t]) {
		by[t] = m
	}
}

// Holds reports whether replica t acknowledged job's record at m or later.
func (r *Queue) Holds(job string, t peer.ID, m Mark) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.acks[job][t]
	return ok && got.atLeast(m)
}

// Forget drops what is known of job's replicas (it is over here).
func (r *Queue) Forget(job string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.acks, job)
}

// Enqueue queues rec in place of any record of its job still pending,
// and wakes the sender.
func (r *Queue) Enqueue(rec market.JobRecord) {
	r.mu.Lock()
	r.pending[rec.ID] = rec
	r.mu.Unlock()
	r.Nudge()
}

// Nudge wakes the sender (Wake), without blocking.
func (r *Queue) Nudge() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Take returns the pending records of the jobs with no replication in
// flight, at most max of them, and marks them in flight.
func (r *Queue) Take(max int) []market.JobRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []market.JobRecord
	for id, rec := range r.pending {
		if len(out) == max {
			break
		}
		if r.inflight[id] {
			continue
		}
		out = append(out, rec)
		r.inflight[id] = true
		delete(r.pending, id)
	}
	return out
}

// Done ends a job's replication in flight; a record queued meanwhile goes
// next.
func (r *Queue) Done(job string) {
	r.mu.Lock()
	delete(r.inflight, job)
	_, more := r.pending[job]
	r.mu.Unlock()
	if more {
		r.Nudge()
	}
}

// Missed notes that job's replication missed a replica (TakeFailed).
func (r *Queue) Missed(job string) {
	r.mu.Lock()
	r.failed[job] = true
	r.mu.Unlock()
}

// TakeFailed returns the jobs whose replication missed a replica since
// the last call, in no order, and forgets them.
func (r *Queue) TakeFailed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.failed))
	for id := range r.failed {
		out = append(out, id)
	}
	clear(r.failed)
	return out
}
