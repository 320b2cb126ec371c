package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// runner is one run: the configuration, what was measured so far, and the
// full-node mesh the real-time scenarios share (started by the first that
// needs it, closed after the last).
type runner struct {
	cfg  Config
	res  *Results
	mesh *fullMesh
}

// scenario measures one scenario and appends its rows to r.res.
type scenario func(ctx context.Context, r *runner) error

var scenarioFuncs = map[string]scenario{
	ScenarioPlacement:  runPlacement,
	ScenarioThroughput: runThroughput,
	ScenarioScaleup:    runScaleup,
	ScenarioFailover:   runFailover,
	ScenarioGossip:     runGossip,
	ScenarioQuality:    runQuality,
}

// usesFullMesh are the scenarios measured on the full-node mesh. failover
// crashes nodes, so it comes last of them.
var usesFullMesh = map[string]bool{ScenarioPlacement: true, ScenarioThroughput: true, ScenarioScaleup: true, ScenarioFailover: true}

// Run runs the configured scenarios one after the other and returns what
// they measured. When ctx ends, the scenario under way stops, every node
// is closed, and Run returns the results so far (Interrupted set) with
// ctx's error. A scenario that fails leaves a note and the run goes on;
// its error is returned with the results at the end.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Scenarios, _ = ParseScenarios(cfg.Scenarios)
	if err := CheckMemory(cfg); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, res: &Results{Started: time.Now().UTC().Truncate(time.Second), Machine: ThisMachine(), Config: cfg}}
	defer r.closeMesh()
	var errs []error
	lastFull := ""
	for _, s := range cfg.Scenarios {
		if usesFullMesh[s] {
			lastFull = s
		}
	}
	for _, s := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		cfg.Progress(fmt.Sprintf("%s: running", s))
		t0 := time.Now()
		err := scenarioFuncs[s](ctx, r)
		if s == lastFull {
			r.closeMesh()
		}
		if err != nil && ctx.Err() == nil {
			r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s failed: %v", s, err))
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
		if ctx.Err() == nil {
			r.res.Scenarios = append(r.res.Scenarios, s)
			cfg.Progress(fmt.Sprintf("%s: done in %s", s, time.Since(t0).Round(100*time.Millisecond)))
		}
	}
	r.res.Took = time.Since(r.res.Started).Round(time.Second).Seconds()
	if ctx.Err() != nil {
		r.res.Interrupted = true
		return r.res, ctx.Err()
	}
	return r.res, errors.Join(errs...)
}

// fullMesh starts the full-node mesh on first use.
func (r *runner) fullMesh(ctx context.Context) (*fullMesh, error) {
	if r.mesh != nil {
		return r.mesh, nil
	}
	r.cfg.Progress(fmt.Sprintf("starting %d full nodes", r.cfg.Nodes))
	m, err := startFullMesh(ctx, r.cfg, &r.res.Notes)
	if err != nil {
		return nil, err
	}
	r.mesh = m
	r.cfg.Progress(fmt.Sprintf("%d full nodes formed in %s", r.cfg.Nodes, m.formTook.Round(100*time.Millisecond)))
	r.row(Row{Scenario: "mesh", Case: fmt.Sprintf("%d full nodes (%d × %d cards)", r.cfg.Nodes, len(m.plan)-controllers(m.plan), r.cfg.CardsPerNode),
		Clock: ClockReal, Metric: "start+form", Value: ms(m.formTook), Unit: "ms"})
	r.row(Row{Scenario: "mesh", Case: "heap+stacks per full node", Metric: "memory", Value: m.heapPerNode / (1 << 20), Unit: "MiB",
		Note: "Go heap and goroutine stacks after formation, divided by the nodes"})
	return m, nil
}

func (r *runner) closeMesh() {
	if r.mesh != nil {
		r.mesh.close()
		r.mesh = nil
	}
}

func (r *runner) row(row Row) { r.res.Rows = append(r.res.Rows, row) }

func (r *runner) note(format string, args ...any) {
	r.res.Notes = append(r.res.Notes, fmt.Sprintf(format, args...))
}

func (r *runner) plot(p Plot) { r.res.Plots = append(r.res.Plots, p) }

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
