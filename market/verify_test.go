package market_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// verifyMesh is a coordinator that requires verification (mode) and two
// suppliers of one H100 each; it records the probe requests sent.
func verifyMesh(t *testing.T, mode market.VerifyMode) (*markettest.Harness, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var asked []string
	h := markettest.New(markettest.Options{Seed: 3})
	h.OnReady = func(p *markettest.Peer, rd market.Ready) {
		for _, m := range rd.Messages {
			if _, ok := m.Payload.(*market.ProbeRequest); ok {
				mu.Lock()
				asked = append(asked, m.To)
				mu.Unlock()
			}
		}
	}
	cfg := market.DefaultConfig("coord")
	cfg.Verify = mode
	h.MustAdd(cfg)
	for _, id := range []string{"s1", "s2"} {
		c := market.DefaultConfig(id)
		c.Cards = markettest.MustCards(id, "h100-sxm-80g:1")
		h.MustAdd(c)
	}
	h.RunFor(100 * time.Millisecond)
	return h, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), asked...) }
}

func TestUnverifiedSuppliersAreProbedBeforeTheirFirstAward(t *testing.T) {
	h, asked := verifyMesh(t, market.VerifyNew)
	spec := market.JobSpec{ID: "j1", Cards: 1, Models: []string{"h100-*"}, MaxPriceCNY: 40, Command: []string{"train"}}
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	h.RunFor(time.Second)
	rec, _ := h.Job("j1")
	if rec.State != market.JobPending || !strings.Contains(rec.Reason, "waiting for this coordinator's verification probe: 2 free on 2 suppliers") {
		t.Fatalf("job %s %q: want pending for the probes", rec.State, rec.Reason)
	}
	if got := asked(); len(got) < 2 {
		t.Fatalf("probe requests %v, want one to each supplier", got)
	}
	// s1 passes; s2's H100 performs like an RTX 4090, which the job does
	// not take.
	now := h.Now
	if err := h.Step("coord", market.ProbeResult{Now: now, Node: "s1", Verdicts: []market.ProbeVerdict{{Model: "h100-sxm-80g", Cards: 1, Detail: "≥ 3100 GB/s"}}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Step("coord", market.ProbeResult{Now: now, Node: "s2", Verdicts: []market.ProbeVerdict{{Model: "h100-sxm-80g", Cards: 1,
		PerformsAs: "rtx4090-24g", ComputeUnits: 0.53, Detail: "≥ 340 GB/s of 3350"}}}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(12 * time.Second)
	rec, _ = h.Job("j1")
	if rec.State != market.JobRunning || rec.Placements[len(rec.Placements)-1].Node != "s1" {
		t.Fatalf("job %s on %+v: want running on the verified s1", rec.State, rec.Placements)
	}
	// A second job of any model: s2's card is treated as an RTX 4090 and
	// priced per compute unit as one, and the explanation says so when
	// the job wants H100s.
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j2", Cards: 1, Models: []string{"h100-*"}, MaxPriceCNY: 40, Command: []string{"train"}}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(time.Second)
	rec, _ = h.Job("j2")
	if rec.State != market.JobPending || !strings.Contains(rec.Reason, "failed this coordinator's verification probe") {
		t.Fatalf("j2 %s %q", rec.State, rec.Reason)
	}
	found := false
	for _, e := range rec.Explanation.Entries {
		if e.Node == "s2" && e.Reason == market.ReasonProbe && strings.Contains(e.Detail, "perform like rtx4090-24g") {
			found = true
		}
	}
	if !found {
		t.Fatalf("explanation %+v: want s2's cards named as performing like an RTX 4090", rec.Explanation.Entries)
	}
	// The verdicts are in the track record, to persist.
	for _, r := range h.Peer("coord").Node.TrackRecords() {
		if r.Node == "s2" && (r.Probe == nil || r.Probe.Verdicts[0].PerformsAs != "rtx4090-24g") {
			t.Errorf("s2's track record %+v: no verdict", r)
		}
	}
}

func TestAFailedProbeHoldsTheSupplierBack(t *testing.T) {
	h, _ := verifyMesh(t, market.VerifyNew)
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 2, MaxPriceCNY: 40, Command: []string{"train"}}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(500 * time.Millisecond)
	now := h.Now
	_ = h.Step("coord", market.ProbeResult{Now: now, Node: "s1", Verdicts: []market.ProbeVerdict{{Model: "h100-sxm-80g", Cards: 1}}})
	_ = h.Step("coord", market.ProbeResult{Now: now, Node: "s2", Failed: "the answer came 14.2s after the challenge, past the 10s deadline"})
	h.RunFor(12 * time.Second)
	rec, _ := h.Job("j1")
	if rec.State != market.JobPending || !strings.Contains(rec.Reason, "failed this coordinator's verification probe: 1 free on 1 supplier") {
		t.Fatalf("job %s %q: want it waiting, s2 held back", rec.State, rec.Reason)
	}
	if err := h.Step("coord", market.ProbeResult{Now: now, Node: ""}); err == nil {
		t.Error("a result naming no node was taken")
	}
}
