package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/dashboard"
	"github.com/gpumesh/gpumesh/node/sim"
	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// demoFlags are the flags of `gpumesh demo`.
type demoFlags struct {
	nodes      int
	duration   time.Duration
	seed       uint64
	api        string
	noChaos    bool
	trace      string
	traceFrom  string
	traceSpeed float64
	avail      string
	logFile    string
}

func newDemoCommand(e env) *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a mesh of simulated suppliers with a workload and churn, in this process",
		Long: `Run an in-process mesh of simulated GPU suppliers for a minute and show what
gpumesh does: jobs of 1 to 64 cards placed in milliseconds, a training job
that grows to every free card of its class and back, preemptible batch work
filling idle cards, and suppliers leaving and coming back while their jobs
move elsewhere. No GPU is needed: the cards are simulated, the jobs are real
processes that sleep.

The supply: half the nodes are IDC servers of 8 cards (H100, H200, A100, A800,
H20, L40S, Moore Threads S4000, Hygon BW1000, Kunlunxin P800) at list price,
a quarter café PCs with one or two RTX 4090/5090 at 80% of it, a quarter home
PCs with one at 65%. Suppliers come and go 60 times faster than in life (a
home PC stays up for a minute on average, a café PC for four). Coordinators
(the IDC nodes) stay up.

While it runs it serves one node's API and dashboard on --api: open the link
it prints (it carries the token of the demo's job owner), or use the other
commands from another terminal with that token:
  GPUMESH_API_TOKEN=TOKEN gpumesh jobs --api 127.0.0.1:7070

At the end (or on Ctrl-C) it prints placement and reroute latency,
utilization by model, cost per normalized compute hour, and the invariant
checks; it exits 1 if an invariant broke. The same --seed makes the same
suppliers, workload and churn.

--trace replays a job trace instead of the synthetic workload: a CSV with
submit_s,gpus,duration_s (see the README), or philly-ee9e8c / philly-11cb48
for the embedded samples of Microsoft's Philly trace. It is replayed
--trace-speed times faster (60: an hour of the trace a minute), from
--trace-from: its busiest stretch by default (the window as long as the
replay covers that holds the most jobs), "start", or a time of the trace
such as 36h. The summary says which part of the trace was replayed.

--availability makes suppliers leave and come back as a node availability
trace says instead of at random: a CSV with node,up_s,down_s, one
up-session a line, 60 times faster. A trace node named like a supplier
(cafe-3, home-12) drives it; the others drive the remaining suppliers in
order; suppliers left over stay up.

A demo that would not fit in the memory available (about 10 MiB per node)
is refused with the estimate.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, closeLog, err := f.config(e)
			if err != nil {
				return err
			}
			defer closeLog()
			if e.getenv("GOGC") == "" {
				// Dozens of nodes in one process keep a few hundred MB
				// live; collecting less often halves the CPU the demo
				// spends on garbage. The process then peaks at about
				// 15 MiB per node instead of 7 (the estimate counts
				// 10), so a soft limit at the share of memory the
				// estimate is held to makes the collector work harder
				// rather than the machine swap.
				debug.SetGCPercent(400)
				if _, avail := sim.MemInfo(); avail > 0 && e.getenv("GOMEMLIMIT") == "" {
					debug.SetMemoryLimit(int64(sim.MemoryShare*float64(avail)) << 20)
				}
			}
			out := newProgressWriter(e.stdout, isTerminal(e.stdout))
			cfg.Progress = out.show
			sum, err := sim.RunDemo(cmd.Context(), cfg)
			out.done()
			if sum == nil {
				switch {
				case errors.Is(err, api.ErrTokenRequired):
					return usagef("--api: %v", err)
				case errors.Is(err, sim.ErrTooBig):
					return usagef("--nodes %d: %v", f.nodes, err)
				}
				return err
			}
			if errors.Is(err, context.Canceled) {
				fmt.Fprintln(e.stdout, "interrupted: the summary so far")
			}
			fmt.Fprintln(e.stdout)
			if err := sum.WriteText(e.stdout); err != nil {
				return err
			}
			if !sum.OK() {
				return errors.New("demo: an invariant broke (see above)")
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.nodes, "nodes", sim.DefaultDemoNodes, "number of simulated suppliers")
	fl.DurationVar(&f.duration, "duration", sim.DefaultDemoDuration, "how long the workload runs")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the suppliers, the workload and the churn")
	fl.StringVar(&f.api, "api", api.DefaultAddr, "serve one node's API on this address (\"\" for none)")
	fl.BoolVar(&f.noChaos, "no-chaos", false, "keep every supplier up")
	fl.StringVar(&f.trace, "trace", "", "job trace to replay: a CSV file, philly-ee9e8c or philly-11cb48")
	fl.StringVar(&f.traceFrom, "trace-from", "busiest", "where in the trace the replay starts: busiest (its busiest stretch), start, or a time of the trace such as 36h")
	fl.Float64Var(&f.traceSpeed, "trace-speed", sim.DefaultTimeScale, "how many times faster than life the trace is replayed")
	fl.StringVar(&f.avail, "availability", "", "node availability trace (CSV node,up_s,down_s) the churn follows")
	fl.StringVar(&f.logFile, "log-file", "", "write the nodes' logs to this file")
	return cmd
}

// config checks the flags; every bad value is a usage error naming its flag.
func (f demoFlags) config(e env) (sim.DemoConfig, func(), error) {
	noop := func() {}
	cfg := sim.DemoConfig{Nodes: f.nodes, Duration: f.duration, Seed: f.seed, API: f.api, Chaos: !f.noChaos, Dashboard: dashboard.Handler()}
	switch {
	case f.nodes < 1 || f.nodes > sim.MaxDemoNodes:
		return cfg, noop, usagef("--nodes %d: want 1 to %d", f.nodes, sim.MaxDemoNodes)
	case f.duration < time.Second:
		return cfg, noop, usagef("--duration %v: want at least 1s", f.duration)
	case f.avail != "" && f.noChaos:
		return cfg, noop, usagef("--availability with --no-chaos: the trace makes suppliers leave; keep one of the two")
	}
	if err := sim.CheckDemoMemory(f.nodes); err != nil {
		return cfg, noop, usagef("--nodes %d: %v", f.nodes, err)
	}
	if !(f.traceSpeed > 0) || math.IsInf(f.traceSpeed, 0) {
		return cfg, noop, usagef("--trace-speed %v: want more than 0 (60: an hour of the trace a minute)", f.traceSpeed)
	}
	cfg.TraceSpeed = f.traceSpeed
	switch f.traceFrom {
	case "busiest", "":
		cfg.TraceFrom = sim.TraceFromBusiest
	case "start":
		cfg.TraceFrom = sim.TraceFromStart
	default:
		d, err := time.ParseDuration(f.traceFrom)
		if err != nil || d < 0 {
			return cfg, noop, usagef("--trace-from %q: want busiest, start or a time of the trace such as 36h", f.traceFrom)
		}
		cfg.TraceFrom = d
		if d == 0 {
			cfg.TraceFrom = sim.TraceFromStart
		}
	}
	if f.trace != "" {
		tr, err := loadTrace(f.trace)
		if err != nil {
			return cfg, noop, usagef("--trace: %v", err)
		}
		if cfg.TraceFrom > tr.Span() {
			return cfg, noop, usagef("--trace-from %v: the trace's last job arrives at %v", cfg.TraceFrom, tr.Span())
		}
		cfg.Trace = &tr
	}
	if f.avail != "" {
		av, err := workload.LoadAvailability(f.avail)
		if err != nil {
			return cfg, noop, usagef("--availability: %v", err)
		}
		cfg.Availability = &av
	}
	logger, closeLog, err := openLogFile(f.logFile)
	if err != nil {
		return cfg, noop, err
	}
	cfg.Logger = logger
	return cfg, closeLog, nil
}

// loadTrace reads a job trace file, or names an embedded Philly sample.
func loadTrace(arg string) (workload.Trace, error) {
	if c, ok := strings.CutPrefix(arg, "philly-"); ok {
		if _, err := os.Stat(arg); err != nil {
			return workload.Philly(c)
		}
	}
	return workload.LoadJobs(arg)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressWriter shows a demo's progress: on a terminal a block redrawn in
// place every second, elsewhere the block every 10 seconds and at each
// change of phase.
type progressWriter struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	lines int // lines drawn last time (tty)
	last  time.Time
	phase sim.Phase
}

func newProgressWriter(w io.Writer, tty bool) *progressWriter { return &progressWriter{w: w, tty: tty} }

func (p *progressWriter) show(pr sim.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := pr.Lines()
	if p.tty {
		var b strings.Builder
		if p.lines > 0 {
			fmt.Fprintf(&b, "\x1b[%dA", p.lines) // up to the block's first line
		}
		for _, l := range lines {
			b.WriteString("\x1b[2K") // clear the line
			b.WriteString(l)
			b.WriteString("\n")
		}
		for i := len(lines); i < p.lines; i++ {
			b.WriteString("\x1b[2K\n")
		}
		if p.lines > len(lines) {
			fmt.Fprintf(&b, "\x1b[%dA", p.lines-len(lines))
		}
		io.WriteString(p.w, b.String())
		p.lines = len(lines)
		return
	}
	if pr.Phase == p.phase && time.Since(p.last) < 10*time.Second {
		return
	}
	p.phase, p.last = pr.Phase, time.Now()
	io.WriteString(p.w, strings.Join(lines, "\n")+"\n\n")
}

func (p *progressWriter) done() {}

// openLogFile opens the --log-file of a simulation (appending, 0600) and
// returns a logger writing to it and the function that closes it; with no
// file, a nil logger (the simulation discards its nodes' logs).
func openLogFile(path string) (*slog.Logger, func(), error) {
	if path == "" {
		return nil, func() {}, nil
	}
	lf, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, func() {}, usagef("--log-file: %v", err)
	}
	return slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo})), func() { lf.Close() }, nil
}
