package sim

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// Defaults of DemoConfig.
const (
	DefaultDemoNodes    = 50
	DefaultDemoDuration = time.Minute
	// DefaultTimeScale: the demo's suppliers come and go 60 times faster
	// than in life (a home PC's hour of up-time is a minute).
	DefaultTimeScale = 60
	// DefaultFormTimeout bounds the wait for the mesh to form before the
	// workload starts (it starts anyway, on the mesh formed so far).
	DefaultFormTimeout = 20 * time.Second
)

// DemoConfig configures RunDemo. Zero values take the defaults stated.
type DemoConfig struct {
	// Nodes is the number of suppliers. Default 50.
	Nodes int
	// Duration is how long the workload runs. Default 1 min.
	Duration time.Duration
	// Seed decides the suppliers, the workload and the chaos schedule.
	Seed uint64
	// API, when set, is served by the gateway node ("127.0.0.1:7070").
	API string
	// Dashboard, when set, is served at / of the API.
	Dashboard http.Handler
	// OwnerToken lets API callers act as the demo's owner, who submits
	// every job of the demo: jobs, logs and bills are served only to their
	// owner (the dashboard and `gpumesh jobs` send it as their API token).
	// Default: a random token, shown in the progress (Progress.Token).
	OwnerToken string
	// Chaos makes suppliers leave and come back (home PCs switched off,
	// café PCs taken back) as their tier's churn says, TimeScale times
	// faster than life. Coordinators stay.
	Chaos bool
	// TimeScale is how much faster than life churn and traces run.
	// Default 60.
	TimeScale float64
	// Trace, when set, supplies the jobs (PlanOptions.Trace), replayed from
	// TraceFrom (PlanOptions.TraceFrom: its busiest stretch by default) at
	// TraceSpeed times its speed (default TimeScale).
	Trace      *workload.Trace
	TraceFrom  time.Duration
	TraceSpeed float64
	// Availability, when set, decides who leaves and comes back when
	// instead of the tiers' churn (AvailabilitySchedule), TimeScale times
	// faster than the trace. It needs Chaos.
	Availability *workload.Availability
	// Mix is the supply. Default DefaultMix().
	Mix []TierProfile
	// Load is the share of the cards the workload keeps busy on average.
	// Default 0.3.
	Load float64
	// Dir holds the nodes' data; default a temporary directory, removed
	// at the end.
	Dir string
	// FormTimeout bounds the wait for the mesh to form. Default 20 s.
	FormTimeout time.Duration
	// Progress, when set, is called once for each node started while the
	// nodes start, then about once a second, and once more at the end;
	// never by two goroutines at once.
	Progress func(Progress)
	// Logger receives the nodes' logs. Default: discard.
	Logger *slog.Logger
}

// Phase says what a demo is doing.
type Phase string

// The phases of a demo.
const (
	PhaseStarting Phase = "starting" // nodes starting
	PhaseForming  Phase = "forming"  // waiting for the gateway to hear the mesh
	PhaseRunning  Phase = "running"  // the workload runs
	PhaseStopping Phase = "stopping" // the nodes stop
)

// Progress is a demo's state at one instant.
type Progress struct {
	Phase     Phase
	Elapsed   time.Duration // since the workload started
	Duration  time.Duration
	Formation Formation
	Started   int // nodes up so far, while starting (of len(Plan))
	Jobs      Counts
	Busy      []ModelBusy
	SpendCNY  float64
	Left      int // departures so far
	Joined    int // suppliers back
	API       string
	Token     string // the owner token of the API (DemoConfig.OwnerToken)
	Plan      []Supplier
	Seed      uint64
}

// RunDemo runs an in-process mesh of simulated suppliers with a workload
// and (with Chaos) churn, until Duration passes or ctx ends, and returns
// what happened. Ending early (ctx), even while the nodes start, still
// returns the summary so far (Summary.Stopped says when), with ctx's
// error. The nodes are stopped before it returns. A demo that would not
// fit in the memory available is refused (CheckDemoMemory).
func RunDemo(ctx context.Context, cfg DemoConfig) (*Summary, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := CheckDemoMemory(cfg.Nodes); err != nil {
		return nil, fmt.Errorf("sim: %d nodes: %w", cfg.Nodes, err)
	}
	plan, err := PlanSuppliers(cfg.Nodes, cfg.Mix, cfg.Seed)
	if err != nil {
		return nil, err
	}
	plan = WithControllers(plan, DefaultCoordinators(cfg.Nodes))
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpumesh-demo-"); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	obs := newObserver()
	profile := SimProfile()
	who, err := demoOwner(cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	ccfg := ClusterConfig{
		Suppliers:    plan,
		Dir:          dir,
		Dashboard:    cfg.Dashboard,
		TimeScale:    cfg.TimeScale,
		Profile:      &profile,
		TickInterval: 50 * time.Millisecond,
		Market:       SimMarket,
		OnEvent:      obs.event,
		Logger:       cfg.Logger,
		Owner:        &who,
	}
	if cfg.API != "" {
		ccfg.API = &api.Config{Addr: cfg.API, Logger: cfg.Logger, OwnerTokens: map[string]owner.Key{cfg.OwnerToken: who}}
	}
	d := &demo{cfg: cfg, obs: obs, plan: plan}
	ccfg.OnStarted = func(up, _ int) { d.report(Progress{Phase: PhaseStarting, Started: up}) }
	d.report(Progress{Phase: PhaseStarting})
	c, err := StartCluster(ctx, ccfg)
	if err != nil {
		var se *StartError
		if ctx.Err() != nil && errors.As(err, &se) {
			sum := d.summarize(Formation{}, 0)
			sum.Stopped, sum.Started, sum.Invariants = PhaseStarting, se.Up, nil
			return sum, ctx.Err()
		}
		return nil, err
	}
	d.cluster = c
	if cfg.API != "" {
		d.api = c.Gateway().APIAddr()
	}
	sum, runErr := d.run(ctx)
	d.report(d.progress(PhaseStopping))
	c.Close()
	return sum, runErr
}

func (c DemoConfig) withDefaults() DemoConfig {
	if c.Nodes == 0 {
		c.Nodes = DefaultDemoNodes
	}
	if c.Duration == 0 {
		c.Duration = DefaultDemoDuration
	}
	if c.TimeScale == 0 {
		c.TimeScale = DefaultTimeScale
	}
	if c.TraceSpeed == 0 {
		c.TraceSpeed = c.TimeScale
	}
	if c.Mix == nil {
		c.Mix = DefaultMix()
	}
	if c.Load == 0 {
		c.Load = 0.3
	}
	if c.FormTimeout == 0 {
		c.FormTimeout = DefaultFormTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OwnerToken == "" {
		c.OwnerToken = crand.Text()
	}
	return c
}

// demoOwner is the owner of every job of a demo: a key from the seed.
func demoOwner(seed uint64) (owner.Key, error) {
	b := make([]byte, 32)
	binary.BigEndian.PutUint64(b, seed)
	copy(b[8:], "gpumesh demo owner")
	return owner.KeyFromSeed(b)
}

// MaxDemoNodes bounds the suppliers of a demo whatever the memory (each
// full node takes about FullNodeMiB and a share of a core;
// CheckDemoMemory refuses fewer where it can tell).
const MaxDemoNodes = 10000

func (c DemoConfig) validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > MaxDemoNodes:
		return fmt.Errorf("sim: %d nodes: want 1 to %d", c.Nodes, MaxDemoNodes)
	case c.Duration < time.Second:
		return fmt.Errorf("sim: duration %v: want at least 1s", c.Duration)
	case !(c.TimeScale > 0):
		return fmt.Errorf("sim: time scale %v: want more than 0", c.TimeScale)
	case !(c.TraceSpeed > 0) || math.IsInf(c.TraceSpeed, 0):
		return fmt.Errorf("sim: trace speed %v: want more than 0", c.TraceSpeed)
	case c.Availability != nil && !c.Chaos:
		return errors.New("sim: an availability trace needs Chaos")
	}
	return nil
}

// demo is one run of RunDemo.
type demo struct {
	cfg     DemoConfig
	obs     *observer
	plan    []Supplier
	cluster *Cluster
	api     string
	started time.Time // of the workload
	form    Formation
	scale   ScaleResult
	source  string     // the workload's trace
	churnOf string     // where the churn came from
	mu      sync.Mutex // guards form, scale, started, churnOf
	// reportMu serializes calls to cfg.Progress (the nodes' starts report
	// from several goroutines).
	reportMu sync.Mutex
}

func (d *demo) report(p Progress) {
	if d.cfg.Progress != nil {
		d.reportMu.Lock()
		defer d.reportMu.Unlock()
		p.Duration, p.API, p.Plan, p.Seed = d.cfg.Duration, d.api, d.plan, d.cfg.Seed
		if d.api != "" {
			p.Token = d.cfg.OwnerToken
		}
		d.cfg.Progress(p)
	}
}

func (d *demo) progress(phase Phase) Progress {
	d.mu.Lock()
	p := Progress{Phase: phase, Formation: d.form}
	if !d.started.IsZero() {
		p.Elapsed = min(time.Since(d.started), d.cfg.Duration)
	}
	d.mu.Unlock()
	d.obs.mu.Lock()
	defer d.obs.mu.Unlock()
	p.Jobs, p.Busy, p.SpendCNY = d.obs.countsLocked(), d.obs.busyLocked(), d.obs.spendLocked()
	p.Left, p.Joined = d.obs.left, d.obs.joined
	return p
}

// run forms the mesh, then runs the workload, the chaos schedule, the
// sampler and the progress reports until the end, and summarizes.
func (d *demo) run(ctx context.Context) (*Summary, error) {
	fctx, cancel := context.WithTimeout(ctx, d.cfg.FormTimeout)
	var shown time.Time
	form, err := d.cluster.WaitFormed(fctx, 0.95, func(f Formation) {
		d.mu.Lock()
		d.form = f
		d.mu.Unlock()
		if time.Since(shown) >= 500*time.Millisecond {
			shown = time.Now()
			d.report(Progress{Phase: PhaseForming, Formation: f})
		}
	})
	cancel()
	if err != nil && ctx.Err() != nil {
		sum := d.summarize(form, 0)
		sum.Stopped, sum.Started, sum.Invariants = PhaseForming, form.Up, nil
		return sum, ctx.Err()
	}
	cards := 0
	for _, s := range d.plan {
		cards += s.Cards
	}
	wl, err := PlanWorkload(PlanOptions{Duration: d.cfg.Duration, Cards: cards, Load: d.cfg.Load, TimeScale: d.cfg.TraceSpeed, Trace: d.cfg.Trace, TraceFrom: d.cfg.TraceFrom, Seed: d.cfg.Seed})
	if err != nil {
		return nil, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	d.mu.Lock()
	d.started = time.Now()
	start := d.started
	d.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); d.submitAll(runCtx, start, wl) }()
	go func() { defer wg.Done(); d.trainingLoop(runCtx, start, wl) }()
	go func() { defer wg.Done(); d.sampleLoop(runCtx) }()
	if d.cfg.Chaos {
		events := d.chaos()
		wg.Add(1)
		go func() { defer wg.Done(); d.runChurn(runCtx, start, events) }()
	}
	timer := time.NewTimer(d.cfg.Duration)
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	timer.Stop()
	stop()
	wg.Wait()
	d.collect(true)
	d.report(d.progress(PhaseRunning))
	elapsed := min(time.Since(start), d.cfg.Duration)
	d.source = wl.Source
	sum := d.summarize(form, elapsed)
	if ctx.Err() != nil {
		sum.Stopped = PhaseRunning
	}
	return sum, ctx.Err()
}

// chaos is the churn schedule: the availability trace's, or drawn from
// the tiers' churn.
func (d *demo) chaos() []ChaosEvent {
	if av := d.cfg.Availability; av != nil {
		events, use := AvailabilitySchedule(d.plan, *av, d.cfg.Duration, d.cfg.TimeScale)
		desc := fmt.Sprintf("availability trace %s: %d trace nodes drive suppliers", use.Name, len(use.Drives))
		if len(use.Unused) > 0 {
			desc += fmt.Sprintf(", %d unused", len(use.Unused))
		}
		d.setChurn(desc)
		return events
	}
	d.setChurn("drawn from the tiers' churn")
	return ChaosSchedule(d.plan, d.cfg.Duration, d.cfg.TimeScale, d.cfg.Seed)
}

func (d *demo) setChurn(desc string) {
	d.mu.Lock()
	d.churnOf = desc
	d.mu.Unlock()
}

// submitAll submits the planned jobs through the gateway at their times,
// a few at a time.
func (d *demo) submitAll(ctx context.Context, start time.Time, wl WorkloadPlan) {
	gw := d.cluster.Gateway()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, pj := range wl.Jobs {
		if !sleepUntil(ctx, start.Add(pj.At)) {
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d.obs.submitting(pj.Spec, pj.Kind, time.Now())
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_, err := gw.Submit(sctx, pj.Spec)
			cancel()
			d.obs.submitted(pj.Spec.ID, err)
		}()
	}
}

// sleepUntil waits for t and reports false if ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// trainingLoop grows the training job and shrinks it back on schedule.
func (d *demo) trainingLoop(ctx context.Context, start time.Time, wl WorkloadPlan) {
	gw := d.cluster.Gateway()
	if !sleepUntil(ctx, start.Add(wl.ScaleUpAt)) {
		return
	}
	d.scaleTraining(ctx, gw, wl.Training, true)
	if !sleepUntil(ctx, start.Add(wl.ScaleDownAt)) {
		return
	}
	d.scaleTraining(ctx, gw, wl.Training, false)
}

// ScaleResult is what became of the training job's growth.
type ScaleResult struct {
	Job      string
	From, To int           // cards before and asked
	Reached  int           // cards running at the end of the wait
	Took     time.Duration // from the request to Reached cards running
	Err      string
	At       time.Duration // when it was asked, after the workload started
	Down     bool          // shrunk back afterwards
}

// scaleTraining grows the training job to every free card of its class
// (whole free nodes, 8 cards each), or shrinks it back to 8, and for a
// growth waits until the cards run (or 20 s pass).
func (d *demo) scaleTraining(ctx context.Context, gw *node.Node, id string, up bool) {
	rec, err := gw.Job(ctx, id)
	if err != nil || rec.State != market.JobRunning {
		if up {
			d.setScale(ScaleResult{Job: id, Err: fmt.Sprintf("not running (%s %v)", rec.State, err)})
		}
		return
	}
	if !up {
		if _, err := gw.Scale(ctx, id, 8); err == nil {
			d.mu.Lock()
			d.scale.Down = true
			d.mu.Unlock()
		}
		return
	}
	target := rec.Cards + 8*d.freeClassNodes()
	target = min(target, MaxTrainingCards)
	res := ScaleResult{Job: id, From: rec.Cards, To: target}
	if target <= rec.Cards {
		res.Err = "no free node of its class"
		d.setScale(res)
		return
	}
	t0 := time.Now()
	res.At = t0.Sub(d.startedAt())
	if _, err := gw.Scale(ctx, id, target); err != nil {
		res.Err = err.Error()
		d.setScale(res)
		return
	}
	deadline := t0.Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r, err := gw.Job(ctx, id)
		if err == nil {
			res.Reached = runningCards(r)
			if res.Reached >= target {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // polling the record, not synchronizing
	}
	res.Took = time.Since(t0)
	d.setScale(res)
}

func (d *demo) startedAt() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.started
}

func (d *demo) setScale(r ScaleResult) {
	d.mu.Lock()
	d.scale = r
	d.mu.Unlock()
}

// runningCards counts the cards of a record's running placements.
func runningCards(r market.JobRecord) int {
	n := 0
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning {
			n += len(p.Cards)
		}
	}
	return n
}

// freeClassNodes counts the nodes up whose 8 cards are of the training
// class and all free now (no process holds them).
func (d *demo) freeClassNodes() int {
	n := 0
	for _, m := range d.cluster.Members() {
		if m.Node == nil || len(m.Cards) < 8 || m.Cards[0].MemoryMiB < TrainingClass.MinMemoryMiB {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		procs, err := m.Node.Processes(ctx)
		cancel()
		if err == nil && len(procs) == 0 {
			n++
		}
	}
	return n
}

// sampleLoop samples every node's processes five times a second, folds the
// coordinators' records and reports progress once a second.
func (d *demo) sampleLoop(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d.sampleNodes()
		if i%5 == 0 {
			d.collect(false)
			d.mu.Lock()
			d.form = d.cluster.Formed()
			d.mu.Unlock()
			d.report(d.progress(PhaseRunning))
		}
	}
}

func (d *demo) sampleNodes() {
	var samples []nodeSample
	for _, m := range d.cluster.Members() {
		if m.Node == nil {
			continue
		}
		ns := nodeSample{supplier: m.Supplier.Name, cards: m.Cards}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		procs, err := m.Node.Processes(ctx)
		cancel()
		if err != nil {
			continue // the node is closing, or its driver is busy: next time
		}
		for _, p := range procs {
			ns.procs = append(ns.procs, procSample{job: p.Job, share: p.Share, epoch: p.Epoch, cards: p.Cards})
		}
		samples = append(samples, ns)
	}
	d.obs.sample(time.Now(), samples)
}

// collect folds the records of every coordinator that is up.
func (d *demo) collect(final bool) {
	var recs []market.JobRecord
	for _, n := range d.cluster.Up() {
		recs = append(recs, n.CoordinatedJobs()...)
	}
	d.obs.records(recs, final)
}

// SimMarket sets the market timings of a simulation: many full nodes on a
// few shared cores deliver a message in tens to hundreds of milliseconds,
// not the one a LAN takes, so the windows that assume a fast network are
// widened: bids are awaited for up to 1 s (the round still closes as soon
// as the best candidates have answered), an award for 2 s, a reservation
// lasts 5 s; runners renew every second, fence themselves after 4 s
// without an answer, and a share is declared lost after 5 s of silence
// (the defaults: 150 ms, 500 ms, 2 s, 300 ms, 1.5 s and 2 s). Reroutes take
// correspondingly longer than on a real mesh.
func SimMarket(c *market.Config) {
	c.BidWindow = time.Second
	c.AwardTimeout = 2 * time.Second
	c.ReserveTTL = 5 * time.Second
	c.LeaseMargin = 500 * time.Millisecond
	c.RenewInterval = time.Second
	c.FenceAfter = 4 * time.Second
	c.LostAfter = 5 * time.Second
	c.HintGrace = time.Second
}
