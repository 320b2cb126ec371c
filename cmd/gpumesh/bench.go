package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node/sim/bench"
)

// benchFlags are the flags of `gpumesh bench`.
type benchFlags struct {
	scenarios []string
	nodes     int
	out       string
	json      bool
	seed      uint64
	logFile   string
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

Real-time figures come from an in-process mesh of --nodes full nodes
(default 100, each about 10 MiB); a mesh that would not fit in the memory
available is refused with the estimate. The 1000-node and 1000-card
figures in protocol time come from the virtual mesh whatever --nodes is.
The default run takes a few minutes on 2 cores.

It prints a markdown table on stdout (--json: results.json instead) and,
with --out DIR, writes results.json, results.csv and the plots
placement.svg and failover.svg there. Ctrl-C stops it; what was measured
so far is still printed and written.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			return f.report(e, res, runErr)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.scenarios, "scenario", nil, "scenario to run (repeatable, or comma-separated); default all")
	fl.IntVar(&f.nodes, "nodes", bench.DefaultNodes, "full nodes of the in-process mesh for the real-time figures")
	fl.StringVar(&f.out, "out", "", "write results.json, results.csv and SVG plots into this directory")
	fl.BoolVar(&f.json, "json", false, "print results.json on stdout instead of the table")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the suppliers, prices and workloads")
	fl.StringVar(&f.logFile, "log-file", "", "write the nodes' logs to this file")
	return cmd
}

// config checks the flags; every bad value is a usage error naming its
// flag, and nothing runs.
func (f benchFlags) config(e env) (bench.Config, func(), error) {
	noop := func() {}
	scenarios, err := bench.ParseScenarios(f.scenarios)
	if err != nil {
		return bench.Config{}, noop, usagef("--scenario: %v", err)
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
	_, err := fmt.Fprintf(w, "gpumesh bench, %s: %d CPUs (GOMAXPROCS %d)%s%s, %s/%s, %s; %d full nodes, seed %d; took %.0f s\n\n",
		res.Started.Format(time.RFC3339), m.CPUs, m.GOMAXPROCS, mem, load, m.OS, m.Arch, m.Go, res.Config.Nodes, res.Config.Seed, res.Took)
	return err
}
