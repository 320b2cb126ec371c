package procbench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim/bench"
)

func TestBurstValidateRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		cfg  BurstConfig
		want string
	}{
		{BurstConfig{Config: Config{Binary: binary}, Burst: []int{64, 0}}, "burst job of 0 cards"},
		{BurstConfig{Config: Config{Binary: binary}, Burst: []int{}}, "a burst of no jobs"},
		{BurstConfig{Config: Config{Binary: binary}, Hold: -time.Second}, "must not be negative"},
		{BurstConfig{Config: Config{Binary: binary, Nodes: 2, Cards: 4}, Probe: 9}, "probe job of 9 cards: the mesh has 8"},
		{BurstConfig{Config: Config{Binary: binary, Nodes: -1}}, "--nodes -1"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a bad configuration saying %q", tc.cfg, err, tc.want)
		}
	}
	if err := (BurstConfig{Config: Config{Binary: binary}}).Validate(); err != nil && !errors.Is(err, bench.ErrTooBig) {
		t.Errorf("the defaults: %v", err)
	}
}

func TestParseSeries(t *testing.T) {
	s, err := parseSeries(strings.NewReader(`# HELP gpumesh_mesh_cards x
gpumesh_mesh_cards{model="a",vendor="nvidia",state="reserved"} 3
gpumesh_mesh_cards{model="b",vendor="nvidia",state="reserved"} 2
gpumesh_mesh_cards{model="b",vendor="nvidia",state="free"} 7
gpumesh_network_received_bytes_total 1.5e+06
go_goroutines 12
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.sum("gpumesh_mesh_cards", `state="reserved"`); got != 5 {
		t.Errorf("reserved %v, want 5", got)
	}
	if got := s.sum("gpumesh_network_received_bytes_total"); got != 1.5e6 {
		t.Errorf("received %v", got)
	}
	if _, err := parseSeries(strings.NewReader("gpumesh_x{a=\"b\"} nope\n")); err == nil {
		t.Error("a value that is no number was taken")
	}
}

// A small mesh hit by a burst of jobs larger than it, cancelled: the
// rows say what a user sees afterwards, no card left reserved in any
// book, and a new job that runs.
func TestBurstOnASmallMesh(t *testing.T) {
	needProc(t)
	var lines []string
	res, err := RunBurst(context.Background(), BurstConfig{
		Config: Config{Binary: binary, Nodes: 3, Cards: 4, Idle: 2 * time.Second, SkipCoordinatorWait: true,
			Progress: func(s string) { lines = append(lines, s) }},
		Burst: []int{4, 8, 32}, Hold: 3 * time.Second, Settle: 10 * time.Second, Probe: 8,
	})
	if err != nil {
		t.Fatalf("%v\nprogress: %q\nnotes: %q", err, lines, res.Notes)
	}
	got := rows(res)
	for key, check := range map[string]func(bench.Row) bool{
		"idle, per node/gossip received":                     func(r bench.Row) bool { return r.Value >= 0 && r.N == 3 },
		"idle, per node/all received":                        func(r bench.Row) bool { return r.Value > 0 && r.N == 3 },
		"after the last cancel/CPU at the end":               func(r bench.Row) bool { return r.Value > 0 && r.Unit == "%" },
		"burst, per node/gossip received peak":               func(r bench.Row) bool { return r.Value > 0 },
		"after the last cancel/cards reserved":               func(r bench.Row) bool { return r.Value == 0 },
		"after the last cancel/back to idle":                 func(r bench.Row) bool { return r.Value >= 0 && r.Unit == "s" },
		"after the last cancel/members seen suspect or dead": func(r bench.Row) bool { return r.Value >= 0 },
		"after the last cancel/members declared dead":        func(r bench.Row) bool { return r.Value >= 0 && r.Target == "0" },
		"a 8-card job after the watch/submit → running":      func(r bench.Row) bool { return r.Value > 0 && r.Value < 30000 },
		// Counted by the nodes: a receive count of 0 would mean the row
		// reads nothing.
		"the whole run/membership packets dropped": func(r bench.Row) bool {
			return r.Value >= 0 && r.Unit == "packets" && !strings.Contains(r.Note, "of 0 received") &&
				strings.Contains(r.Note, "dials to members that failed") && strings.Contains(r.Note, "from the burst on")
		},
		"the whole run/metadata updates redone": func(r bench.Row) bool { return r.Value >= 0 && r.Unit == "updates" },
	} {
		r, ok := got[key]
		if !ok || !check(r) {
			t.Errorf("row %s: %+v (present %v)", key, r, ok)
		}
	}
	if len(res.Scenarios) != 1 || res.Scenarios[0] != BurstScenario {
		t.Errorf("scenarios %v", res.Scenarios)
	}
}

// The end of the watch where no scrape had every node's answer: the cards
// reserved are not measured, and the run says so, rather than a "0 ✓"
// from a scrape that heard no node (a run here printed "cards reserved 0
// ✓" and "membership packets dropped 0" with its end's rows missing).
func TestBurstEndWithoutAWholeScrapeIsNotMeasured(t *testing.T) {
	start := time.Unix(1000, 0)
	var ticks []tick
	for s := range 100 {
		ticks = append(ticks, tick{at: start.Add(time.Duration(s) * time.Second), nodes: make([]series, 2), cpu: []time.Duration{-1, -1}})
	}
	r := &burstRun{run: run{res: &bench.Results{}}, bcfg: BurstConfig{Config: Config{Nodes: 2}, Probe: 64}}
	r.report(ticks, start, start.Add(10*time.Second), start.Add(10*time.Second), start.Add(30*time.Second), start.Add(90*time.Second), 0, 12,
		probeResult{took: 100 * time.Millisecond, state: market.JobRunning}, nil)
	for _, row := range r.res.Rows {
		switch row.Metric {
		case "cards reserved":
			if row.Met == nil || *row.Met || !strings.Contains(row.Note, "NOT measured") {
				t.Errorf("cards reserved with no node heard: %+v", row)
			}
		case "membership packets dropped", "metadata updates redone":
			t.Errorf("%s reported with no node heard: %+v", row.Metric, row)
		}
	}
	if !strings.Contains(strings.Join(r.res.Notes, "\n"), "not measured") {
		t.Errorf("notes %q do not say the end was not measured", r.res.Notes)
	}
}
