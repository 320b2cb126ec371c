package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/sim/bench"
)

// runBench runs `gpumesh bench` with args and returns its exit status,
// stdout and stderr.
func runBench(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), append([]string{"bench"}, args...), env{
		stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" },
	})
	return code, stdout.String(), stderr.String()
}

// Bad input exits 2 with one line naming what was wrong, and runs nothing.
func TestBenchBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	used := t.TempDir() // another run's nodes
	if err := os.Mkdir(filepath.Join(used, "node-0"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "latency"}, `--scenario: unknown scenario "latency": known are placement, throughput, scaleup, failover, gossip, quality`},
		{[]string{"--scenario", "placement,nope"}, `unknown scenario "nope"`},
		{[]string{"--nodes", "0"}, "--nodes 0: want at least 4 (3 coordinators and a supplier) and at most 10000"},
		{[]string{"--nodes", "-5"}, "--nodes -5: want at least 4"},
		{[]string{"--nodes", "many"}, `invalid argument "many" for "--nodes"`},
		{[]string{"--nodes", "50000000"}, "--nodes 50000000: want at least 4 (3 coordinators and a supplier) and at most 10000"},
		{[]string{"--out", file}, "not a directory"},
		{[]string{"extra"}, "unknown command"},
		{[]string{"--scenario", "processes", "--nodes", "0"}, "--nodes 0: want at least 1"},
		{[]string{"--scenario", "processes", "--nodes", "-2"}, "--nodes -2: want at least 1"},
		{[]string{"--scenario", "processes", "--submitters", "0"}, "--submitters 0: want at least 1"},
		{[]string{"--scenario", "processes", "--jobs", "-1"}, "--jobs -1: want at least 1"},
		{[]string{"--scenario", "processes", "--runs", "3"}, "--runs applies with --baseline only"},
		{[]string{"--scenario", "processes", "--baseline", file, "--runs", "0"}, "--runs 0: want at least 1 run of each binary"},
		{[]string{"--scenario", "processes", "--baseline", file}, "--baseline " + file + ": not an executable file"},
		{[]string{"--scenario", "processes", "--baseline", filepath.Join(used, "nope")}, "--baseline " + filepath.Join(used, "nope")},
		{[]string{"--scenario", "burst", "--baseline", file}, "--baseline applies to --scenario processes only"},
		{[]string{"--scenario", "placement", "--runs", "2"}, "--runs applies to --scenario processes only"},
		{[]string{"--scenario", "processes", "--cards", "0"}, "--cards 0: want at least 1"},
		{[]string{"--scenario", "processes", "--nodes", "100000"}, "--nodes 100000: want 1 to 500 node processes"},
		{[]string{"--scenario", "processes", "--cards", "5000"}, "--cards 5000: want 1 to 1024"},
		{[]string{"--scenario", "processes,placement"}, "--scenario processes runs alone"},
		{[]string{"--scenario", "throughput", "--jobs", "10"}, "--jobs applies to --scenario processes only"},
		{[]string{"--scenario", "placement", "--keep", used}, "--keep applies to --scenario processes or burst only"},
		{[]string{"--scenario", "burst", "--keep", used}, "--keep " + used + ": not empty; name a new or empty directory"},
		{[]string{"--scenario", "processes", "--keep", file}, "--keep " + file + ": "},
		{[]string{"--scenario", "nope"}, "and processes and burst, which run alone"},
		{[]string{"--max-start", "-1s"}, "--max-start -1s: want 0 (no limit) or more"},
	} {
		start := time.Now()
		code, stdout, stderr := runBench(t, c.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%q took %v: it ran something", c.args, d)
		}
	}
	if m := bench.ThisMachine(); m.AvailMiB > 0 && m.AvailMiB < 30000 {
		_, _, stderr := runBench(t, "--scenario", "processes", "--nodes", "499")
		if !strings.Contains(stderr, "MiB is available") || !strings.Contains(stderr, "nodes fit here") {
			t.Errorf("the processes memory refusal gives no estimate: %q", stderr)
		}
	}
	if m := bench.ThisMachine(); m.AvailMiB > 1000*bench.FullNodeMiB*5/4+200 {
		code, _, stderr := runBench(t, "--scenario", "placement", "--nodes", "1000")
		if code != exitUsage || !strings.Contains(stderr, "to start and form on") || !strings.Contains(stderr, "raise --max-start") {
			t.Errorf("1000 in-process nodes: exit %d, %q; want 2 and the time it would take", code, stderr)
		}
	}
	if bench.ThisMachine().AvailMiB > 0 {
		_, _, stderr := runBench(t, "--nodes", "10000")
		if !strings.Contains(stderr, "MiB is available") || !strings.Contains(stderr, "full nodes here") {
			t.Errorf("the memory refusal gives no estimate: %q", stderr)
		}
	}
}

// The report prints the table (or the JSON), writes --out, and says when
// the run was interrupted (exit 1).
func TestBenchReport(t *testing.T) {
	yes := true
	res := &bench.Results{
		Started: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), Took: 3, Machine: bench.Machine{CPUs: 2, GOMAXPROCS: 2, OS: "linux", Arch: "amd64", Go: "go1.25"},
		Config:    bench.Config{Nodes: 100, Seed: 1},
		Scenarios: []string{"placement"},
		Rows:      []bench.Row{{Scenario: "placement", Case: "1 card", Clock: bench.ClockReal, Metric: "median", Value: 12.5, Unit: "ms", N: 20, Target: "< 1000 ms", Met: &yes}},
		Plots:     []bench.Plot{{File: "placement.svg", Title: "p", Lines: []bench.Line{{Name: "real", Points: []bench.Point{{X: 1, Y: 12.5}}}}}},
	}
	var stdout, stderr bytes.Buffer
	e := env{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	dir := filepath.Join(t.TempDir(), "out")
	if err := (benchFlags{out: dir}).report(e, res, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 CPUs (GOMAXPROCS 2)", "| placement | 1 card | real | median | 12.5 ms | 20 | < 1000 ms ✓ |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, f := range []string{"results.json", "results.csv", "placement.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}

	stdout.Reset()
	res.Interrupted = true
	err := (benchFlags{json: true}).report(e, res, context.Canceled)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("interrupted run: %v", err)
	}
	var back bench.Results
	if err := json.Unmarshal(stdout.Bytes(), &back); err != nil || !back.Interrupted || len(back.Rows) != 1 {
		t.Errorf("--json printed %q (%v)", stdout.String(), err)
	}
	failed := errors.New("failover: boom")
	if err := (benchFlags{}).report(e, res, failed); !errors.Is(err, failed) {
		t.Errorf("a failed scenario: %v", err)
	}
}
