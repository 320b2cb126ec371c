package markettest

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// A node is quiet (its driver may tick it less often) exactly while
// nothing it does waits on time: before any job, not while it coordinates
// a job or runs or has reserved cards for one, and again once the job
// ended everywhere.
func TestANodeIsQuietWhileNothingWaitsOnTime(t *testing.T) {
	h := New(Options{Seed: 1, Latency: 2 * time.Millisecond,
		Run: func(market.Execution) (time.Duration, int, bool) { return 300 * time.Millisecond, 0, false }})
	for i := range 3 {
		id := fmt.Sprintf("n%d", i)
		h.MustAddSupplier(id, "a100-80g:2")
	}
	h.RunFor(time.Second)
	quiet := func() (out []string) {
		for _, p := range h.Peers() {
			if p.Node.Quiet() {
				out = append(out, p.ID)
			}
		}
		return out
	}
	if q := quiet(); len(q) != 3 {
		t.Fatalf("before any job, quiet: %v; want all 3", q)
	}
	coord, err := h.Submit(market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if h.Peer(coord).Node.Quiet() {
		t.Errorf("coordinator %s quiet with a job just submitted", coord)
	}
	// A bidder holds its cards reserved until the round ends.
	var bidder *Peer
	h.RunUntil(func() bool {
		for _, p := range h.Peers() {
			if p.ID == coord {
				continue // busy with the job anyway
			}
			for _, c := range p.Node.Cards() {
				if c.State == market.CardReserved {
					bidder = p
					return true
				}
			}
		}
		return false
	}, time.Second)
	if bidder == nil {
		t.Fatal("no card was reserved for j1's bids")
	}
	if bidder.Node.Quiet() {
		t.Errorf("%s quiet with a card reserved", bidder.ID)
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("j1"); return r.State == market.JobRunning }, 5*time.Second) {
		t.Fatal("j1 never ran")
	}
	r, _ := h.Job("j1")
	runner := r.Placements[0].Node
	for _, id := range []string{coord, runner} {
		if h.Peer(id).Node.Quiet() {
			t.Errorf("%s quiet while j1 runs (coordinator %s, runner %s)", id, coord, runner)
		}
	}
	if !h.RunUntil(func() bool { return len(quiet()) == 3 }, 10*time.Second) {
		r, _ := h.Job("j1")
		t.Fatalf("j1 %s; quiet after 10 s: %v; want all 3", r.State, quiet())
	}
	if r, _ := h.Job("j1"); r.State != market.JobSucceeded {
		t.Errorf("all quiet with j1 %s", r.State)
	}
}
