package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/sim"
)

// runner is one run: the configuration, what was measured so far, and the
// full-node mesh the real-time scenarios share (started by the first that
// needs it, closed after the last).
type runner struct {
	cfg  Config
	res  *Results
	mesh *fullMesh
	// stopping counts what stops in the background after an interrupt
	// (Results.Stopped).
	stopping sync.WaitGroup
}

// background runs f, which stops nodes, after Run has returned; the
// results' Stopped waits for it.
func (r *runner) background(f func()) {
	r.stopping.Add(1)
	go func() {
		defer r.stopping.Done()
		f()
	}()
}

// phase is one half of a scenario: it appends rows (and plot lines) to
// r.res.
type phase func(ctx context.Context, r *runner) error

// phases returns a scenario's two halves: the figures that need no
// full-node mesh (virtual time, the gossip mesh, the quality workload),
// and the real-time figures of the full-node mesh (nil where there are
// none).
func phases(s string) (first, onMesh phase) {
	switch s {
	case ScenarioPlacement:
		return placementVirtual, placementReal
	case ScenarioThroughput:
		return throughputVirtual, throughputReal
	case ScenarioScaleup:
		return scaleupVirtual, scaleupReal
	case ScenarioFailover:
		return failoverVirtual, failoverReal // crashes nodes: the last on the mesh
	case ScenarioGossip:
		return runGossip, nil
	case ScenarioQuality:
		return runQuality, nil
	}
	return nil, nil
}

// Run runs the configured scenarios and returns what they measured: first
// every figure that needs no full-node mesh, so that nothing else runs in
// this process while they are measured, then the full-node mesh's. When
// ctx ends, the phase under way stops, every node is closed, and Run
// returns the results so far (Interrupted set) with ctx's error. A phase
// that fails leaves a note and the run goes on; the errors are returned
// with the results at the end.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Scenarios, _ = ParseScenarios(cfg.Scenarios)
	if err := CheckMemory(cfg); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, res: &Results{Started: time.Now().UTC().Truncate(time.Second), Machine: ThisMachine(), Config: cfg, stopped: make(chan struct{})}}
	defer func() {
		r.closeMesh(ctx)
		go func() { r.stopping.Wait(); close(r.res.stopped) }()
	}()
	failed := map[string]bool{}
	var errs []error
	do := func(s string, p phase, what string) {
		if p == nil || ctx.Err() != nil {
			return
		}
		cfg.Progress(fmt.Sprintf("%s: %s", s, what))
		t0 := time.Now()
		err := p(ctx, r)
		if err != nil && ctx.Err() == nil {
			failed[s] = true
			r.note("%s failed: %v", s, err)
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
		if ctx.Err() == nil {
			cfg.Progress(fmt.Sprintf("%s: %s done in %s", s, what, time.Since(t0).Round(100*time.Millisecond)))
		}
	}
	for _, s := range cfg.Scenarios {
		first, _ := phases(s)
		do(s, first, "virtual time and simulations")
	}
	for _, s := range cfg.Scenarios {
		_, onMesh := phases(s)
		do(s, onMesh, "on the full-node mesh")
	}
	r.closeMesh(ctx)
	order := map[string]int{"mesh": -1}
	for i, s := range Scenarios() {
		order[s] = i
	}
	slices.SortStableFunc(r.res.Rows, func(a, b Row) int { return order[a.Scenario] - order[b.Scenario] })
	r.res.Took = time.Since(r.res.Started).Round(time.Second).Seconds()
	if ctx.Err() != nil {
		r.res.Interrupted = true
		return r.res, ctx.Err()
	}
	for _, s := range cfg.Scenarios {
		if !failed[s] {
			r.res.Scenarios = append(r.res.Scenarios, s)
		}
	}
	return r.res, errors.Join(errs...)
}

// fullMesh starts the full-node mesh on first use.
func (r *runner) fullMesh(ctx context.Context) (*fullMesh, error) {
	if r.mesh != nil {
		return r.mesh, nil
	}
	r.cfg.Progress(fmt.Sprintf("starting %d full nodes", r.cfg.Nodes))
	m, err := startFullMesh(ctx, r.cfg, &r.res.Notes, r.background)
	if err != nil {
		return nil, err
	}
	r.mesh = m
	if _, avail := memInfo(); avail > 0 && r.cfg.Nodes < 1000 {
		need := uint64(1000*FullNodeMiB + baseMiB)
		fits := "would fit in memory"
		if !sim.Fits(need, avail) {
			fits = "would not fit in memory"
		}
		r.note("1000 full nodes need about %d MiB and %d MiB is available: they %s; this run used %d (--nodes), which started and formed in %s on %d CPUs",
			need, avail, fits, r.cfg.Nodes, m.formTook.Round(time.Second), runtime.NumCPU())
	}
	r.cfg.Progress(fmt.Sprintf("%d full nodes formed in %s", r.cfg.Nodes, m.formTook.Round(100*time.Millisecond)))
	r.row(Row{Scenario: "mesh", Case: fmt.Sprintf("%d full nodes (%d × %s)", r.cfg.Nodes, len(m.plan)-controllers(m.plan), text.Count(r.cfg.CardsPerNode, "card")),
		Clock: ClockReal, Metric: "start+form", Value: ms(m.formTook), Unit: "ms"})
	r.row(Row{Scenario: "mesh", Case: "heap+stacks per full node", Metric: "memory", Value: m.heapPerNode / (1 << 20), Unit: "MiB",
		Note: "Go heap and goroutine stacks after formation, divided by the nodes"})
	if m.rssPerNode > 0 {
		r.row(Row{Scenario: "mesh", Case: "RSS per full node", Metric: "memory", Value: m.rssPerNode / (1 << 20), Unit: "MiB",
			Note: "growth of the process's resident set while the mesh started, divided by the nodes"})
	}
	return m, nil
}

// closeMesh stops the full-node mesh: gracefully, or at once when ctx
// ended (Ctrl-C must be answered within a couple of seconds, and each
// graceful leave may take the mesh's LeaveTimeout).
func (r *runner) closeMesh(ctx context.Context) {
	if r.mesh == nil {
		return
	}
	m := r.mesh
	r.mesh = nil
	if ctx.Err() != nil {
		r.background(m.abort) // the results go out first
		return
	}
	m.close()
}

func (r *runner) row(row Row) { r.res.Rows = append(r.res.Rows, row) }

func (r *runner) note(format string, args ...any) {
	r.res.Notes = append(r.res.Notes, fmt.Sprintf(format, args...))
}

// plotLine adds a line to the plot named p.File, adding p (without its
// lines) first if the results have no such plot yet.
func (r *runner) plotLine(p Plot, l Line) {
	for i := range r.res.Plots {
		if r.res.Plots[i].File == p.File {
			r.res.Plots[i].Lines = append(r.res.Plots[i].Lines, l)
			return
		}
	}
	p.Lines = []Line{l}
	r.res.Plots = append(r.res.Plots, p)
}

// target returns row with a target and whether it was met.
func target(row Row, text string, met bool) Row {
	row.Target, row.Met = text, &met
	return row
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}
	m.MemoryMiB, m.AvailMiB = memInfo()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// medianOf returns the median of ds (the upper one of an even count).
func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
