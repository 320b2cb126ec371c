package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestDemoStoppedWhileStarting cancels a demo while its nodes start: it
// returns a summary that says how many were up and that nothing ran, with
// the context's error, and leaves no node behind (TestMain's leak check).
func TestDemoStoppedWhileStarting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu     sync.Mutex
		seen   []int // Started of each starting report
		starts int   // reports after the cancel
	)
	sum, err := RunDemo(ctx, DemoConfig{
		Nodes:    20,
		Duration: time.Minute,
		Seed:     1,
		Dir:      t.TempDir(),
		Progress: func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Phase != PhaseStarting {
				t.Errorf("a %s report: the demo went on past starting", p.Phase)
				return
			}
			seen = append(seen, p.Started)
			if ctx.Err() != nil {
				starts++
			}
			if p.Started >= 2 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	total := DemoNodes(20)
	// At most StartWorkers (4) starts were under way when it was cancelled.
	if sum == nil || sum.Stopped != PhaseStarting || sum.Started < 2 || sum.Started > 2+4 || sum.Nodes != total || sum.Jobs.Submitted != 0 {
		t.Fatalf("summary %+v; want stopped while starting with 2 to 6 of %d nodes up", sum, total)
	}
	var out bytes.Buffer
	if err := sum.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	want := fmt.Sprintf("stopped while starting: %d of %d nodes up\n", sum.Started, total)
	if !strings.Contains(text, want) || !strings.Contains(text, "nothing ran") || strings.Contains(text, "placement latency") {
		t.Errorf("summary text lacks %q or says more than it has:\n%s", want, text)
	}
	if !sum.OK() {
		t.Errorf("invariants %+v: none can have broken", sum.Invariants)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0] != 0 || starts > 4 {
		t.Errorf("starting reports %v, %d after the cancel", seen, starts)
	}
}

// TestDemoFollowsAvailabilityTrace runs a demo whose churn is an
// availability trace: home-1 is down from 60 s to 180 s of the trace (1 s
// to 3 s at 60×); it goes at its time, comes back at its time, and no
// other supplier moves.
func TestDemoFollowsAvailabilityTrace(t *testing.T) {
	av, err := workload.ParseAvailability(strings.NewReader("node,up_s,down_s\nhome-1,0,60\nhome-1,180,\n"), "av.csv")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := RunDemo(context.Background(), DemoConfig{
		Nodes:        6,
		Duration:     5 * time.Second,
		Seed:         2,
		Chaos:        true,
		Availability: &av,
		Dir:          t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Churned) != 2 || sum.Left != 1 || sum.Joined != 1 {
		t.Fatalf("churn %+v (%d left, %d back); want home-1 down and back", sum.Churned, sum.Left, sum.Joined)
	}
	down, back := sum.Churned[0], sum.Churned[1]
	if down.Supplier != "home-1" || down.Up || !down.Crash || down.At < time.Second {
		t.Errorf("departure %+v: want home-1 crashing at 1 s or later", down)
	}
	if back.Supplier != "home-1" || !back.Up || back.At < 3*time.Second {
		t.Errorf("return %+v: want home-1 back at 3 s or later", back)
	}
	if !strings.Contains(sum.ChurnFrom, "availability trace av.csv: 1 trace nodes drive suppliers") {
		t.Errorf("churn from %q", sum.ChurnFrom)
	}
	if !sum.OK() {
		t.Errorf("an invariant broke: %+v", sum.Invariants)
	}
}

func TestDemoRefusesBadConfig(t *testing.T) {
	av := workload.Availability{Name: "av", Sessions: []workload.Session{{Node: "home-1", Down: workload.Forever}}}
	for _, cfg := range []DemoConfig{
		{Nodes: -1},
		{Nodes: MaxDemoNodes + 1},
		{Duration: time.Millisecond},
		{TimeScale: -2},
		{Availability: &av}, // without Chaos
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
