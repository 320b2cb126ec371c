package market_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// trackSupplier adds a supplier of one A100 at price CNY per card-hour
// that advertises an MTBF of 720h.
func trackSupplier(t *testing.T, h *markettest.Harness, id string, price float64) {
	t.Helper()
	cfg := market.DefaultConfig(id)
	cfg.Cards = markettest.MustCards(id, "a100-80g:1")
	cfg.Prices.PerModel = map[string]float64{"a100-80g": price}
	cfg.Availability.MTBF = market.Duration(720 * time.Hour)
	h.MustAdd(cfg)
}

func trackCoordinator(t *testing.T, h *markettest.Harness, id string, recs []market.TrackRecord) {
	t.Helper()
	cfg := market.DefaultConfig(id)
	cfg.TrackRecords = recs
	h.MustAdd(cfg)
}

func oneCard(id string) market.JobSpec {
	return market.JobSpec{ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"train"}}
}

// runsOn reports the node that runs the job's live share ("" if none).
func runsOn(h *markettest.Harness, job string) string {
	r, _ := h.Job(job)
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning {
			return p.Node
		}
	}
	return ""
}

// entry returns the explanation's bid-stage entry for node.
func entry(t *testing.T, h *markettest.Harness, job, node string) market.ExplainEntry {
	t.Helper()
	r, _ := h.Job(job)
	if r.Explanation == nil {
		t.Fatalf("%s has no explanation", job)
	}
	for _, e := range r.Explanation.Entries {
		if e.Node == node && e.Stage == "bid" {
			return e
		}
	}
	t.Fatalf("%s's explanation has no entry for %s:\n%s", job, node, r.Explanation)
	return market.ExplainEntry{}
}

// loseThreeShares has coord place job j1 on bad (its only supplier) and
// lose it three times to a cut, then cancels it. It returns what coord
// persisted of its track records.
func loseThreeShares(t *testing.T, h *markettest.Harness) []market.TrackRecord {
	t.Helper()
	if err := h.SubmitAt("coord", oneCard("j1")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !h.RunUntil(func() bool { return runsOn(h, "j1") == "bad" }, 30*time.Second) {
			t.Fatalf("loss %d: j1 does not run on bad", i+1)
		}
		h.RunFor(time.Second)
		h.SetCut("bad", true)
		h.RunFor(3 * time.Second)
		h.SetCut("bad", false)
	}
	if err := h.Step("coord", market.CancelJob{Now: h.Now, Job: "j1"}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(time.Second)
	var recs []market.TrackRecord
	for _, r := range h.Peer("coord").TrackRecords {
		recs = append(recs, r)
	}
	if len(recs) != 1 || recs[0].Node != "bad" || recs[0].Lost != 3 {
		t.Fatalf("coord persisted %+v, want bad with 3 losses", recs)
	}
	return recs
}

func TestSupplierThatLostSharesRanksBelowAnEqualCleanOne(t *testing.T) {
	h := markettest.New(markettest.Options{Seed: 1})
	trackCoordinator(t, h, "coord", nil)
	trackSupplier(t, h, "bad", 9)
	loseThreeShares(t, h)

	trackSupplier(t, h, "good", 9) // the same card, price and MTBF claim
	// Equal offers would split the jobs by the seeded tie-break; bad's
	// record loses it every one.
	for i := range 6 {
		id := fmt.Sprintf("j%d", i+2)
		if err := h.SubmitAt("coord", oneCard(id)); err != nil {
			t.Fatal(err)
		}
		h.RunFor(time.Second)
		if got := runsOn(h, id); got != "good" {
			t.Errorf("%s runs on %q, want good: bad lost three shares for its coordinator", id, got)
		}
		bad, good := entry(t, h, id, "bad"), entry(t, h, id, "good")
		if !strings.Contains(bad.Detail, "track record here: 3 of 3 attempts lost") || !strings.Contains(bad.Detail, "MTBF taken as 2h instead of the advertised 720h") {
			t.Errorf("bad's entry does not explain its track record: %q", bad.Detail)
		}
		if good.Reason != market.ReasonWon || strings.Contains(good.Detail, "track record") {
			t.Errorf("good's entry: %+v", good)
		}
		if err := h.Step("coord", market.CancelJob{Now: h.Now, Job: id}); err != nil {
			t.Fatal(err)
		}
		h.RunFor(time.Second)
	}
}

func TestTrackRecordSurvivesARestartAndFades(t *testing.T) {
	h := markettest.New(markettest.Options{Seed: 1})
	trackCoordinator(t, h, "coord", nil)
	trackSupplier(t, h, "bad", 9)
	recs := loseThreeShares(t, h)

	// The coordinator starts again from recs, after a while, in a mesh
	// where good asks 9.05 to bad's 9.
	restart := func(recs []market.TrackRecord, after time.Duration) (string, market.ExplainEntry) {
		t.Helper()
		h2 := markettest.New(markettest.Options{Seed: 1, Start: h.Now.Add(after)})
		trackCoordinator(t, h2, "coord", recs)
		trackSupplier(t, h2, "bad", 9)
		trackSupplier(t, h2, "good", 9.05)
		if err := h2.SubmitAt("coord", oneCard("j2")); err != nil {
			t.Fatal(err)
		}
		h2.RunFor(time.Second)
		return runsOn(h2, "j2"), entry(t, h2, "j2", "bad")
	}
	// No history: the cheaper one wins.
	if on, bad := restart(nil, time.Minute); on != "bad" || strings.Contains(bad.Detail, "track record") {
		t.Errorf("without a record j2 runs on %q (bad: %q), want bad", on, bad.Detail)
	}
	// What was persisted: bad's losses count after the restart.
	on, bad := restart(recs, time.Minute)
	if on != "good" || !strings.Contains(bad.Detail, "3 of 3 attempts lost, the last 1m ago") {
		t.Errorf("a minute after the restart j2 runs on %q (bad: %q), want good", on, bad.Detail)
	}
	// Ten days on (ten half-lives) three losses weigh 3/1024: the 720h
	// claim stands again.
	if on, bad := restart(recs, 10*24*time.Hour); on != "bad" || strings.Contains(bad.Detail, "track record") {
		t.Errorf("ten days on j2 runs on %q (bad: %q), want bad", on, bad.Detail)
	}
}

// TestSeenSaysWhatTheRecordSays: the track record as people read it (the
// offers a node lists) names the losses and the MTBF clearing weighs, and
// nothing for a supplier it never saw lose a share.
func TestSeenSaysWhatTheRecordSays(t *testing.T) {
	h := markettest.New(markettest.Options{Seed: 1})
	trackCoordinator(t, h, "coord", nil)
	trackSupplier(t, h, "bad", 9)
	loseThreeShares(t, h)
	seen := h.Peer("coord").Node.Seen()
	if len(seen) != 1 {
		t.Fatalf("Seen() = %+v, want bad alone", seen)
	}
	s := seen[0]
	if s.Node != "bad" || s.Lost != 3 || s.LastLoss.IsZero() {
		t.Errorf("Seen() = %+v, want bad with 3 losses and the last one's time", s)
	}
	// The explanation says "MTBF taken as 2h": the same figure.
	if s.MTBF < 90*time.Minute || s.MTBF > 150*time.Minute {
		t.Errorf("observed MTBF %v, want about 2h as the explanation says", s.MTBF)
	}
	if got := h.Peer("bad").Node.Seen(); len(got) != 0 {
		t.Errorf("a supplier that coordinated nothing has a record: %+v", got)
	}
}
