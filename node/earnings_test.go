package node

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/store"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The ledger counts each attempt's rise in card-seconds once, at its
// price, on the local day it is counted; today starts at local midnight
// and the week on Monday; what it wrote reads back the same, without the
// counters of attempts that were closed meanwhile.
func TestLedgerCountsDaysWeeksAndModelsAndSurvivesARestart(t *testing.T) {
	shanghai := time.FixedZone("CST", 8*3600)
	at := func(s string) time.Time {
		tm, err := time.ParseInLocation(time.DateTime, s, shanghai)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	l := newLedger(shanghai)
	// Sunday 1 June (last week): 2 card-hours of an H100 at 20 CNY.
	l.add(at("2025-06-01 22:00:00"), "a1", "h100-sxm-80g", 7200, 20)
	// Monday 2 June: a4090 attempt counted as it runs, then at its end.
	l.add(at("2025-06-02 09:00:00"), "a2", "rtx4090-48g", 1800, 3)
	if e := l.add(at("2025-06-02 09:00:01"), "a2", "rtx4090-48g", 1800, 3); e.CardSeconds != 0 {
		t.Errorf("the same card-seconds counted twice: %+v", e)
	}
	l.add(at("2025-06-02 10:00:00"), "a2", "rtx4090-48g", 3600, 3)
	// Tuesday 3 June, 00:30 local (16:30 UTC the day before): today.
	l.add(at("2025-06-03 00:30:00"), "a3", "h100-sxm-80g", 3600, 22)
	l.close("a1")

	sum := l.summary(at("2025-06-03 12:00:00"))
	if !sum.TodaySince.Equal(at("2025-06-03 00:00:00")) || !sum.WeekSince.Equal(at("2025-06-02 00:00:00")) || !sum.Since.Equal(at("2025-06-01 22:00:00")) {
		t.Errorf("periods: today since %v, week since %v, since %v", sum.TodaySince, sum.WeekSince, sum.Since)
	}
	if !near(sum.Today.CNY, 22) || !near(sum.Week.CNY, 22+3) || !near(sum.Total.CNY, 40+3+22) || !near(sum.Total.CardSeconds, 7200+3600+3600) {
		t.Errorf("today %+v, week %+v, total %+v; want 22, 25 and 65 CNY", sum.Today, sum.Week, sum.Total)
	}
	want := []api.ModelEarned{
		{Model: "h100-sxm-80g", Today: api.Earned{CNY: 22, CardSeconds: 3600}, Week: api.Earned{CNY: 22, CardSeconds: 3600}, Total: api.Earned{CNY: 62, CardSeconds: 10800}},
		{Model: "rtx4090-48g", Week: api.Earned{CNY: 3, CardSeconds: 3600}, Total: api.Earned{CNY: 3, CardSeconds: 3600}},
	}
	if fmt.Sprint(sum.ByModel) != fmt.Sprint(want) {
		t.Errorf("by model %+v\nwant       %+v", sum.ByModel, want)
	}
	// The next Monday: a new week.
	if s := l.summary(at("2025-06-09 08:00:00")); s.Week.CNY != 0 || s.Today.CNY != 0 || !near(s.Total.CNY, 65) {
		t.Errorf("a week on: today %v, week %v, total %v", s.Today.CNY, s.Week.CNY, s.Total.CNY)
	}

	// Written and read back: the same figures; a2's counter kept (its
	// attempt is still in the state file), a3's dropped (closed since).
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Apply(l.ops(at("2025-06-03 12:00:00"))); err != nil {
		t.Fatal(err)
	}
	back := newLedger(shanghai)
	if err := back.load(st, map[string]bool{"a2": true}, func(k string, err error) { t.Errorf("%s: %v", k, err) }); err != nil {
		t.Fatal(err)
	}
	got := back.summary(at("2025-06-03 12:00:00"))
	if !got.Since.Equal(sum.Since) {
		t.Errorf("since read back %v, want %v", got.Since, sum.Since)
	}
	got.Since = sum.Since // the same instant; JSON keeps its offset, not its zone's name
	if fmt.Sprint(got) != fmt.Sprint(sum) {
		t.Errorf("read back %+v\nwant      %+v", got, sum)
	}
	if back.counted["a2"] != 3600 || len(back.counted) != 1 {
		t.Errorf("counters read back %v, want a2's 3600 alone", back.counted)
	}
	if e := back.add(at("2025-06-03 13:00:00"), "a2", "rtx4090-48g", 3600, 3); e.CardSeconds != 0 {
		t.Errorf("a2 counted again after the restart: %+v", e)
	}
	// Days older than earningsKeepDays leave the day by day record, not
	// the totals.
	if err := st.Apply(back.ops(at("2025-07-01 12:00:00"))); err != nil {
		t.Fatal(err)
	}
	later := newLedger(shanghai)
	if err := later.load(st, nil, func(k string, err error) { t.Errorf("%s: %v", k, err) }); err != nil {
		t.Fatal(err)
	}
	if len(later.days) != 0 || !near(later.summary(at("2025-07-01 12:00:00")).Total.CNY, 65) {
		t.Errorf("a month on: days %v, total %+v", later.days, later.summary(at("2025-07-01 12:00:00")).Total)
	}
}

// A supplier's status says what its cards earned while a job ran on them,
// as the job's bill says, and still says it after the supplier restarts.
func TestSupplierEarningsMatchTheBillAndSurviveARestart(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.Prices = map[string]float64{"a100-80g": 36} }, "", "a100-80g:2")
	coord, sup := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(sup)
	sm.waitBook(coord, 2)
	ctx := context.Background()
	status := func(n *Node) *api.Earnings {
		t.Helper()
		st, err := n.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.(*api.Status).Earnings
	}
	if e := status(sup); e == nil || e.Total.CNY != 0 || !e.Since.IsZero() {
		t.Fatalf("earnings before any job: %+v", e)
	}
	if _, err := coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "earner", Cards: 2, MaxPriceCNY: 40, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, "earner", 20*time.Second, market.JobRunning)
	// While it runs, the earnings grow (counted each second).
	eventually(t, 10*time.Second, "earnings while the job runs", func() bool { return status(sup).Today.CNY > 0 })
	if _, err := coord.Cancel(ctx, "earner"); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "earner", 10*time.Second, market.JobCancelled)
	// Once the attempt is over for good on the supplier, and its end is
	// billed, the two agree.
	var e *api.Earnings
	eventually(t, 10*time.Second, "the supplier's earnings equal the bill", func() bool {
		var open int
		if err := sup.do(ctx, func() { open = len(sup.mk.Attempts()) }); err != nil {
			return false
		}
		rec, _ = coord.Job(ctx, "earner")
		e = status(sup)
		return open == 0 && rec.CostCNY > 0 && math.Abs(e.Total.CNY-rec.CostCNY) < 1e-9
	})
	if len(e.ByModel) != 1 || e.ByModel[0].Model != "a100-80g" || e.Today != e.Total || e.Week != e.Total {
		t.Errorf("earnings %+v, want all of it today, this week, on a100-80g", e)
	}
	if got := rec.CardSeconds * 36 / 3600; math.Abs(e.Total.CNY-got) > 0.001 {
		t.Errorf("earned %.4f CNY; %.1f card-seconds at 36 CNY per card-hour is %.4f", e.Total.CNY, rec.CardSeconds, got)
	}
	t.Logf("earned %.4f CNY for %.2f card-seconds; billed %.4f", e.Total.CNY, e.Total.CardSeconds, rec.CostCNY)

	// The supplier restarts from its data dir: the earnings are still there.
	dir := sup.cfg.DataDir
	sup.Close()
	sm.nodes[1] = nil
	sim, err := device.NewSim(mustSimSpec(t, "a100-80g:2"), "node-1", device.DefaultCatalog())
	if err != nil {
		t.Fatal(err)
	}
	restarted, err := Start(ctx, Config{DataDir: dir, Sim: sm.net, Devices: []device.Backend{sim}, Coordinator: CoordinatorNever,
		Mesh: sup.cfg.Mesh, Executor: executor.Config{Isolation: executor.IsolationProcess}, Logger: sm.log, Owner: testOwner(0)})
	if err != nil {
		t.Fatal(err)
	}
	sm.nodes[1] = restarted
	if after := status(restarted); after.Total != e.Total || after.Today != e.Today || len(after.ByModel) != 1 {
		t.Errorf("after a restart: %+v, want %+v", after, e)
	}
}

func mustSimSpec(t *testing.T, spec string) device.SimSpec {
	t.Helper()
	s, err := device.ParseSimSpec(spec, device.DefaultCatalog())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
