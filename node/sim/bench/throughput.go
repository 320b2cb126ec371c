package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim"
)

// Sizes of the throughput scenario.
const (
	// throughputVirtualJobs single-card jobs arrive at the virtual mesh
	// over throughputArrival of virtual time (10,000 jobs/s offered);
	// the broadcast baseline gets throughputBaselineJobs of them.
	throughputVirtualJobs  = 1000
	throughputArrival      = 100 * time.Millisecond
	throughputBaselineJobs = 100
	// throughputRealJobs single-card jobs are submitted to the full-node
	// mesh by throughputSubmitters goroutines at once, each through a
	// different node.
	throughputRealJobs = 100
	// throughputTick is how often every virtual node ticks while the
	// market core's throughput is measured: a node's default tick.
	throughputTick       = 20 * time.Millisecond
	throughputSubmitters = 32
	// throughputBookDelay is how late ads reach the books in the third
	// market-core run: gossip.AdvertiserConfig's 250 ms coalescing and a
	// flood of about 50 ms. Coordinators then ask for cards the others
	// have just taken, as the full-node mesh's do.
	throughputBookDelay = 300 * time.Millisecond
	// throughputWait bounds the wait for the full-node mesh's jobs to run,
	// after the last submission.
	throughputWait = time.Minute
)

// throughputVirtual and throughputReal measure jobs placed per second: by
// the market core (every node's market in one goroutine, jobs per second
// of wall time; with ads reaching the books at once and 300 ms late; with
// the broadcast design as the baseline in the same run) and by the
// full-node mesh (many submitters at once, from the first submission
// until the last job runs).
func throughputVirtual(ctx context.Context, r *runner) error {
	capacity := r.cfg.VirtualNodes * r.cfg.CardsPerNode
	jobs := min(r.cfg.samples(throughputVirtualJobs, 10), capacity/2)
	r.cfg.Progress(fmt.Sprintf("throughput: market core, %d jobs on %d nodes", jobs, r.cfg.VirtualNodes))
	book, err := marketThroughput(ctx, r.cfg, jobs, virtualOptions{})
	if err != nil {
		return err
	}
	r.cfg.Progress("throughput: broadcast baseline")
	base, err := marketThroughput(ctx, r.cfg, min(r.cfg.samples(throughputBaselineJobs, 5), jobs), virtualOptions{NoBook: true})
	if err != nil {
		return err
	}
	c := fmt.Sprintf("market core, %d nodes, %d jobs", r.cfg.VirtualNodes, jobs)
	r.row(target(Row{Scenario: ScenarioThroughput, Case: c, Clock: ClockReal, Metric: "jobs/s", Value: book.perSec, Unit: "jobs/s", N: jobs,
		Note: "the whole mesh's markets on one goroutine"}, "> 1000 jobs/s", book.perSec > 1000))
	r.row(Row{Scenario: ScenarioThroughput, Case: c, Clock: ClockVirtualLAN, Metric: "median", Value: ms(book.p50), Unit: "ms", N: jobs})
	r.row(Row{Scenario: ScenarioThroughput, Case: c, Clock: ClockVirtualLAN, Metric: "p99", Value: ms(book.p99), Unit: "ms", N: jobs})
	r.row(Row{Scenario: ScenarioThroughput, Case: c, Metric: "messages/job", Value: book.msgsPerJob, Unit: "msgs"})
	r.cfg.Progress(fmt.Sprintf("throughput: market core, ads %v late", throughputBookDelay))
	late, err := marketThroughput(ctx, r.cfg, jobs, virtualOptions{BookDelay: throughputBookDelay})
	if err != nil {
		return err
	}
	lc := fmt.Sprintf("market core, ads %v late", throughputBookDelay)
	r.row(Row{Scenario: ScenarioThroughput, Case: lc, Clock: ClockReal, Metric: "jobs/s", Value: late.perSec, Unit: "jobs/s", N: jobs,
		Note: "each ad reaches the books after the advertiser's coalescing and a flood"})
	r.row(Row{Scenario: ScenarioThroughput, Case: lc, Clock: ClockVirtualLAN, Metric: "median", Value: ms(late.p50), Unit: "ms", N: jobs})
	r.row(Row{Scenario: ScenarioThroughput, Case: lc, Clock: ClockVirtualLAN, Metric: "p99", Value: ms(late.p99), Unit: "ms", N: jobs})
	r.row(Row{Scenario: ScenarioThroughput, Case: lc, Metric: "messages/job", Value: late.msgsPerJob, Unit: "msgs"})
	bc := fmt.Sprintf("broadcast baseline, %d jobs", base.jobs)
	r.row(Row{Scenario: ScenarioThroughput, Case: bc, Clock: ClockReal, Metric: "jobs/s", Value: base.perSec, Unit: "jobs/s", N: base.jobs,
		Note: "no book: every bid request goes to every node"})
	r.row(Row{Scenario: ScenarioThroughput, Case: bc, Metric: "messages/job", Value: base.msgsPerJob, Unit: "msgs"})
	r.row(Row{Scenario: ScenarioThroughput, Case: "market core / broadcast", Metric: "ratio", Value: book.perSec / base.perSec, Unit: "×"})
	return nil
}

// throughputReal is the full-node mesh's half of the throughput scenario.
func throughputReal(ctx context.Context, r *runner) error {
	m, err := r.fullMesh(ctx)
	if err != nil {
		return err
	}
	n := min(r.cfg.samples(throughputRealJobs, 8), m.cards/2) // half the cards: contention, not a full mesh
	r.cfg.Progress(fmt.Sprintf("throughput: %d jobs on the full mesh", n))
	perSec, ackPerSec, lat, cleanup, err := meshThroughput(ctx, m, n)
	if err != nil {
		return err
	}
	if cleanup != nil {
		r.note("throughput: after the run: %v", cleanup)
	}
	c := fmt.Sprintf("%d full nodes, %d jobs, %d submitters", r.cfg.Nodes, n, throughputSubmitters)
	r.row(target(Row{Scenario: ScenarioThroughput, Case: c, Clock: ClockReal, Metric: "jobs/s placed", Value: perSec, Unit: "jobs/s", N: len(lat),
		Note: fmt.Sprintf("%d of %d jobs running within %v of the last submission; submissions acknowledged at %.0f/s", len(lat), n, throughputWait, ackPerSec)}, "> 1000 jobs/s", perSec > 1000))
	l := sim.LatencyOf("", lat)
	r.row(Row{Scenario: ScenarioThroughput, Case: c, Clock: ClockReal, Metric: "median", Value: ms(l.P50), Unit: "ms", N: l.Count})
	r.row(Row{Scenario: ScenarioThroughput, Case: c, Clock: ClockReal, Metric: "p99", Value: ms(l.P99), Unit: "ms", N: l.Count})
	return nil
}

// marketFigures are what one market-core throughput run measured.
type marketFigures struct {
	jobs       int
	perSec     float64 // jobs placed per second of wall time
	p50, p99   time.Duration
	msgsPerJob float64
}

// marketThroughput places jobs single-card jobs on the virtual mesh at
// 0.5 ms latency (o's book shape), arriving evenly over
// throughputArrival, and times the wall clock from the first submission
// until every job runs.
func marketThroughput(ctx context.Context, cfg Config, jobs int, o virtualOptions) (marketFigures, error) {
	o.Latency, o.Tick = 500*time.Microsecond, throughputTick
	v, err := newVirtualMesh(cfg.VirtualNodes, cfg.CardsPerNode, cfg.Seed, o)
	if err != nil {
		return marketFigures{}, err
	}
	submitted := map[string]time.Time{}
	runtime.GC() // the mesh's setup garbage is not the run's
	start, t0, sent0 := time.Now(), v.h.Now, v.h.Sent
	for i := range jobs {
		if i%64 == 0 && ctx.Err() != nil {
			return marketFigures{}, ctx.Err()
		}
		if at := t0.Add(throughputArrival * time.Duration(i) / time.Duration(jobs)); at.After(v.h.Now) {
			v.h.RunFor(at.Sub(v.h.Now))
		}
		spec := market.JobSpec{ID: fmt.Sprintf("t%05d", i), Cards: 1, AllowSimulated: true, MaxPriceCNY: 60, Command: []string{"run"}}
		submitted[spec.ID] = v.h.Now
		if _, err := v.h.Submit(spec); err != nil {
			return marketFigures{}, err
		}
	}
	done := func() bool { return len(v.running) >= jobs }
	ok, err := runUntil(ctx, v.h, done, time.Minute)
	if err != nil {
		return marketFigures{}, err
	}
	if !ok {
		return marketFigures{}, fmt.Errorf("%d of %d jobs running after a minute of virtual time", len(v.running), jobs)
	}
	wall := time.Since(start)
	var lat []time.Duration
	for id, at := range submitted {
		lat = append(lat, v.running[id].Sub(at))
	}
	slices.Sort(lat)
	return marketFigures{jobs: jobs, perSec: float64(jobs) / wall.Seconds(), p50: sim.Percentile(lat, 0.5), p99: sim.Percentile(lat, 0.99),
		msgsPerJob: float64(v.h.Sent-sent0) / float64(jobs)}, nil
}

// meshThroughput submits n single-card jobs to the full-node mesh from
// throughputSubmitters goroutines, each through its own node, and returns
// jobs running per second (first submission to the last job running
// within throughputWait of the submissions; len(lat) ran),
// submissions acknowledged per second, and each job's submit → running
// latency. The jobs are cancelled before it returns; cleanup says what
// did not go.
func meshThroughput(ctx context.Context, m *fullMesh, n int) (perSec, ackPerSec float64, lat []time.Duration, cleanup, err error) {
	nodes := m.c.Up()
	ids := make([]string, n)
	t0s := make([]time.Time, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("tp-%04d", i)
	}
	defer func() {
		if cerr := m.cancelAll(ctx, ids); cerr != nil && ctx.Err() == nil {
			cleanup = cerr // the figures stand; the next scenario may suffer
		}
	}()
	next := make(chan int)
	errs := make(chan error, throughputSubmitters)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range throughputSubmitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			via := nodes[w%len(nodes)]
			for i := range next {
				t0, err := m.submit(ctx, via, sleepSpec(ids[i], 1))
				if err != nil {
					errs <- fmt.Errorf("submit %s: %w", ids[i], err)
					return
				}
				t0s[i] = t0
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	acked := time.Since(start)
	if err == nil {
		select {
		case err = <-errs: // a submitter failed after the last job was handed out
		default:
			err = ctx.Err()
		}
	}
	if err != nil {
		return 0, 0, nil, nil, err
	}
	// One deadline for them all: a job not running by then is counted
	// as not placed.
	deadline := time.Now().Add(throughputWait)
	var last time.Time
	for i, id := range ids {
		at, err := m.waitRunning(ctx, id, max(time.Until(deadline), time.Millisecond))
		if ctx.Err() != nil {
			return 0, 0, nil, nil, ctx.Err()
		}
		if err != nil {
			continue
		}
		lat = append(lat, at.Sub(t0s[i]))
		if at.After(last) {
			last = at
		}
	}
	if len(lat) == 0 {
		return 0, 0, nil, nil, fmt.Errorf("none of %d jobs running %v after the submissions", n, throughputWait)
	}
	slices.Sort(lat)
	return float64(len(lat)) / last.Sub(start).Seconds(), float64(n) / acked.Seconds(), lat, nil, nil
}
