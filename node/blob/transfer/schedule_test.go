package transfer

import (
	"context"
	"slices"
	"testing"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

func refs(n int) []blob.ChunkRef {
	out := make([]blob.ChunkRef, n)
	for i := range out {
		out[i] = blob.ChunkRef{Digest: blob.Sum([]byte{byte(i)}), Size: int64(i + 1)}
	}
	return out
}

// sizes names items by their size, which refs made 1, 2, 3…
func sizes(items []*item) []int64 {
	var out []int64
	for _, it := range items {
		out = append(out, it.ref.Size)
	}
	return out
}

func TestScheduleSplitsInOrderWithinTheWindow(t *testing.T) {
	ctx := context.Background()
	q := newSchedule(refs(10), 5)
	a, b := peer.ID("a"), peer.ID("b")
	first := q.take(ctx, a, 3)
	if got := sizes(first); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("a took %v", got)
	}
	second := q.take(ctx, b, 3)
	if got := sizes(second); !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("b took %v, want 2 chunks: the window is 5", got)
	}
	// a lacked chunk 1: it goes back to the front, never to a again.
	q.retry(first[0], a)
	q.done(first[1])
	q.done(first[2])
	third := q.take(ctx, a, 3)
	if got := sizes(third); !slices.Equal(got, []int64{6, 7, 8}) {
		t.Fatalf("a took %v, want 6 7 8", got)
	}
	q.done(second[0])
	if got := sizes(q.take(ctx, b, 1)); !slices.Equal(got, []int64{1}) {
		t.Fatalf("b took %v, want chunk 1 that a lacked", got)
	}
	// a drops out: it takes nothing more, and what it had goes to b.
	q.drop(a)
	if got := q.take(ctx, a, 3); got != nil {
		t.Fatalf("a dropped took %v", sizes(got))
	}
	for _, it := range third {
		q.retry(it, "")
	}
	if got := sizes(q.take(ctx, b, 4)); !slices.Equal(got, []int64{6, 7, 8}) {
		t.Fatalf("b took %v, want 6 7 8, in order, and no more (window)", got)
	}
}

func TestScheduleEndsWhenNoHolderCanServe(t *testing.T) {
	ctx := context.Background()
	q := newSchedule(refs(1), 4)
	a, b := peer.ID("a"), peer.ID("b")
	it := q.take(ctx, a, 1)
	q.retry(it[0], a)
	if got := q.take(ctx, a, 1); got != nil {
		t.Fatalf("a took %v again", sizes(got))
	}
	it = q.take(ctx, b, 1)
	q.retry(it[0], b)
	if got := q.take(ctx, b, 1); got != nil {
		t.Fatalf("b took %v again", sizes(got))
	}
	if left := q.left(); len(left) != 1 {
		t.Fatalf("left %v, want the chunk no one had", left)
	}
}

func TestScheduleWakesAWaitingHolder(t *testing.T) {
	ctx := context.Background()
	q := newSchedule(refs(1), 1)
	a, b := peer.ID("a"), peer.ID("b")
	it := q.take(ctx, a, 1)
	got := make(chan []*item)
	go func() { got <- q.take(ctx, b, 1) }() // waits: a has the only chunk out
	q.retry(it[0], a)
	if s := sizes(<-got); !slices.Equal(s, []int64{1}) {
		t.Fatalf("b took %v after a gave the chunk back", s)
	}
	// finish wakes and ends everyone.
	go func() { got <- q.take(ctx, a, 1) }()
	q.finish()
	if s := <-got; s != nil {
		t.Fatalf("took %v after finish", sizes(s))
	}
	ctx, cancel := context.WithCancel(ctx)
	q2 := newSchedule(refs(2), 1)
	q2.take(ctx, a, 1)
	go func() { got <- q2.take(ctx, b, 1) }()
	cancel()
	if s := <-got; s != nil {
		t.Fatalf("took %v after its context ended", sizes(s))
	}
}
