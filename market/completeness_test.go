package market_test

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// partialBook is a book that has not heard every supplier yet.
type partialBook struct {
	*market.Book
	complete bool
}

func (b *partialBook) Complete() bool { return b.complete }

func TestIncompleteBookMakesJobsWaitNotFail(t *testing.T) {
	for _, complete := range []bool{false, true} {
		book := &partialBook{Book: market.NewBook(), complete: complete}
		book.Put("b", []market.Offer{{Node: "b", Model: "a100-80g", Vendor: "nvidia", MemoryMiB: 81920, ComputeUnits: 1, Free: 1, Total: 1, PriceCNY: 11.4, PreemptiblePriceCNY: 7}})
		cfg := market.DefaultConfig("a")
		cfg.Book = book
		n, err := market.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		spec := market.JobSpec{ID: "big", Cards: 16, Models: []string{"h100-*"}, MaxPriceCNY: 30, Command: []string{"x"}}
		if err := n.Step(market.JobSubmitted{Now: t0, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		rec, _ := n.Job("big")
		switch {
		case complete && rec.State != market.JobFailed:
			t.Errorf("complete book: job %s, want failed fast", rec.State)
		case !complete && rec.State.Terminal():
			t.Errorf("incomplete book: job %s (%s), want it waiting", rec.State, rec.Reason)
		}
	}
}
