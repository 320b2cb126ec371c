package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/node/sim"
	"github.com/gpumesh/gpumesh/node/sim/bench"
	"github.com/gpumesh/gpumesh/node/sim/procbench"
)

// benchFlags are the flags of `gpumesh bench`.
type benchFlags struct {
	scenarios  []string
	nodes      int
	out        string
	json       bool
	seed       uint64
	logFile    string
	cards      int
	submitters int
	jobs       int
	profile    string
	keep       string
	baseline   string
	runs       int
	hold       time.Duration
	settle     time.Duration
	maxStart   time.Duration
	flags      *pflag.FlagSet // to tell a flag given from its default
}

func newBenchCommand(e env) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure placement, throughput, scale-up, failover, gossip and placement quality on this machine",
		Long: `Measure what gpumesh promises, on this machine, against a baseline. Each
scenario reports real time here and, where it applies, protocol time under
virtual time (the market's harness with 0.5 ms and 40 ms one-way links),
which does not depend on the machine's load.

Scenarios (--scenario, repeatable or comma-separated; default all):
  placement   submit → all shares running for 1, 8, 64, 1000-card jobs
  throughput  jobs placed per second with many concurrent submitters
  scaleup     a running elastic job from 1 to 1000 cards
  failover    reroute latency after a crash and after a silent loss
  gossip      ad propagation, idle bytes/s and memory per node, 1000 nodes
  quality     cost and throughput against an ideal central matcher
  processes   real gpumesh node processes on loopback under many submitters
              (runs alone; not part of the default)
  burst       real node processes hit by a burst of large jobs and their
              cancels: does the mesh return to idle? (runs alone; not part
              of the default)

Real-time figures come from an in-process mesh of --nodes full nodes
(default 100, each about 10 MiB); a mesh that would not fit in the memory
available is refused with the estimate. The 1000-node and 1000-card
figures in protocol time come from the virtual mesh whatever --nodes is.
The default run takes a few minutes on 2 cores.

It prints a markdown table on stdout (--json: results.json instead) and,
with --out DIR, writes results.json, results.csv and the plots
placement.svg and failover.svg there. Ctrl-C stops it within a couple of
seconds; what was measured so far is still printed and written.

The processes scenario starts --nodes (default 5) real ` + "`gpumesh node`" + ` processes
of this binary on loopback, each with --cards (default 64) simulated cards,
waits until they form a mesh and coordinate (about 30 s), watches the idle
mesh for 10 s, then has --submitters (default 32) clients submit --jobs
(default 300) 1-card ` + "`true`" + ` jobs through the nodes' HTTP APIs at once, with an
owner token. It reports jobs accepted and placed per second, submit →
acknowledged and submit → running (p50, p99), refusals by status after the
client's retries, the CPU of all node processes per placed job (Linux
/proc), and idle CPU and memory per node. Then it submits 20 more jobs one
at a time, each once the one before ended, and reports their submit →
running with nothing else queued. With --baseline FILE, another
gpumesh binary (a build of the code before a change), it runs the scenario
--runs times (default 3) with each binary, interleaved, and prints each
figure's median for this binary, for the baseline, and their ratio; the
JSON and CSV give every run's figure in the row's note.

The burst scenario starts --nodes (default 40) node processes with --cards
(default 8) simulated cards each, watches them idle for 10 s, submits ten
64-card and two 256-card jobs at once, cancels them after --hold (20 s),
and watches the mesh for --settle (60 s): the bytes each node receives,
the cards any book still shows reserved, the members seen suspect or dead.
Then it submits a 64-card job and reports how long it took to run. A mesh
that returns to idle within the watch meets the targets it prints.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch procs, err := f.processes(); {
			case err != nil:
				return err
			case procs == procbench.Scenario:
				return f.runProcesses(cmd.Context(), e)
			case procs == procbench.BurstScenario:
				return f.runBurst(cmd.Context(), e)
			}
			cfg, closeLog, err := f.config(e)
			if err != nil {
				return err
			}
			defer closeLog()
			res, runErr := bench.Run(cmd.Context(), cfg)
			if res == nil {
				if errors.Is(runErr, bench.ErrTooBig) {
					return usagef("--nodes %d: %v", cfg.Nodes, runErr)
				}
				return runErr
			}
			err = f.report(e, res, runErr)
			// After Ctrl-C the nodes halt in the background; the process
			// ends with them stopped or a second later.
			select {
			case <-res.Stopped():
			case <-time.After(time.Second):
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.scenarios, "scenario", nil, "scenario to run (repeatable, or comma-separated); default all")
	fl.IntVar(&f.nodes, "nodes", bench.DefaultNodes, "full nodes of the in-process mesh for the real-time figures")
	fl.StringVar(&f.out, "out", "", "write results.json, results.csv and SVG plots into this directory")
	fl.BoolVar(&f.json, "json", false, "print results.json on stdout instead of the table")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the suppliers, prices and workloads")
	fl.StringVar(&f.logFile, "log-file", "", "write the nodes' logs to this file")
	fl.DurationVar(&f.maxStart, "max-start", 3*time.Minute, "refuse an in-process mesh estimated to take longer to start and form (0: no limit)")
	fl.IntVar(&f.cards, "cards", procbench.DefaultCards, "processes: simulated cards per node")
	fl.IntVar(&f.submitters, "submitters", procbench.DefaultSubmitters, "processes: clients submitting at once")
	fl.IntVar(&f.jobs, "jobs", procbench.DefaultJobs, "processes: 1-card jobs submitted")
	fl.StringVar(&f.profile, "profile", "", "processes: write each node's CPU profile and execution trace of the load's first 10 s to `DIR`")
	fl.StringVar(&f.keep, "keep", "", "processes, burst: keep the nodes' data and logs in `DIR` (made if missing; otherwise they go unless the run fails)")
	fl.StringVar(&f.baseline, "baseline", "", "processes: compare with this other gpumesh binary, `FILE`, in interleaved runs")
	fl.IntVar(&f.runs, "runs", procbench.DefaultRuns, "processes, with --baseline: runs of each binary")
	fl.DurationVar(&f.hold, "hold", procbench.DefaultHold, "burst: how long the burst's jobs run before they are cancelled")
	fl.DurationVar(&f.settle, "settle", procbench.DefaultSettle, "burst: how long the mesh is watched after the last cancel")
	f.flags = fl
	return cmd
}

// config checks the flags; every bad value is a usage error naming its
// flag, and nothing runs.
func (f benchFlags) config(e env) (bench.Config, func(), error) {
	noop := func() {}
	scenarios, err := bench.ParseScenarios(f.scenarios)
	if err != nil {
		if errors.Is(err, bench.ErrUnknownScenario) {
			err = fmt.Errorf("%v; and %s and %s, which run alone", err, procbench.Scenario, procbench.BurstScenario)
		}
		return bench.Config{}, noop, usagef("--scenario: %v", err)
	}
	for _, name := range []string{"cards", "submitters", "jobs", "profile", "keep", "hold", "settle", "baseline", "runs"} {
		if f.flags != nil && f.flags.Changed(name) {
			return bench.Config{}, noop, usagef("--%s applies to --scenario %s only", name, procOnly[name])
		}
	}
	if f.nodes < 4 || f.nodes > bench.MaxNodes {
		return bench.Config{}, noop, usagef("--nodes %d: want at least 4 (3 coordinators and a supplier) and at most %d", f.nodes, bench.MaxNodes)
	}
	cfg := bench.Config{Scenarios: scenarios, Nodes: f.nodes, Seed: f.seed}
	if err := cfg.Validate(); err != nil {
		return cfg, noop, usagef("%v", err)
	}
	if err := bench.CheckMemory(cfg); err != nil {
		return cfg, noop, usagef("--nodes %d: %v", f.nodes, err)
	}
	if f.maxStart < 0 {
		return cfg, noop, usagef("--max-start %v: want 0 (no limit) or more", f.maxStart)
	}
	if est := sim.EstimateStart(f.nodes); f.maxStart > 0 && est > f.maxStart && usesFullMesh(scenarios) {
		return cfg, noop, usagef("--nodes %d: %d full nodes in one process take about %v to start and form on %d CPUs (measured on 2 CPUs: 50 in 5 s, 100 in 14 s, growing as nodes^1.5); at most about %d start within --max-start %v: ask for fewer, or raise --max-start",
			f.nodes, f.nodes, est.Round(10*time.Second), runtime.NumCPU(), sim.MaxNodesWithin(f.maxStart), f.maxStart)
	}
	if f.out != "" {
		if st, err := os.Stat(f.out); err == nil && !st.IsDir() {
			return cfg, noop, usagef("--out %s: not a directory", f.out)
		}
	}
	start := time.Now()
	cfg.Progress = func(line string) {
		fmt.Fprintf(e.stderr, "[%5.1fs] %s\n", time.Since(start).Seconds(), line)
	}
	logger, closeLog, err := openLogFile(f.logFile)
	if err != nil {
		return cfg, noop, err
	}
	cfg.Logger = logger
	return cfg, closeLog, nil
}

// report prints the results and writes --out; it returns runErr (or
// "interrupted") so the exit status says whether every scenario ran.
func (f benchFlags) report(e env, res *bench.Results, runErr error) error {
	var err error
	if f.json {
		err = res.WriteJSON(e.stdout)
	} else {
		if res.Interrupted {
			fmt.Fprintln(e.stdout, "interrupted: the results so far")
			fmt.Fprintln(e.stdout)
		}
		err = writeBenchHeader(e.stdout, res)
		if err == nil {
			err = res.WriteMarkdown(e.stdout)
		}
	}
	if err != nil {
		return err
	}
	if f.out != "" {
		paths, err := res.WriteDir(f.out)
		for _, p := range paths {
			fmt.Fprintf(e.stderr, "wrote %s\n", p)
		}
		if err != nil {
			return err
		}
	}
	if errors.Is(runErr, context.Canceled) {
		return errors.New("bench: interrupted")
	}
	return runErr
}

// writeBenchHeader says where and how the figures were measured.
func writeBenchHeader(w io.Writer, res *bench.Results) error {
	m := res.Machine
	mem := ""
	if m.MemoryMiB > 0 {
		mem = fmt.Sprintf(", %.1f GiB memory (%.1f GiB available)", float64(m.MemoryMiB)/1024, float64(m.AvailMiB)/1024)
	}
	load := ""
	if m.LoadAvg != "" {
		load = ", load average " + m.LoadAvg
	}
	setup := fmt.Sprintf("%d full nodes, seed %d", res.Config.Nodes, res.Config.Seed)
	if res.Setup != "" {
		setup = res.Setup
	}
	_, err := fmt.Fprintf(w, "gpumesh bench, %s: %d CPUs (GOMAXPROCS %d)%s%s, %s/%s, %s; %s; took %.0f s\n\n",
		res.Started.Format(time.RFC3339), m.CPUs, m.GOMAXPROCS, mem, load, m.OS, m.Arch, m.Go, setup, res.Took)
	return err
}

// procOnly says which scenarios of node processes each of their own
// flags applies to.
var procOnly = map[string]string{
	"cards": procbench.Scenario + " or " + procbench.BurstScenario, "submitters": procbench.Scenario, "jobs": procbench.Scenario,
	"profile": procbench.Scenario, "keep": procbench.Scenario + " or " + procbench.BurstScenario, "hold": procbench.BurstScenario, "settle": procbench.BurstScenario,
	"baseline": procbench.Scenario, "runs": procbench.Scenario,
}

// processes returns the scenario of node processes that --scenario names
// (processes or burst), or "" when it names none. Each runs alone: with
// another scenario it is a usage error.
func (f benchFlags) processes() (string, error) {
	found, others := "", 0
	for _, arg := range f.scenarios {
		for _, n := range strings.Split(arg, ",") {
			switch n = strings.TrimSpace(strings.ToLower(n)); n {
			case "":
			case procbench.Scenario, procbench.BurstScenario:
				if found != "" && found != n {
					others++
				}
				found = n
			default:
				others++
			}
		}
	}
	if found != "" && others > 0 {
		return "", usagef("--scenario %s runs alone: its --nodes are processes, not in-process nodes", found)
	}
	if found != procbench.BurstScenario {
		for _, name := range []string{"hold", "settle"} {
			if found != "" && f.flags != nil && f.flags.Changed(name) {
				return "", usagef("--%s applies to --scenario %s only", name, procbench.BurstScenario)
			}
		}
	} else {
		for _, name := range []string{"submitters", "jobs", "profile", "baseline", "runs"} {
			if f.flags != nil && f.flags.Changed(name) {
				return "", usagef("--%s applies to --scenario %s only", name, procbench.Scenario)
			}
		}
	}
	return found, nil
}

// count is a count flag of a scenario of node processes.
type count struct {
	name string
	n    int
}

// procSetup checks what the scenarios of node processes share (counts of
// at least 1, --out a directory, no --log-file) and returns this binary,
// which the nodes run, and a printer of progress lines on stderr.
func (f benchFlags) procSetup(e env, scenario string, counts ...count) (string, func(string), error) {
	for _, v := range counts {
		if v.n <= 0 {
			return "", nil, usagef("--%s %d: want at least 1", v.name, v.n)
		}
	}
	if f.out != "" {
		if st, err := os.Stat(f.out); err == nil && !st.IsDir() {
			return "", nil, usagef("--out %s: not a directory", f.out)
		}
	}
	if f.logFile != "" {
		return "", nil, usagef("--log-file: the %s scenario keeps each node's log in its data dir (kept when the run fails; --keep DIR keeps it always)", scenario)
	}
	if f.keep != "" {
		// A node started on another run's data would resume its jobs.
		if entries, err := os.ReadDir(f.keep); err == nil && len(entries) > 0 {
			return "", nil, usagef("--keep %s: not empty; name a new or empty directory", f.keep)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", nil, usagef("--keep %s: %v", f.keep, err)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("bench: finding this binary to run the nodes: %w", err)
	}
	start := time.Now()
	return bin, func(line string) { fmt.Fprintf(e.stderr, "[%5.1fs] %s\n", time.Since(start).Seconds(), line) }, nil
}

// procRun validates a configuration (its faults are usage errors), runs
// the scenario and reports what it measured.
func (f benchFlags) procRun(e env, validate func() error, run func() (*bench.Results, error)) error {
	badConfig := func(err error) error {
		return usagef("%s", strings.TrimPrefix(err.Error(), procbench.ErrBadConfig.Error()+": "))
	}
	if err := validate(); err != nil {
		if errors.Is(err, procbench.ErrBadConfig) || errors.Is(err, bench.ErrTooBig) {
			return badConfig(err)
		}
		return err
	}
	res, runErr := run()
	if res == nil {
		if errors.Is(runErr, procbench.ErrBadConfig) {
			return badConfig(runErr)
		}
		return runErr
	}
	return f.report(e, res, runErr)
}

// runProcesses runs the processes scenario with this binary as the nodes.
func (f benchFlags) runProcesses(ctx context.Context, e env) error {
	nodes := f.nodes
	if f.flags == nil || !f.flags.Changed("nodes") {
		nodes = procbench.DefaultNodes
	}
	bin, progress, err := f.procSetup(e, procbench.Scenario, count{"nodes", nodes}, count{"cards", f.cards}, count{"submitters", f.submitters}, count{"jobs", f.jobs})
	if err != nil {
		return err
	}
	cfg := procbench.Config{Binary: bin, Nodes: nodes, Cards: f.cards, Submitters: f.submitters, Jobs: f.jobs, ProfileDir: f.profile, Progress: progress,
		Dir: f.keep, KeepDir: f.keep != ""}
	if f.baseline == "" {
		if f.flags != nil && f.flags.Changed("runs") {
			return usagef("--runs applies with --baseline only: one run is one run")
		}
		return f.procRun(e, cfg.Validate, func() (*bench.Results, error) { return procbench.Run(ctx, cfg) })
	}
	if f.runs < 1 {
		return usagef("--runs %d: want at least 1 run of each binary", f.runs)
	}
	cmp := procbench.CompareConfig{Config: cfg, Baseline: f.baseline, Runs: f.runs}
	return f.procRun(e, cmp.Validate, func() (*bench.Results, error) { return procbench.Compare(ctx, cmp) })
}

// runBurst runs the burst scenario with this binary as the nodes.
func (f benchFlags) runBurst(ctx context.Context, e env) error {
	nodes, cards := procbench.DefaultBurstNodes, procbench.DefaultBurstCards
	if f.flags != nil && f.flags.Changed("nodes") {
		nodes = f.nodes
	}
	if f.flags != nil && f.flags.Changed("cards") {
		cards = f.cards
	}
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"hold", f.hold}, {"settle", f.settle}} {
		if v.d <= 0 {
			return usagef("--%s %v: want more than 0", v.name, v.d)
		}
	}
	bin, progress, err := f.procSetup(e, procbench.BurstScenario, count{"nodes", nodes}, count{"cards", cards})
	if err != nil {
		return err
	}
	cfg := procbench.BurstConfig{Config: procbench.Config{Binary: bin, Nodes: nodes, Cards: cards, Progress: progress, Dir: f.keep, KeepDir: f.keep != ""},
		Hold: f.hold, Settle: f.settle}
	return f.procRun(e, cfg.Validate, func() (*bench.Results, error) { return procbench.RunBurst(ctx, cfg) })
}

// usesFullMesh reports whether a scenario of the run starts the in-process
// mesh of full nodes (gossip and quality do not).
func usesFullMesh(scenarios []string) bool {
	for _, s := range scenarios {
		switch s {
		case bench.ScenarioPlacement, bench.ScenarioThroughput, bench.ScenarioScaleup, bench.ScenarioFailover:
			return true
		}
	}
	return false
}
