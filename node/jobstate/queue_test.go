package jobstate

import (
	"slices"
	"testing"

	"github.com/gpumesh/gpumesh/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

func woken(q *Queue) bool {
	select {
	case <-q.Wake():
		return true
	default:
		return false
	}
}

// The queue keeps each job's newest record, hands out one of each job at
// a time, and wakes the sender when one is queued and when a job's
// replication ends with a record queued meanwhile.
func TestQueueOnePerJobInFlight(t *testing.T) {
	q := NewQueue()
	if woken(q) {
		t.Fatalf("woken with nothing queued")
	}
	q.Enqueue(market.JobRecord{ID: "j", Version: 1})
	q.Enqueue(market.JobRecord{ID: "j", Version: 2})
	if !woken(q) || woken(q) {
		t.Fatalf("two enqueues want one wake-up, merged")
	}
	got := q.Take(10)
	if len(got) != 1 || got[0].Version != 2 {
		t.Fatalf("took %+v, want j's version 2 only", got)
	}
	q.Enqueue(market.JobRecord{ID: "j", Version: 3})
	q.Enqueue(market.JobRecord{ID: "k", Version: 1})
	woken(q)
	if got := q.Take(10); len(got) != 1 || got[0].ID != "k" {
		t.Fatalf("took %+v while j was in flight, want k only", got)
	}
	q.Done("k")
	if woken(q) {
		t.Errorf("woken by the end of a job with nothing queued")
	}
	q.Done("j")
	if !woken(q) {
		t.Errorf("not woken by the end of a job with a record queued")
	}
	if got := q.Take(10); len(got) != 1 || got[0].Version != 3 {
		t.Fatalf("took %+v, want j's version 3", got)
	}
	for _, id := range []string{"a", "b", "c"} {
		q.Enqueue(market.JobRecord{ID: id})
	}
	if got := q.Take(2); len(got) != 2 {
		t.Errorf("Take(2) took %d", len(got))
	}
}

// Jobs whose replication missed a replica are handed out once.
func TestQueueTakeFailed(t *testing.T) {
	q := NewQueue()
	q.Missed("j")
	q.Missed("k")
	q.Missed("j")
	got := q.TakeFailed()
	slices.Sort(got)
	if !slices.Equal(got, []string{"j", "k"}) {
		t.Fatalf("TakeFailed = %v", got)
	}
	if got := q.TakeFailed(); len(got) != 0 {
		t.Fatalf("TakeFailed again = %v, want none", got)
	}
}

// A replica holds the newest record it acknowledged, not a lower one
// acknowledged late; Forget drops what is known.
func TestQueueAcks(t *testing.T) {
	q := NewQueue()
	r1, r2 := peer.ID("r1"), peer.ID("r2")
	q.Acked("j", r1, at(1, 5))
	q.Acked("j", r1, at(1, 3))
	if !q.Holds("j", r1, at(1, 5)) || !q.Holds("j", r1, at(1, 4)) {
		t.Errorf("r1 does not hold version 5 (a late ack of 3 lowered it?)")
	}
	if q.Holds("j", r1, at(1, 6)) || q.Holds("j", r1, at(2, 1)) {
		t.Errorf("r1 holds a record it never acknowledged")
	}
	if q.Holds("j", r2, Mark{}) {
		t.Errorf("r2 holds a record without an ack")
	}
	q.Forget("j")
	if q.Holds("j", r1, at(1, 1)) {
		t.Errorf("acks kept after Forget")
	}
}
