package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// Backend runs a challenge's work on cards and returns their answers, one
// per card, in the order of cards (index i is the card's Index). It may
// block for the work's time and returns soon after ctx is done. Calls come
// one at a time.
type Backend interface {
	// Name says what runs the probe ("cuda", "fake").
	Name() string
	// Run runs ch on cards.
	Run(ctx context.Context, ch Challenge, cards []device.Card) []CardAnswer
}

// ErrNoBackend says the node has nothing to run a probe with on a card of
// this vendor (its answer carries the reason; it is judged by its evidence
// alone).
var ErrNoBackend = errors.New("no probe backend for this card")

// Fake runs the probe on the CPU and then waits as long as a card of the
// given bandwidth would have taken, for tests and simulated suppliers.
type Fake struct {
	// Bandwidth is each card's real bandwidth in GB/s, by card ID; a card
	// missing from it has DefaultGBs.
	Bandwidth  map[string]float64
	DefaultGBs float64
	// Forge answers every digest wrong (a supplier that does not do the
	// work).
	Forge bool
	// Sleep waits d or until ctx is done. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration)
	// Now is the clock the time of a card's work is taken off its wait
	// by. Default: time.Now. (Tests that judge by a virtual clock give
	// one that Sleep advances, so the CPU's time does not count.)
	Now func() time.Time
}

var _ Backend = (*Fake)(nil)

// Name implements Backend.
func (f *Fake) Name() string { return "fake" }

// Run implements Backend: every card side by side, each answering after
// its work's bytes at its bandwidth.
func (f *Fake) Run(ctx context.Context, ch Challenge, cards []device.Card) []CardAnswer {
	out := make([]CardAnswer, len(cards))
	var wg sync.WaitGroup
	for i, c := range cards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := f.now()
			a := CardAnswer{Card: c.ID, Model: c.Model, Index: i}
			w, ok := ch.Work[c.Model]
			if !ok {
				a.Err = "not asked"
				out[i] = a
				return
			}
			a.Digests = Digests(Seed(ch.Nonce, i), w, ch.Blocks)
			if f.Forge {
				for k := range a.Digests {
					a.Digests[k] ^= 1
				}
			}
			gbs := f.DefaultGBs
			if v, ok := f.Bandwidth[c.ID]; ok {
				gbs = v
			}
			if gbs > 0 {
				f.sleep(ctx, time.Duration(w.Bytes()/gbs)-f.now().Sub(start)) // bytes / (GB/s) = ns
			}
			if ctx.Err() != nil {
				a.Digests, a.Err = nil, fmt.Sprintf("stopped: %v", ctx.Err())
			}
			out[i] = a
		}()
	}
	wg.Wait()
	return out
}

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Fake) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	if f.Sleep != nil {
		f.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
