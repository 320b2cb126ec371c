package procbench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/sim/bench"
)

func TestValidateRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Binary: binary, Nodes: -1}, "--nodes -1: want 1 to 500"},
		{Config{Binary: binary, Nodes: MaxNodes + 1}, "--nodes 501"},
		{Config{Binary: binary, Cards: -3}, "--cards -3"},
		{Config{Binary: binary, Cards: 5000}, "--cards 5000: want 1 to 1024"},
		{Config{Binary: binary, Submitters: -1}, "--submitters -1"},
		{Config{Binary: binary, Jobs: -1}, "--jobs -1: want at least 1"},
		{Config{Binary: binary, Model: "no-such-card"}, "no-such-card"},
		{Config{}, "no gpumesh binary"},
		{Config{Binary: os.TempDir()}, "not a file"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a bad configuration saying %q", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{Binary: binary, Nodes: MaxNodes}).Validate(); err != nil && !errors.Is(err, bench.ErrTooBig) {
		t.Errorf("%d nodes: %v", MaxNodes, err)
	} else if err != nil && !strings.Contains(err.Error(), "nodes fit here") {
		t.Errorf("the memory refusal gives no estimate: %v", err)
	}
	if err := (Config{Binary: binary}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// rows indexes results by case and metric.
func rows(res *bench.Results) map[string]bench.Row {
	out := map[string]bench.Row{}
	for _, r := range res.Rows {
		out[r.Case+"/"+r.Metric] = r
	}
	return out
}

// A small mesh of real processes: every job is accepted, placed and
// reported, with the CPU it cost, and the processes are gone after.
func TestRunMeasuresASmallMesh(t *testing.T) {
	needProc(t)
	var lines []string
	res, err := Run(context.Background(), Config{Binary: binary, Nodes: 2, Cards: 2, Submitters: 3, Jobs: 8, Idle: 500 * time.Millisecond,
		Singles: 4, SkipCoordinatorWait: true, Progress: func(s string) { lines = append(lines, s) }})
	if err != nil {
		t.Fatalf("%v\nprogress: %q\nnotes: %q", err, lines, res.Notes)
	}
	got := rows(res)
	for key, check := range map[string]func(bench.Row) bool{
		"load/accepted":                     func(r bench.Row) bool { return r.N == 8 && r.Value > 0 },
		"load/placed":                       func(r bench.Row) bool { return r.N == 8 && r.Value > 0 && r.Unit == "jobs/s" },
		"load/refused":                      func(r bench.Row) bool { return r.Value == 0 && r.N == 8 },
		"submit → acknowledged/p99":         func(r bench.Row) bool { return r.Value > 0 },
		"submit → running/p50":              func(r bench.Row) bool { return r.Value > 0 && r.N == 8 },
		"CPU per placed job/node processes": func(r bench.Row) bool { return r.Value > 0 },
		"awards/per placed job":             func(r bench.Row) bool { return r.Value >= 1 && r.N == 8 },
		"awards/rejected or not answered in time": func(r bench.Row) bool {
			return r.Value >= 0 && r.Value <= float64(r.N)-8 && r.N == int(got["awards/per placed job"].Value*8+0.5)
		},
		// Timed at the coordinator, a job alone runs no later than the
		// submitter saw it run; 0 when the coordinator's own card took it
		// in the turn that took the submission (its bid, award and accept
		// are messages to itself, handled in one step).
		"one job at a time/submit → running at the coordinator p50": func(r bench.Row) bool {
			return r.N == 4 && r.Value >= 0 && r.Value <= got["one job at a time/submit → running p50"].Value && r.Target == "< 50 ms"
		},
		"one job at a time/submit → running p50": func(r bench.Row) bool { return r.N == 4 && r.Value > 0 },
		"idle, per node/RSS mean":                func(r bench.Row) bool { return r.Value > 5 && r.N == 2 },
		"idle, per node/CPU mean":                func(r bench.Row) bool { return r.Value >= 0 && r.N == 2 },
		"idle after the load, per node/RSS mean": func(r bench.Row) bool { return r.Value > 5 && r.N == 2 },
		"idle after the load, per node/CPU mean": func(r bench.Row) bool { return r.Value >= 0 && r.N == 2 },
	} {
		r, ok := got[key]
		if !ok || !check(r) {
			t.Errorf("row %s: %+v (present %v)", key, r, ok)
		}
	}
	// Less what the idle mesh spends; absent only when the idle watch saw
	// no CPU at all (the kernel counts it in ticks).
	if r, ok := got["CPU per placed job/node processes, beyond idle"]; ok && (r.Value < 0 || r.Value > got["CPU per placed job/node processes"].Value) {
		t.Errorf("CPU beyond idle %v ms, gross %v ms", r.Value, got["CPU per placed job/node processes"].Value)
	}
	if res.Interrupted || len(res.Scenarios) != 1 || !strings.Contains(res.Setup, "2 node processes × 2 cards") {
		t.Errorf("results: interrupted %v, scenarios %v, setup %q", res.Interrupted, res.Scenarios, res.Setup)
	}
}

// Ctrl-C while the jobs go in: Run is back within 2 s with what it
// measured, and no node process is left.
func TestRunStopsWithinTwoSecondsWhenInterrupted(t *testing.T) {
	needProc(t)
	ctx, progress, interrupted := interruptOnceJobsGoIn(t)
	cfg := Config{Binary: binary, Nodes: 2, Cards: 1, Submitters: 2, Jobs: 100000, Idle: time.Millisecond, SkipCoordinatorWait: true,
		Progress: progress}
	dir := t.TempDir()
	cfg.Dir = dir
	res, err := Run(ctx, cfg)
	interrupted(res, err)
	if r, ok := rows(res)["load/accepted"]; !ok || r.N == 0 {
		t.Errorf("no jobs accepted before the interrupt reported: %+v", res.Rows)
	}
	if _, err := os.Stat(dir); err == nil {
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("the run's directory still holds %d entries", len(ents))
		}
	}
}

// interruptOnceJobsGoIn returns a context cancelled, as by Ctrl-C, once
// the progress hook it returns reports jobs accepted, and a check that
// the run was back within 2 s of that, interrupted, with results.
func interruptOnceJobsGoIn(t *testing.T) (context.Context, func(string), func(*bench.Results, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var once sync.Once
	submitting := make(chan struct{})
	progress := func(s string) {
		if strings.HasSuffix(s, "jobs accepted") && !strings.HasPrefix(s, "0 of") && !strings.Contains(s, ": 0 of") {
			once.Do(func() { close(submitting) })
		}
	}
	stoppedc := make(chan time.Time, 1)
	go func() {
		<-submitting // some jobs are in
		stoppedc <- time.Now()
		cancel()
	}()
	return ctx, progress, func(res *bench.Results, err error) {
		t.Helper()
		took := time.Since(<-stoppedc)
		if !errors.Is(err, context.Canceled) || res == nil || !res.Interrupted {
			t.Fatalf("err %v, results %+v", err, res)
		}
		if took > 2*time.Second {
			t.Errorf("back %v after the interrupt, want within 2 s", took)
		}
	}
}

// Ctrl-C while the node processes start (the mesh waits for its
// coordinators): Run is back within 2 s, and the processes it started are
// gone.
func TestRunInterruptedWhileStarting(t *testing.T) {
	needProc(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	stopped := make(chan time.Time, 1)
	dir := t.TempDir()
	res, err := Run(ctx, Config{Binary: binary, Nodes: 3, Cards: 1, Dir: dir, Progress: func(s string) {
		if strings.HasPrefix(s, "waiting until") { // every process answers; the mesh forms next
			once.Do(func() { stopped <- time.Now(); cancel() })
		}
	}})
	took := time.Since(<-stopped)
	if !errors.Is(err, context.Canceled) || res == nil || !res.Interrupted {
		t.Fatalf("err %v, results %+v", err, res)
	}
	if took > 2*time.Second {
		t.Errorf("back %v after the interrupt, want within 2 s", took)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "stopped while the node processes started") {
		t.Errorf("notes %q do not say the run stopped while starting", res.Notes)
	}
	out, _ := exec.Command("pgrep", "-f", dir).Output()
	if len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("node processes left running: %s", out)
	}
}
