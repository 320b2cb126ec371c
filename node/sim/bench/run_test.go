package bench

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// rowsOf returns the rows of a scenario.
func rowsOf(res *Results, scenario string) []Row {
	var out []Row
	for _, r := range res.Rows {
		if r.Scenario == scenario {
			out = append(out, r)
		}
	}
	return out
}

// find returns the first row of scenario whose case contains c, with
// clock and metric.
func find(t *testing.T, res *Results, scenario, c, clock, metric string) Row {
	t.Helper()
	for _, r := range rowsOf(res, scenario) {
		if strings.Contains(r.Case, c) && r.Clock == clock && r.Metric == metric {
			return r
		}
	}
	t.Fatalf("no %s row %q %q %q", scenario, c, clock, metric)
	return Row{}
}

// Every scenario runs on tiny meshes and reports figures a user would
// believe: times positive and ordered (median ≤ p99), placements in a
// few round trips, a reroute slower than the market's loss detection,
// quality ratios near 100%, gossip reaching every node. (GPUMESH_SCALE=1
// runs the default sizes instead: minutes.)
func TestScenarios(t *testing.T) {
	cfg := Tiny()
	if os.Getenv("GPUMESH_SCALE") == "1" {
		cfg = Config{}
	}
	cfg.Dir = t.TempDir()
	cfg.Progress = func(s string) { t.Log(s) }
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interrupted || len(res.Scenarios) != len(Scenarios()) {
		t.Fatalf("ran %v (interrupted %v)", res.Scenarios, res.Interrupted)
	}
	var table strings.Builder
	res.WriteMarkdown(&table)
	t.Log("\n" + table.String())
	for _, r := range res.Rows {
		if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) || r.Value < 0 {
			t.Errorf("row %+v: value out of range", r)
		}
		if r.Unit == "ms" && r.Metric == "median" && r.Value <= 0 {
			t.Errorf("row %+v: a time of zero", r)
		}
	}
	for _, s := range Scenarios() {
		if len(rowsOf(res, s)) == 0 {
			t.Errorf("no rows for %s", s)
		}
	}

	// placement: every clock, median ≤ p99; virtual placements take 2 to
	// 3 round trips.
	for _, clock := range []string{ClockReal, ClockVirtualLAN, ClockVirtualWAN} {
		med, p99 := find(t, res, ScenarioPlacement, "1 card", clock, "median"), find(t, res, ScenarioPlacement, "1 card", clock, "p99")
		if med.Value > p99.Value || med.N == 0 {
			t.Errorf("%s: median %v, p99 %v over %d", clock, med.Value, p99.Value, med.N)
		}
	}
	for _, clock := range []string{ClockVirtualLAN, ClockVirtualWAN} {
		if rt := find(t, res, ScenarioPlacement, "cards", clock, "median round trips"); rt.Value < 1 || rt.Value > 3.05 || rt.Met == nil || !*rt.Met {
			t.Errorf("%s: %v round trips", clock, rt.Value)
		}
	}
	if len(res.Notes) == 0 || !strings.Contains(strings.Join(res.Notes, "\n"), "so its largest job is") {
		t.Errorf("no note that the tiny mesh could not hold 1000 cards: %q", res.Notes)
	}

	// throughput: the market core beats the broadcast baseline.
	if ratio := find(t, res, ScenarioThroughput, "market core / broadcast", "", "ratio"); ratio.Value <= 1 {
		t.Errorf("book vs broadcast ratio %v", ratio.Value)
	}
	if tp := find(t, res, ScenarioThroughput, "full nodes", ClockReal, "jobs/s placed"); tp.Value <= 0 || tp.N == 0 {
		t.Errorf("mesh throughput %+v", tp)
	}

	// scaleup: reached on every clock.
	find(t, res, ScenarioScaleup, "cards", ClockReal, "median")
	if rt := find(t, res, ScenarioScaleup, "cards", ClockVirtualWAN, "round trips"); rt.Value < 1 {
		t.Errorf("scale-up in %v round trips", rt.Value)
	}

	// failover: a silent loss is noticed only after the market's
	// LostAfter (2 s virtual, 5 s under sim.SimMarket); a crash's hint
	// makes it faster.
	silentV, crashV := find(t, res, ScenarioFailover, lossSilent, ClockVirtualLAN, "median"), find(t, res, ScenarioFailover, lossCrash, ClockVirtualLAN, "median")
	if silentV.Value < 1500 || crashV.Value >= silentV.Value {
		t.Errorf("virtual reroutes: crash %v ms, silent %v ms", crashV.Value, silentV.Value)
	}
	if silentR := find(t, res, ScenarioFailover, lossSilent, ClockReal, "median"); silentR.Value < 4000 {
		t.Errorf("a silent loss rerouted in %v ms, before the market could tell", silentR.Value)
	}

	// gossip: every trial reached every node.
	if g := find(t, res, ScenarioGossip, "ad to all", ClockReal, "median"); g.N < 3 {
		t.Errorf("gossip trials %d", g.N)
	}

	// gossip memory: the resident set per node is held to the target of
	// 1 MB; the heap and stacks are a figure of their own.
	if rssBytes() > 0 {
		rss := find(t, res, ScenarioGossip, "nodes", "", "RSS/node")
		if rss.Value <= 0 || rss.Unit != "MB" || rss.Met == nil || *rss.Met != (rss.Value < 1) {
			t.Errorf("gossip RSS row %+v", rss)
		}
	}
	if heap := find(t, res, ScenarioGossip, "nodes", "", "heap+stacks/node"); heap.Value <= 0 || heap.Met != nil {
		t.Errorf("gossip heap row %+v: a figure without a target", heap)
	}

	// quality: the auction is within a few percent of the central
	// matcher on a tiny mesh, and every ratio with a target is marked
	// by its value.
	for _, m := range []string{"throughput", "effective cost", "cost", "paid"} {
		if q := find(t, res, ScenarioQuality, "mesh / central", "", m); q.Value < 90 || q.Value > 130 {
			t.Errorf("quality %s %v%%", m, q.Value)
		}
	}
	for _, c := range []struct {
		metric string
		met    func(v float64) bool
	}{
		{"throughput", func(v float64) bool { return v >= 98 }},
		{"effective cost", func(v float64) bool { return v <= 101 }},
		{"cost", func(v float64) bool { return v <= 101 }},
	} {
		q := find(t, res, ScenarioQuality, "mesh / central", "", c.metric)
		if q.Met == nil || *q.Met != c.met(q.Value) {
			t.Errorf("quality %s %v%% marked %v", c.metric, q.Value, q.Met)
		}
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "survival-weighted effective cost") {
		t.Errorf("no note on why CNY cost may exceed the central matcher's: %q", res.Notes)
	}
	if len(res.Plots) != 2 {
		t.Errorf("plots %d, want placement and failover", len(res.Plots))
	}
	if _, err := res.WriteDir(t.TempDir()); err != nil {
		t.Error(err)
	}
}

// Ctrl-C: a cancelled run stops, closes its nodes and returns what it
// measured so far, marked interrupted.
func TestRunCancelled(t *testing.T) {
	cfg := Tiny()
	cfg.Scenarios = []string{ScenarioPlacement}
	cfg.Dir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Progress = func(s string) {
		if strings.HasPrefix(s, "starting") { // the full mesh of placement
			cancel()
		}
	}
	start := time.Now()
	res, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) || res == nil || !res.Interrupted {
		t.Fatalf("results %+v, err %v", res, err)
	}
	// The virtual-time figures come before the full mesh starts.
	if len(res.Scenarios) != 0 || len(rowsOf(res, ScenarioPlacement)) == 0 {
		t.Errorf("scenarios done %v, rows %d", res.Scenarios, len(res.Rows))
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("stopping took %v", d)
	}
}
