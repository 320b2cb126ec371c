package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// virtualMesh is the market's pure core on n nodes in one process
// (markettest): messages travel with a set one-way latency under a virtual
// clock, so its figures are protocol time, whatever the machine's load.
type virtualMesh struct {
	h       *markettest.Harness
	latency time.Duration
	// running maps a job to the virtual time its coordinator first
	// reported it running whole.
	running map[string]time.Time
	// rerouting and back: a reroute's start and its end (running again).
	rerouting, back map[string]time.Time
}

// virtualOptions shape a virtual mesh beyond its size.
type virtualOptions struct {
	// Latency is every link's one-way delay.
	Latency time.Duration
	// Tick, when not 0, is how often every node ticks; default Latency/2
	// (at least 250 µs, at most 10 ms), so that timers add little to the
	// message round trips measured. Scenarios whose figures are seconds,
	// or that time the market's own work, tick as a node does.
	Tick time.Duration
	// BookDelay is how long an ad takes to reach the shared book (the
	// advertiser's coalescing and the gossip flood). Default 0: at once.
	BookDelay time.Duration
	// NoBook: no node has a Book, every bid request is broadcast to every
	// node (the naive baseline of the throughput scenario).
	NoBook bool
}

// newVirtualMesh builds n suppliers of cardsPer cards each (one model per
// node, a price within ±20% of its list price, MTBF 1 h to 30 days) with
// the market's default configuration.
func newVirtualMesh(n, cardsPer int, seed uint64, o virtualOptions) (*virtualMesh, error) {
	tick, latency := o.Tick, o.Latency
	if tick == 0 {
		tick = min(max(latency/2, 250*time.Microsecond), 10*time.Millisecond)
	}
	v := &virtualMesh{
		h:       markettest.New(markettest.Options{Seed: seed, Latency: latency, TickEvery: tick, NoBook: o.NoBook, BookDelay: o.BookDelay}),
		latency: latency, running: map[string]time.Time{}, rerouting: map[string]time.Time{}, back: map[string]time.Time{},
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	cat := device.DefaultCatalog()
	for i := range n {
		id := fmt.Sprintf("v%04d", i)
		cfg := market.DefaultConfig(id)
		cfg.Catalog = cat
		model := benchModels[r.IntN(len(benchModels))]
		m, _ := cat.Lookup(model)
		cards, err := markettest.CatalogCards(cat, id, fmt.Sprintf("%s:%d", model, cardsPer))
		if err != nil {
			return nil, err
		}
		cfg.Cards = cards
		cfg.Availability.MTBF = market.Duration(time.Duration(1+r.IntN(720)) * time.Hour)
		cfg.Prices.PerModel = map[string]float64{model: float64(int(m.DefaultPriceCNY()*(0.8+0.4*r.Float64())*100)) / 100}
		if _, err := v.h.Add(cfg); err != nil {
			return nil, err
		}
	}
	if o.BookDelay > 0 {
		v.h.RunFor(2 * o.BookDelay) // the first ads reach the book
	}
	v.h.OnReady = func(_ *markettest.Peer, rd market.Ready) {
		for _, nt := range rd.Notifications {
			switch nt.To {
			case market.JobRunning:
				if _, ok := v.running[nt.Job]; !ok {
					v.running[nt.Job] = v.h.Now
				} else if _, ok := v.rerouting[nt.Job]; ok {
					if _, done := v.back[nt.Job]; !done {
						v.back[nt.Job] = v.h.Now
					}
				}
			case market.JobRerouting:
				if _, ok := v.rerouting[nt.Job]; !ok {
					v.rerouting[nt.Job] = v.h.Now
				}
			}
		}
	}
	return v, nil
}

// place submits spec to its coordinator and runs virtual time until the
// job runs whole (or limit passes). It returns the virtual time taken and
// the messages sent meanwhile.
func (v *virtualMesh) place(ctx context.Context, spec market.JobSpec, limit time.Duration) (time.Duration, int, error) {
	t0, sent0 := v.h.Now, v.h.Sent
	if _, err := v.h.Submit(spec); err != nil {
		return 0, 0, err
	}
	ok, err := runUntil(ctx, v.h, func() bool { _, ok := v.running[spec.ID]; return ok }, limit)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		rec, _ := v.h.Job(spec.ID)
		return 0, 0, fmt.Errorf("job %s (%d cards) not running after %v of virtual time: %s %s", spec.ID, spec.Cards, limit, rec.State, rec.Reason)
	}
	return v.running[spec.ID].Sub(t0), v.h.Sent - sent0, nil
}

// cancel cancels jobs at their coordinators and lets 100 one-way
// latencies (at least 50 ms) of virtual time pass: stops and releases
// arrive, executions stop, ads free the cards.
func (v *virtualMesh) cancel(jobs ...string) {
	for _, j := range jobs {
		v.h.Step(v.h.Coordinator(j), market.CancelJob{Now: v.h.Now, Job: j})
	}
	v.h.RunFor(max(100*v.latency, 50*time.Millisecond))
}

// runUntil is h.RunUntil that also stops, with ctx's error, when ctx
// ends (checked after every delivery and tick).
func runUntil(ctx context.Context, h *markettest.Harness, cond func() bool, limit time.Duration) (bool, error) {
	ok := h.RunUntil(func() bool { return ctx.Err() != nil || cond() }, limit)
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return ok, nil
}

// rtts converts a virtual duration into round trips of the mesh's latency.
func (v *virtualMesh) rtts(d time.Duration) float64 {
	return float64(d) / float64(2*v.latency)
}

// virtualLatencies are the one-way link latencies of the virtual figures.
var virtualLatencies = []struct {
	clock string
	d     time.Duration
}{{ClockVirtualLAN, 500 * time.Microsecond}, {ClockVirtualWAN, 40 * time.Millisecond}}
