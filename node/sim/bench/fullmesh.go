package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/sim"
)

// fullMesh is the in-process mesh of full nodes the real-time figures are
// measured on: sim.Cluster with uniform suppliers of CardsPerNode cards
// behind a few controllers, and a watcher of the coordinators' job events.
type fullMesh struct {
	c     *sim.Cluster
	dir   string
	rmDir bool
	plan  []sim.Supplier
	cards int // of the suppliers

	// heapPerNode is the heap and stacks in use per node once formed;
	// rssPerNode the growth of the process's resident set per node (0
	// where unknown).
	heapPerNode, rssPerNode float64
	formTook                time.Duration

	mu      sync.Mutex
	running map[string]time.Time // job → when it first ran whole
	reroute map[string]time.Time // job → when its last reroute began
	back    map[string]time.Time // job → when it ran whole after that reroute
	waiters map[string]chan struct{}
	via     map[string]*node.Node // job → the node it was submitted through (its owner)
	// quietBy is when the last message sent on a silenced link (see
	// silence) has been delivered: mocknet's stream goroutines carry it
	// until then, whatever closes.
	quietBy time.Time
}

// benchModels are the suppliers' cards: a spread of catalogued models, as
// in the market's benchmarks, so that clearing compares prices and
// compute.
var benchModels = []string{"rtx4090-24g", "rtx4090-48g", "a100-80g", "a100-40g", "h100-sxm-80g", "h200-141g", "l40s-48g", "ascend-910b-64g"}

// benchPlan lays out n nodes: k controllers (no cards, coordinating) and
// n-k suppliers of cardsPer cards, one model each, priced within ±20% of
// the model's list price.
func benchPlan(n, cardsPer int, seed uint64) []sim.Supplier {
	cat := device.DefaultCatalog()
	r := rand.New(rand.NewPCG(seed, 0xbe4c))
	k := sim.DefaultCoordinators(n)
	var plan []sim.Supplier
	for i := range n - k {
		model := benchModels[r.IntN(len(benchModels))]
		m, _ := cat.Lookup(model)
		price := float64(int(m.DefaultPriceCNY()*(0.8+0.4*r.Float64())*100)) / 100
		plan = append(plan, sim.Supplier{Name: fmt.Sprintf("s-%04d", i+1), Tier: sim.TierIDC, Model: model, Cards: cardsPer, PriceCNY: price})
	}
	return sim.WithControllers(plan, k)
}

// startFullMesh starts cfg.Nodes full nodes and waits until the gateway
// hears every member, coordinator and card (99% of them after a minute;
// after 2 minutes the run goes on with what formed, and a note says so).
//
// Interrupted (ctx ends), it returns at once; the nodes started so far stop
// through background.
func startFullMesh(ctx context.Context, cfg Config, notes *[]string, background func(func())) (*fullMesh, error) {
	f := &fullMesh{dir: cfg.Dir, running: map[string]time.Time{}, reroute: map[string]time.Time{}, back: map[string]time.Time{}, waiters: map[string]chan struct{}{}, via: map[string]*node.Node{}}
	if f.dir == "" {
		d, err := os.MkdirTemp("", "gpumesh-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		f.dir, f.rmDir = d, true
	}
	f.plan = benchPlan(cfg.Nodes, cfg.CardsPerNode, cfg.Seed)
	for _, s := range f.plan {
		f.cards += s.Cards
	}
	profile := sim.SimProfile()
	m0, rss0 := memBaseline()
	start := time.Now()
	type started struct {
		c   *sim.Cluster
		err error
	}
	ch := make(chan started, 1)
	go func() {
		c, err := sim.StartCluster(ctx, sim.ClusterConfig{
			Suppliers:    f.plan,
			Dir:          f.dir,
			Profile:      &profile,
			TickInterval: 20 * time.Millisecond,
			Market:       sim.SimMarket,
			OnEvent:      f.event,
			StartWorkers: 4,
			Logger:       cfg.Logger,
		})
		ch <- started{c, err}
	}()
	var c *sim.Cluster
	select {
	case s := <-ch:
		if s.err != nil {
			f.removeDir()
			return nil, s.err
		}
		c = s.c
	case <-ctx.Done():
		// The starts under way end and StartCluster stops what it
		// started (its nodes halt, leaving no one); that can take a
		// while on a mesh of hundreds: the results go out first.
		background(func() {
			if s := <-ch; s.c != nil {
				s.c.Abort()
			}
			f.removeDir()
		})
		return nil, ctx.Err()
	}
	f.c = c
	// Every member and card in the gateway's view, or 99% of them after
	// a minute (a few ads may still be on their way).
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	form, err := c.WaitFormed(fctx, 1, nil)
	cancel()
	if err != nil && ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		form, err = c.WaitFormed(fctx, 0.99, nil)
		cancel()
	}
	f.formTook = time.Since(start)
	if ctx.Err() != nil {
		background(f.abort)
		return nil, ctx.Err()
	}
	if err != nil {
		*notes = append(*notes, fmt.Sprintf("the %d-node mesh had not formed after 2 min (gateway sees %d of %d members, %d of %d cards); measured on what formed",
			cfg.Nodes, form.Members, form.Up, form.Book, form.Cards))
	}
	f.heapPerNode = float64(heapInUse()-m0) / float64(cfg.Nodes)
	if rss0 > 0 {
		f.rssPerNode = float64(rssBytes()-rss0) / float64(cfg.Nodes)
	}
	return f, nil
}

// memBaseline returns the heap and stacks in use and the resident set
// (heapInUse, rssBytes) after handing the pages free so far back to the
// system, so that a later rssBytes counts what was built since and not
// pages an earlier scenario left resident.
func memBaseline() (heap, rss int64) {
	debug.FreeOSMemory()
	return heapInUse(), rssBytes()
}

// heapInUse is the heap and goroutine stacks in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

func (f *fullMesh) removeDir() {
	if f.rmDir {
		os.RemoveAll(f.dir)
	}
}

// close stops every node, then waits until the messages in flight on
// silenced links have been delivered (their goroutines are gone).
func (f *fullMesh) close() { f.closeWith(f.c.Close) }

// abort stops every node at once, without graceful leaves: an interrupted
// run must be back within a couple of seconds.
func (f *fullMesh) abort() { f.closeWith(f.c.Abort) }

func (f *fullMesh) closeWith(stop func() error) {
	stop()
	f.removeDir()
	f.mu.Lock()
	wait := time.Until(f.quietBy)
	f.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		<-t.C // the deadline of the last delayed delivery
	}
}

// event folds the coordinators' job events.
func (f *fullMesh) event(_ string, ev api.Event) {
	if ev.Job == "" || (ev.Type != "job" && ev.Type != "reroute") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch market.JobState(ev.State) {
	case market.JobRunning:
		if _, ok := f.running[ev.Job]; !ok {
			f.running[ev.Job] = ev.At
		} else if r, ok := f.reroute[ev.Job]; ok && !ev.At.Before(r) {
			if _, done := f.back[ev.Job]; !done {
				f.back[ev.Job] = ev.At
			}
		}
	case market.JobRerouting:
		if _, ok := f.reroute[ev.Job]; !ok {
			f.reroute[ev.Job] = ev.At
		}
	}
	if ch, ok := f.waiters[ev.Job]; ok {
		close(ch)
		delete(f.waiters, ev.Job)
	}
}

// wake returns a channel closed at the job's next event.
func (f *fullMesh) wake(job string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.waiters[job]
	if !ok {
		ch = make(chan struct{})
		f.waiters[job] = ch
	}
	return ch
}

// waitFor waits until cond (read under the lock) holds for job, polling
// the job's record every 250 ms besides its events (an event may be missed
// by a subscriber that falls behind), until timeout.
func (f *fullMesh) waitFor(ctx context.Context, job string, timeout time.Duration, cond func() (time.Time, bool)) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		wake := f.wake(job)
		f.mu.Lock()
		at, ok := cond()
		f.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("job %s: not there after %v", job, timeout)
		case <-wake:
		case <-time.After(250 * time.Millisecond): // the poll of the record, for a missed event
			f.poll(ctx, job)
		}
	}
}

// poll reads the job's record from the gateway and folds its state as if
// an event had come (at the time read: later than the truth).
func (f *fullMesh) poll(ctx context.Context, job string) {
	gw := f.c.Gateway()
	if gw == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	rec, err := gw.Job(pctx, job)
	cancel()
	if err != nil || rec.State != market.JobRunning {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[job]; !ok {
		f.running[job] = time.Now()
	}
}

// waitRunning waits until the job first ran whole and returns when.
func (f *fullMesh) waitRunning(ctx context.Context, job string, timeout time.Duration) (time.Time, error) {
	return f.waitFor(ctx, job, timeout, func() (time.Time, bool) { at, ok := f.running[job]; return at, ok })
}

// cancel cancels jobs, each through the node that submitted it (its
// owner), 16 at a time, and returns the cancellations that failed. When
// ctx ends it stops and returns ctx's error: the nodes' close stops what
// still runs.
func (f *fullMesh) cancel(ctx context.Context, jobs []string) ([]string, error) {
	gw := f.c.Gateway()
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for _, j := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f.mu.Lock()
			via := f.via[j]
			f.mu.Unlock()
			if via == nil {
				via = gw
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			rec, err := via.Cancel(cctx, j)
			cancel()
			if err != nil || !rec.State.Terminal() {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %s %v", j, rec.State, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed, ctx.Err()
}

// cancelAll cancels jobs and waits until no node runs a process any more
// and the gateway's book shows every card free (so the next measurement
// starts on a free mesh).
func (f *fullMesh) cancelAll(ctx context.Context, jobs []string) error {
	failed, err := f.cancel(ctx, jobs)
	if err != nil {
		return err
	}
	gw := f.c.Gateway()
	deadline := time.Now().Add(30 * time.Second)
	for {
		busy := 0
		for _, n := range f.c.Up() {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			procs, err := n.Processes(pctx)
			cancel()
			if err == nil {
				busy += len(procs)
			}
		}
		cards, free := gw.BookCards()
		if busy == 0 && free >= cards {
			return nil
		}
		if time.Now().After(deadline) {
			refused := ""
			if len(failed) > 0 {
				refused = fmt.Sprintf("; %d cancellations failed, the first: %s", len(failed), failed[0])
			}
			return fmt.Errorf("bench: 30 s after cancelling, %d processes still run and the gateway's book shows %d of %d cards free%s", busy, free, cards, refused)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling the nodes
		}
	}
}

// sleepSpec is a job of cards cards that runs until cancelled.
func sleepSpec(id string, cards int) market.JobSpec {
	return market.JobSpec{ID: id, Cards: cards, AllowSimulated: true, MaxPriceCNY: 60, Command: []string{"sleep", "3600"}, ExpectedDuration: market.Duration(time.Hour)}
}

// submit submits spec through n (its owner is n's) and reports when the
// call began.
func (f *fullMesh) submit(ctx context.Context, n *node.Node, spec market.JobSpec) (time.Time, error) {
	f.mu.Lock()
	f.via[spec.ID] = n
	f.mu.Unlock()
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := n.Submit(sctx, spec)
	return t0, err
}
