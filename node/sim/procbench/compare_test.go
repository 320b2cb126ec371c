package procbench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/sim/bench"
)

func TestCompareValidateRefusesBadInput(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	small := Config{Binary: binary, Nodes: 2, Cards: 2}
	for _, tc := range []struct {
		cfg  CompareConfig
		want string
	}{
		{CompareConfig{Config: small, Baseline: binary, Runs: -1}, "--runs -1: want at least 1"},
		{CompareConfig{Config: small}, "--baseline: name the gpumesh binary"},
		{CompareConfig{Config: small, Baseline: missing}, "--baseline " + missing},
		{CompareConfig{Config: small, Baseline: os.TempDir()}, "not an executable file"},
		{CompareConfig{Config: small, Baseline: plain}, "not an executable file"},
		{CompareConfig{Config: Config{Binary: binary, Nodes: 2, Cards: 2, ProfileDir: t.TempDir()}, Baseline: binary}, "--keep and --profile"},
		{CompareConfig{Config: Config{Binary: binary, Nodes: -1}, Baseline: binary}, "--nodes -1"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a bad configuration saying %q", tc.cfg, err, tc.want)
		}
	}
	if err := (CompareConfig{Config: small, Baseline: binary}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// The runs of each binary fold into medians and the ratio of the medians,
// each row listing every run's figure.
func TestComparedFoldsRunsIntoMediansAndRatios(t *testing.T) {
	results := func(stage bool, placed ...float64) []*bench.Results {
		var out []*bench.Results
		for i, v := range placed {
			res := &bench.Results{Setup: "5 node processes", Took: 10, Notes: []string{"load average at the end: 1"},
				Rows: []bench.Row{{Scenario: Scenario, Case: "load", Clock: bench.ClockReal, Metric: "placed", Unit: "jobs/s", Value: v, N: 300}}}
			if stage && i == 0 {
				res.Rows = append(res.Rows, bench.Row{Scenario: Scenario, Case: "stage x", Metric: "p50", Unit: "ms", Value: 7})
			}
			out = append(out, res)
		}
		return out
	}
	got := rows(compared(results(true, 110, 90, 100), results(false, 50, 45, 60), "/old/gpumesh"))
	for key, want := range map[string]struct {
		value float64
		note  string
	}{
		"load/placed":                  {100, "this binary, median of 3 runs: 110 jobs/s, 90 jobs/s, 100 jobs/s"},
		"load/placed, baseline":        {50, "the baseline, median of 3 runs: 50 jobs/s, 45 jobs/s, 60 jobs/s"},
		"load/placed, this ÷ baseline": {2, "the ratio of the medians"},
		"stage x/p50":                  {7, "this binary, median of 1 run: 7 ms"},
	} {
		r, ok := got[key]
		if !ok || r.Value != want.value || r.Note != want.note {
			t.Errorf("row %s = %+v (present %v), want value %v, note %q", key, r, ok, want.value, want.note)
		}
	}
	if _, ok := got["stage x/p50, baseline"]; ok {
		t.Error("a figure the baseline did not measure has a baseline row")
	}
	res := compared(results(false, 1, 2), results(false, 3, 4), "/old/gpumesh")
	if res.Took != 40 || len(res.Notes) != 4 || !strings.HasPrefix(res.Notes[3], "baseline, run 2: ") ||
		!strings.Contains(res.Setup, "against /old/gpumesh, runs interleaved: 2 of this binary, 2 of the baseline") {
		t.Errorf("took %v, notes %q, setup %q", res.Took, res.Notes, res.Setup)
	}
}

// A comparison of real processes: one run of each binary (here the same
// build twice), each measured whole, folded into medians and ratios.
func TestCompareRunsEachBinary(t *testing.T) {
	needProc(t)
	var lines []string
	res, err := Compare(context.Background(), CompareConfig{Baseline: binary, Runs: 1,
		Config: Config{Binary: binary, Nodes: 2, Cards: 2, Submitters: 3, Jobs: 6, Idle: 500 * time.Millisecond, SkipCoordinatorWait: true,
			Progress: func(s string) { lines = append(lines, s) }}})
	if err != nil {
		t.Fatalf("%v\nprogress: %q", err, lines)
	}
	got := rows(res)
	for _, key := range []string{"load/placed", "load/placed, baseline", "load/placed, this ÷ baseline", "load/refused", "load/refused, baseline"} {
		if _, ok := got[key]; !ok {
			t.Errorf("no row %s", key)
		}
	}
	if r := got["load/placed"]; r.N != 1 || r.Value <= 0 || got["load/refused"].Value != 0 || got["load/refused, baseline"].Value != 0 {
		t.Errorf("placed %+v, refused %v and %v", r, got["load/refused"].Value, got["load/refused, baseline"].Value)
	}
	if !slicesHasPrefix(lines, "this binary, run 1 of 1") || !slicesHasPrefix(lines, "baseline, run 1 of 1") {
		t.Errorf("progress does not say which binary runs: %q", lines)
	}
}

func slicesHasPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// Ctrl-C during the first run: Compare is back within 2 s with what that
// run measured, and runs no more.
func TestCompareStopsWithinTwoSecondsWhenInterrupted(t *testing.T) {
	needProc(t)
	ctx, progress, interrupted := interruptOnceJobsGoIn(t)
	var starts []string
	var mu sync.Mutex
	cfg := CompareConfig{Baseline: binary, Runs: 2, Config: Config{Binary: binary, Nodes: 2, Cards: 1, Submitters: 2, Jobs: 100000,
		Idle: time.Millisecond, SkipCoordinatorWait: true,
		Progress: func(s string) {
			mu.Lock()
			if strings.HasSuffix(s, ")") && strings.Contains(s, " of 2 (") {
				starts = append(starts, s)
			}
			mu.Unlock()
			progress(s)
		}}}
	res, err := Compare(ctx, cfg)
	interrupted(res, err)
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1 {
		t.Errorf("runs started: %q, want the first alone", starts)
	}
	if r, ok := rows(res)["load/accepted"]; !ok || r.N != 1 || r.Value <= 0 {
		t.Errorf("what the first run accepted is not reported: %+v", res.Rows)
	}
}
