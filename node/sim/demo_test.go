package sim

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// TestDemoRunsHeadless runs a small demo with churn for a few seconds and
// checks what a user sees: jobs placed and finished, the summary's tables,
// every invariant holding, and progress reported in every phase.
func TestDemoRunsHeadless(t *testing.T) {
	var mu sync.Mutex
	phases := map[Phase]int{}
	var last Progress
	// Six one-card jobs of 3 s in the first 3 s (at 900×, life seconds),
	// so that even a busy machine finishes some within the run.
	tr := workload.Trace{Name: "test"}
	for i := range 6 {
		tr.Jobs = append(tr.Jobs, workload.Job{Submit: time.Duration(i) * 450 * time.Second, GPUs: 1, Duration: 45 * time.Minute})
	}
	sum, err := RunDemo(context.Background(), DemoConfig{
		Nodes:     6,
		Duration:  10 * time.Second,
		Trace:     &tr,
		Seed:      2,
		API:       "127.0.0.1:0",
		Chaos:     true,
		TimeScale: 900, // a home PC's hour is 4 s: churn within the run
		Dir:       t.TempDir(),
		Progress: func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			phases[p.Phase]++
			last = p
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := sum.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{"placement latency", "utilization by model", "CNY per CU-hour", "invariants", "no card held by two jobs at once"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if !sum.OK() {
		t.Errorf("an invariant broke: %+v", sum.Invariants)
	}
	if sum.Jobs.Submitted != 7 || sum.Jobs.Placed < 3 || sum.Jobs.Succeeded == 0 {
		t.Errorf("jobs %+v: want the 6 jobs and the training job submitted, most placed, some finished", sum.Jobs)
	}
	if sum.Left == 0 {
		t.Errorf("no supplier left in 10 s of churn at 900× (%d came back)", sum.Joined)
	}
	mu.Lock()
	defer mu.Unlock()
	if phases[PhaseStarting] == 0 || phases[PhaseRunning] == 0 || phases[PhaseStopping] == 0 || last.Phase != PhaseStopping {
		t.Errorf("progress by phase %v, last %s", phases, last.Phase)
	}
	if last.API == "" || len(last.Lines()) < 4 {
		t.Errorf("last progress: API %q, lines %q", last.API, last.Lines())
	}
}

// TestDemoStoppedEarlyStillSummarizes cancels a demo while it runs: it
// returns the summary so far with the context's error.
func TestDemoStoppedEarlyStillSummarizes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	sum, err := RunDemo(ctx, DemoConfig{
		Nodes:    4,
		Duration: time.Minute,
		Seed:     1,
		Dir:      t.TempDir(),
		Progress: func(p Progress) {
			if p.Phase == PhaseRunning && p.Jobs.Submitted > 0 {
				once.Do(cancel)
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if sum == nil || sum.Elapsed >= time.Minute || sum.Jobs.Submitted == 0 || len(sum.Invariants) == 0 || !sum.OK() {
		t.Fatalf("summary so far: %+v", sum)
	}
}

func TestDemoRefusesBadConfig(t *testing.T) {
	for _, cfg := range []DemoConfig{
		{Nodes: -1},
		{Nodes: MaxDemoNodes + 1},
		{Duration: time.Millisecond},
		{TimeScale: -2},
	} {
		if _, err := RunDemo(context.Background(), cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestChaosScheduleSparesCoordinatorsAndAlternates(t *testing.T) {
	plan, _ := PlanSuppliers(40, DefaultMix(), 1)
	plan = WithControllers(plan, 4)
	evs := ChaosSchedule(plan, time.Minute, 60, 9)
	if len(evs) == 0 {
		t.Fatal("no churn in a minute at 60×")
	}
	up := map[string]bool{}
	tier := map[string]Tier{}
	for _, s := range plan {
		up[s.Name] = true
		tier[s.Name] = s.Tier
	}
	for i, ev := range evs {
		if i > 0 && ev.At < evs[i-1].At {
			t.Fatal("events out of order")
		}
		if tier[ev.Supplier] == TierControl {
			t.Fatalf("a coordinator churns: %+v", ev)
		}
		if ev.Up == up[ev.Supplier] {
			t.Fatalf("%+v: %s is already %v", ev, ev.Supplier, map[bool]string{true: "up", false: "down"}[ev.Up])
		}
		up[ev.Supplier] = ev.Up
		if !ev.Up && ev.Crash != (tier[ev.Supplier] == TierHome) {
			t.Errorf("%+v: home PCs crash, others leave", ev)
		}
	}
	again := ChaosSchedule(plan, time.Minute, 60, 9)
	if len(again) != len(evs) || again[0] != evs[0] {
		t.Error("the same seed drew another schedule")
	}
}
