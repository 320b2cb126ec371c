package procbench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/internal/procstat"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/gpumesh/gpumesh/node/sim/bench"
)

// Scenario is the name of the processes scenario in gpumesh bench.
const Scenario = "processes"

// sample is one submission as its submitter saw it.
type sample struct {
	id     string
	node   int // the node it was submitted to
	sent   time.Time
	acked  time.Time // zero when it was refused
	status int       // 201, or the status of the final refusal; 0: no answer
	err    string
	// From the job's record, read at the end: when it ran, as the
	// coordinator saw it, and when the coordinator took it; its awards,
	// and those rejected or not answered in time (each gave the share
	// to another award).
	running, submittedAt time.Time
	awards, awardsLost   int
}

// usage is what every node process had used at one moment.
type usage struct {
	at   time.Time
	each []procstat.Usage
}

func (c *cluster) usage() (usage, error) {
	u := usage{at: time.Now(), each: make([]procstat.Usage, len(c.procs))}
	for i, p := range c.procs {
		var err error
		if u.each[i], err = procstat.Read(p.cmd.Process.Pid); err != nil {
			return u, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return u, nil
}

func (u usage) cpu() (own, children time.Duration) {
	for _, e := range u.each {
		own += e.CPU
		children += e.Children
	}
	return own, children
}

// Run starts cfg.Nodes `gpumesh node` processes on loopback, lets them
// form a mesh, watches it idle for cfg.Idle, then has cfg.Submitters
// submit cfg.Jobs 1-card `true` jobs through the nodes' HTTP APIs at once,
// and measures what a user and an operator see: jobs accepted and placed
// per second, submit→acknowledged and submit→running, refusals by status,
// the CPU the node processes spent per placed job, and idle CPU and
// memory per node. When ctx ends it stops within about a second and
// returns what it measured so far (Interrupted set) with ctx's error.
func Run(ctx context.Context, cfg Config) (*bench.Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r, err := newRun(cfg, Scenario, fmt.Sprintf("%s × %s (%s), %s, %s", processes(cfg.Nodes), text.Count(cfg.Cards, "card"), cfg.Model,
		text.Count(cfg.Submitters, "submitter"), text.Count(cfg.Jobs, "1-card job")))
	if err != nil {
		return nil, err
	}
	return r.conclude(ctx, Scenario, r.run(ctx))
}

// newRun checks that this system has the /proc the scenarios read and
// starts a run's results: when, on what machine, what was set up.
func newRun(cfg Config, scenario, setup string) (*run, error) {
	if _, err := procstat.Read(os.Getpid()); err != nil {
		return nil, fmt.Errorf("%w: the %s scenario reads /proc: %v", ErrBadConfig, scenario, err)
	}
	res := &bench.Results{Started: time.Now().UTC().Truncate(time.Second), Machine: bench.ThisMachine(), Setup: setup}
	return &run{cfg: cfg, res: res}, nil
}

// conclude finishes the results of a run of scenario that ended with err:
// how long it took, the load average, and whether Ctrl-C cut it short.
func (r *run) conclude(ctx context.Context, scenario string, err error) (*bench.Results, error) {
	res := r.res
	res.Took = time.Since(res.Started).Round(time.Second).Seconds()
	if la := bench.ThisMachine().LoadAvg; la != "" {
		r.note("load average at the end: %s (at the start: %s)", la, res.Machine.LoadAvg)
	}
	if ctx.Err() != nil {
		res.Interrupted = true
		return res, ctx.Err()
	}
	if err == nil {
		res.Scenarios = []string{scenario}
	}
	return res, err
}

type run struct {
	cfg Config
	res *bench.Results
	// idleCPU is what all node processes spent per second of the idle
	// watch (CPU seconds per second; 0 when there was none).
	idleCPU float64
}

func (r *run) note(format string, args ...any) {
	r.res.Notes = append(r.res.Notes, fmt.Sprintf(format, args...))
}

func (r *run) row(row bench.Row) {
	row.Scenario = Scenario
	r.res.Rows = append(r.res.Rows, row)
}

// withCluster makes the run's directory (cfg.Dir, or a temporary one
// named after prefix), starts cfg's node processes in it and calls fn with
// them and the time they took to form a mesh. It stops the processes after
// fn (within a second after Ctrl-C), and removes the directory unless
// cfg.KeepDir or the run failed, noting where it is kept.
func (r *run) withCluster(ctx context.Context, cfg Config, prefix string, fn func(ctx context.Context, c *cluster, formed time.Duration) error) (err error) {
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", prefix); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		switch {
		case cfg.KeepDir:
			r.note("the nodes' data and logs are in %s", dir)
		case err != nil && ctx.Err() == nil:
			r.note("the nodes' data and logs are kept in %s", dir)
		default:
			os.RemoveAll(dir)
		}
	}()
	t0 := time.Now()
	cfg.Progress(fmt.Sprintf("starting %s on loopback", processes(cfg.Nodes)))
	c, err := startCluster(ctx, cfg, dir)
	if err != nil {
		if ctx.Err() != nil {
			r.note("stopped while the node processes started: nothing was measured")
		}
		return err
	}
	defer func() {
		grace := 5 * time.Second
		if ctx.Err() != nil {
			grace = 500 * time.Millisecond // Ctrl-C: be gone within a second
		}
		c.stop(grace)
	}()
	return fn(ctx, c, time.Since(t0))
}

func (r *run) run(ctx context.Context) error {
	return r.withCluster(ctx, r.cfg, "gpumesh-bench-processes-", r.load)
}

// load is the processes scenario on a formed cluster.
func (r *run) load(ctx context.Context, c *cluster, formed time.Duration) error {
	cfg := r.cfg
	cfg.Progress(fmt.Sprintf("mesh formed in %s", formed.Round(100*time.Millisecond)))
	r.row(bench.Row{Case: "start and form", Clock: bench.ClockReal, Metric: "time", Value: formed.Seconds(), Unit: "s",
		Note: "processes started one after another, until every node sees every member alive and coordinating and every supplier's cards in its book"})

	// Idle: CPU and memory of each node with nothing to do.
	var err error
	if r.idleCPU, err = r.watchIdle(ctx, c, "idle, per node", "watching the idle mesh"); err != nil {
		return err
	}

	w := newWatch(c)
	defer w.close()
	if !w.waitReady(10 * time.Second) {
		r.note("not every node's event stream opened within 10 s: jobs placed through those nodes were read from their records")
	}
	before, err := c.usage()
	if err != nil {
		return err
	}
	cfg.Progress(fmt.Sprintf("%s submit %s", text.Count(cfg.Submitters, "submitter"), text.Count(cfg.Jobs, "job")))
	var profiled sync.WaitGroup
	if cfg.ProfileDir != "" {
		profiled.Add(1)
		go func() {
			defer profiled.Done()
			if err := c.profile(ctx, cfg.ProfileDir, cfg.ProfileFor); err != nil && ctx.Err() == nil {
				r.note("profiles: %v", err)
			}
		}()
	}
	samples, retried := r.submit(ctx, c)
	var accepted []string
	lastAck := time.Time{}
	for _, s := range samples {
		if s.status == 201 {
			accepted = append(accepted, s.id)
			if s.acked.After(lastAck) {
				lastAck = s.acked
			}
		}
	}
	if ctx.Err() == nil && len(accepted) > 0 {
		cfg.Progress(fmt.Sprintf("%d accepted; waiting for them to run and end (at most %v)", len(accepted), cfg.Drain))
		r.drain(ctx, w, accepted)
	}
	after, err := c.usage()
	if err != nil && ctx.Err() == nil {
		return err
	}
	profiled.Wait()
	if cfg.ProfileDir != "" && ctx.Err() == nil {
		r.note("CPU profiles and execution traces of the load's first %v: %s/node-N.cpu.pprof (go tool pprof -top BINARY FILE) and node-N.trace (go tool trace FILE: where the nodes wait)", cfg.ProfileFor, cfg.ProfileDir)
	}
	placedHeard, endedHeard := w.counts(accepted)
	// The records say when each job ran, as its coordinator saw it; a
	// Ctrl-C skips them (they take a request each).
	if ctx.Err() == nil {
		cfg.Progress("reading the jobs' records")
		r.records(ctx, c, samples)
	} else {
		w.mu.Lock()
		for i := range samples {
			samples[i].running = w.placed[samples[i].id]
		}
		w.mu.Unlock()
	}
	r.loadRows(samples, retried, before, after)
	if ctx.Err() == nil {
		if st, err := c.stages(ctx); err != nil {
			r.note("stage timings: %v", err)
		} else {
			r.stageRows(st)
		}
	}
	if placedHeard < len(accepted) || endedHeard < len(accepted) {
		r.note("events heard: %d of %d accepted jobs placed, %d ended (the rest were read from their records, or had not run yet)", placedHeard, len(accepted), endedHeard)
	}
	if ctx.Err() == nil && cfg.Singles > 0 {
		cfg.Progress(fmt.Sprintf("submitting %s one at a time", text.Count(cfg.Singles, "job")))
		r.singleRows(r.singles(ctx, c, w))
	}
	// Idle again: what the jobs left behind costs every node from now on.
	if ctx.Err() == nil {
		_, err := r.watchIdle(ctx, c, "idle after the load, per node", "watching the mesh idle again")
		return err
	}
	return nil
}

// watchIdle measures each node's CPU and memory over cfg.Idle with
// nothing submitted, as rows of case name, and returns the CPU seconds per
// second all nodes spent; nothing without an idle window.
func (r *run) watchIdle(ctx context.Context, c *cluster, name, progress string) (float64, error) {
	if r.cfg.Idle <= 0 {
		return 0, nil
	}
	r.cfg.Progress(fmt.Sprintf("%s for %v", progress, r.cfg.Idle))
	before, err := c.usage()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(r.cfg.Idle):
	}
	after, err := c.usage()
	if err != nil {
		return 0, err
	}
	return r.idleRows(name, before, after), nil
}

// idleRows reports each node's CPU and resident memory over an idle
// window, as rows of case name, and returns the CPU seconds per second all
// nodes spent (the first window's is what the load's "beyond idle" row
// takes off).
func (r *run) idleRows(name string, before, after usage) float64 {
	window := after.at.Sub(before.at)
	own0, _ := before.cpu()
	own1, _ := after.cpu()
	var cpu, rss []float64
	for i := range after.each {
		cpu = append(cpu, 100*float64(after.each[i].CPU-before.each[i].CPU)/float64(window))
		rss = append(rss, float64(after.each[i].RSS)/(1<<20))
	}
	shape20 := r.cfg.Nodes == 20 && r.cfg.Cards == 8
	mean, most := meanMax(cpu)
	row := bench.Row{Case: name, Metric: "CPU mean", Value: mean, Unit: "%", N: len(cpu),
		Note: fmt.Sprintf("of one core, over %v; the busiest node %.1f%%", window.Round(time.Second), most)}
	if shape20 {
		row = target(row, "≤ 2% at 20 nodes", mean <= 2)
	}
	r.row(row)
	mean, most = meanMax(rss)
	row = bench.Row{Case: name, Metric: "RSS mean", Value: mean, Unit: "MiB", N: len(rss),
		Note: fmt.Sprintf("resident set (VmRSS); the largest %.0f MiB", most)}
	if shape20 {
		row = target(row, "≤ 60 MiB at 20 nodes", mean <= 60)
	}
	r.row(row)
	return float64(own1-own0) / float64(window)
}

// submit runs the submitters until every job was submitted or ctx ends,
// and returns the samples of the jobs sent and the retries counted by
// status.
func (r *run) submit(ctx context.Context, c *cluster) ([]sample, map[int]int) {
	cfg := r.cfg
	jobs := make(chan int, cfg.Jobs)
	for i := range cfg.Jobs {
		jobs <- i
	}
	close(jobs)
	samples := make([]sample, cfg.Jobs)
	var mu sync.Mutex
	retried := map[int]int{}
	var wg sync.WaitGroup
	var acked atomic.Int64
	stopTicker := make(chan struct{})
	var tickerDone sync.WaitGroup
	tickerDone.Add(1)
	go func() { // a line a second while the jobs go in
		defer tickerDone.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTicker:
				return
			case <-t.C:
				cfg.Progress(fmt.Sprintf("%d of %d jobs accepted", acked.Load(), cfg.Jobs))
			}
		}
	}()
	defer func() { close(stopTicker); tickerDone.Wait() }()
	for s := range cfg.Submitters {
		node := s % len(c.procs)
		cl, err := client.New(c.procs[node].api, client.WithToken(c.token), client.WithSubmitRetry(cfg.RetryFor, func(n client.RetryNote) {
			mu.Lock()
			retried[n.Status]++
			mu.Unlock()
		}))
		if err != nil {
			panic(err) // the address is ours and well formed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.CloseIdleConnections()
			for i := range jobs {
				if ctx.Err() != nil {
					return
				}
				id, err := jobID()
				if err != nil {
					return
				}
				sm := sample{id: id, node: node, sent: time.Now()}
				_, err = cl.Submit(ctx, benchJob(id))
				switch {
				case err == nil:
					sm.acked, sm.status = time.Now(), 201
					acked.Add(1)
				case ctx.Err() != nil:
					continue // not answered: stopped
				default:
					var ae *client.APIError
					if errors.As(err, &ae) {
						sm.status = ae.Status
					}
					sm.err = err.Error()
				}
				samples[i] = sm
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(samples, func(s sample) bool { return s.id == "" }), retried
}

// benchJob is the job every submission of the scenario sends: one
// simulated card running `true`.
func benchJob(id string) market.JobSpec {
	return market.JobSpec{ID: id, Cards: 1, AllowSimulated: true, Command: []string{"true"}}
}

// runningTimes are the accepted samples' times from submission to
// running: from the submitter's send (run), and at the coordinator, from
// its submitted_at (atCoord). Samples refused or not seen running are
// left out.
func runningTimes(samples []sample) (run, atCoord []time.Duration) {
	for _, s := range samples {
		if s.status != 201 || s.running.IsZero() {
			continue
		}
		run = append(run, s.running.Sub(s.sent))
		if !s.submittedAt.IsZero() {
			atCoord = append(atCoord, s.running.Sub(s.submittedAt))
		}
	}
	return run, atCoord
}

func jobID() (string, error) {
	b := make([]byte, market.JobIDRandomBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return market.NewJobID(b)
}

// drain waits until every accepted job was heard placed and ended, or
// cfg.Drain passes, or ctx ends.
func (r *run) drain(ctx context.Context, w *watch, accepted []string) {
	deadline := time.After(r.cfg.Drain)
	for {
		placed, ended := w.counts(accepted)
		if placed == len(accepted) && ended == len(accepted) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			r.note("after %v, %d of %d accepted jobs were heard placed and %d ended", r.cfg.Drain, placed, len(accepted), ended)
			return
		case <-w.changed:
		}
	}
}

// records reads each accepted job's record from the node it was submitted
// to, 8 at a time.
func (r *run) records(ctx context.Context, c *cluster, samples []sample) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range samples {
		if samples[i].status != 201 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var rec market.JobRecord
			if err := c.get(ctx, c.procs[samples[i].node], "/v1/jobs/"+samples[i].id, &rec); err == nil {
				samples[i].running, samples[i].submittedAt = rec.RunningAt, rec.SubmittedAt
				samples[i].awards = len(rec.Placements)
				for _, p := range rec.Placements {
					if p.State == market.PlacementRejected {
						samples[i].awardsLost++
					}
				}
			}
		}()
	}
	wg.Wait()
}

// loadRows reports the load: throughput, latency, refusals and CPU.
func (r *run) loadRows(samples []sample, retried map[int]int, before, after usage) {
	cfg := r.cfg
	if len(samples) == 0 {
		r.note("no job was submitted")
		return
	}
	shape5 := cfg.Nodes == 5 && cfg.Cards == 64 && cfg.Submitters == 32
	shape20 := cfg.Nodes == 20 && cfg.Cards == 8
	first := samples[0].sent
	for _, s := range samples {
		if s.sent.Before(first) {
			first = s.sent
		}
	}
	var ack []time.Duration
	var lastAck, lastRun time.Time
	refused := map[string]int{}
	awards, lost := 0, 0
	for _, s := range samples {
		if s.status != 201 {
			why := "no answer"
			if s.status != 0 {
				why = fmt.Sprintf("%d", s.status)
			}
			refused[why]++
			continue
		}
		ack = append(ack, s.acked.Sub(s.sent))
		if s.acked.After(lastAck) {
			lastAck = s.acked
		}
		if !s.running.IsZero() {
			if s.running.After(lastRun) {
				lastRun = s.running
			}
			awards += s.awards
			lost += s.awardsLost
		}
	}
	run, atCoord := runningTimes(samples)
	c := "load"
	if len(ack) > 0 {
		rate := float64(len(ack)) / lastAck.Sub(first).Seconds()
		r.row(bench.Row{Case: c, Clock: bench.ClockReal, Metric: "accepted", Value: rate, Unit: "jobs/s", N: len(ack),
			Note: "acknowledged submissions, from the first sent to the last acknowledged"})
	}
	if len(run) > 0 {
		rate := float64(len(run)) / lastRun.Sub(first).Seconds()
		row := bench.Row{Case: c, Clock: bench.ClockReal, Metric: "placed", Value: rate, Unit: "jobs/s", N: len(run),
			Note: "jobs running, from the first submission sent to the last job running"}
		switch {
		case shape5:
			row = target(row, "≥ 300 jobs/s", rate >= 300)
		case shape20:
			row = target(row, "≥ 150 jobs/s", rate >= 150)
		}
		r.row(row)
	}
	nref := 0
	var parts []string
	for _, k := range sortedKeys(refused) {
		nref += refused[k]
		parts = append(parts, fmt.Sprintf("%d × %s", refused[k], k))
	}
	row := bench.Row{Case: c, Metric: "refused", Value: float64(nref), Unit: "jobs", N: len(samples),
		Note: "submissions that ended in an error after the client's retries: " + orNone(strings.Join(parts, ", "))}
	if shape5 || shape20 {
		row = target(row, "0", nref == 0)
	}
	r.row(row)
	nret := 0
	parts = nil
	for _, k := range sortedKeys(retried) {
		nret += retried[k]
		parts = append(parts, fmt.Sprintf("%d × %d", retried[k], k))
	}
	r.row(bench.Row{Case: c, Metric: "retried", Value: float64(nret), Unit: "answers", Note: "429 and 503 answers the client sent again: " + orNone(strings.Join(parts, ", "))})
	if len(ack) > 0 {
		r.row(bench.Row{Case: "submit → acknowledged", Clock: bench.ClockReal, Metric: "p50", Value: ms(quantile(ack, 0.5)), Unit: "ms", N: len(ack)})
		row := bench.Row{Case: "submit → acknowledged", Clock: bench.ClockReal, Metric: "p99", Value: ms(quantile(ack, 0.99)), Unit: "ms", N: len(ack)}
		if shape5 {
			row = target(row, "< 250 ms", quantile(ack, 0.99) < 250*time.Millisecond)
		}
		r.row(row)
	}
	if len(run) > 0 {
		r.row(bench.Row{Case: "submit → running", Clock: bench.ClockReal, Metric: "p50", Value: ms(quantile(run, 0.5)), Unit: "ms", N: len(run),
			Note: "from the submitter's send to the coordinator's running_at (one clock: one machine)"})
		r.row(bench.Row{Case: "submit → running", Clock: bench.ClockReal, Metric: "p99", Value: ms(quantile(run, 0.99)), Unit: "ms", N: len(run)})
	}
	if len(run) > 0 && awards > 0 {
		r.row(bench.Row{Case: "awards", Metric: "per placed job", Value: float64(awards) / float64(len(run)), Unit: "awards", N: len(run),
			Note: "from the jobs' records: 1 when every share's first award was accepted"})
		r.row(bench.Row{Case: "awards", Metric: "rejected or not answered in time", Value: float64(lost), Unit: "awards", N: awards,
			Note: "each gave its share to another award; one answered late starts, then stops"})
	}
	if len(atCoord) > 0 {
		p50 := quantile(atCoord, 0.5)
		r.row(target(bench.Row{Case: "submit → running at the coordinator", Clock: bench.ClockReal, Metric: "p50", Value: ms(p50), Unit: "ms", N: len(atCoord),
			Note: "the record's running_at − submitted_at"}, "< 50 ms", p50 < 50*time.Millisecond))
	}
	own0, kids0 := before.cpu()
	own1, kids1 := after.cpu()
	if n := len(run); n > 0 && len(after.each) > 0 {
		window := after.at.Sub(before.at)
		r.row(bench.Row{Case: "CPU per placed job", Metric: "node processes", Value: ms(own1-own0) / float64(n), Unit: "ms", N: n,
			Note: fmt.Sprintf("%.1f s of CPU (utime+stime) of all node processes from the first submission until every job ended, over %.1f s", (own1 - own0).Seconds(), window.Seconds())})
		if r.idleCPU > 0 {
			// What the jobs cost: the same CPU less what the mesh spends
			// with nothing to do (probes, gossip, ads) over the same time,
			// which a slower load spreads over fewer jobs.
			idle := time.Duration(r.idleCPU * float64(window))
			r.row(bench.Row{Case: "CPU per placed job", Metric: "node processes, beyond idle", Value: ms(max(0, own1-own0-idle)) / float64(n), Unit: "ms", N: n,
				Note: fmt.Sprintf("the row above less %.1f s: the %.3f CPU seconds per second the idle mesh spent, over the %.1f s", idle.Seconds(), r.idleCPU, window.Seconds())})
		}
		r.row(bench.Row{Case: "CPU per placed job", Metric: "job processes", Value: ms(kids1-kids0) / float64(n), Unit: "ms", N: n,
			Note: "the jobs' own processes (`true`), reaped by the nodes (cutime+cstime)"})
	}
}

func target(row bench.Row, text string, met bool) bench.Row {
	row.Target, row.Met = text, &met
	return row
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the q-quantile of ds, nearest rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func meanMax(xs []float64) (mean, most float64) {
	for _, x := range xs {
		mean += x
		most = max(most, x)
	}
	return mean / float64(len(xs)), most
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	var ks []K
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// processes is "1 node process", "5 node processes".
func processes(n int) string {
	if n == 1 {
		return "1 node process"
	}
	return fmt.Sprintf("%d node processes", n)
}

// stageRows reports the median of each stage of the jobs' way, from the
// nodes' gpumesh_job_stage_seconds (summed over the nodes; estimated
// within the histogram's buckets, as Prometheus does).
func (r *run) stageRows(st map[string]*stageHist) {
	for _, s := range metrics.Stages() {
		h := st[string(s)]
		if h == nil || h.count == 0 {
			continue
		}
		r.row(bench.Row{Case: "stage " + string(s), Clock: bench.ClockReal, Metric: "p50", Value: 1000 * h.quantile(0.5), Unit: "ms", N: int(h.count),
			Note: fmt.Sprintf("mean %.2f ms; gpumesh_job_stage_seconds, all nodes", 1000*h.sum/h.count)})
	}
}
