package market_test

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

func runningOn(r market.JobRecord) map[string]int {
	out := map[string]int{}
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning {
			out[p.Node]++
		}
	}
	return out
}

func running(r market.JobRecord) int {
	n := 0
	for _, c := range runningOn(r) {
		n += c
	}
	return n
}

// serving counts the running placements whose process has started: the
// replicas a user of the service can reach.
func serving(r market.JobRecord) int {
	n := 0
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning && !p.StartedAt.IsZero() {
			n++
		}
	}
	return n
}

func drainMesh(t *testing.T) *markettest.Harness {
	t.Helper()
	h := markettest.New(markettest.Options{Seed: 7})
	h.MustAdd(market.DefaultConfig("coord"))
	for _, id := range []string{"s1", "s2", "s3"} {
		cfg := market.DefaultConfig(id)
		cfg.Cards = markettest.MustCards(id, "l40s-48g:2")
		h.MustAdd(cfg)
	}
	h.RunFor(100 * time.Millisecond)
	return h
}

func TestDrainMovesAServiceReplicaWithoutAGap(t *testing.T) {
	h := drainMesh(t)
	spec := market.JobSpec{ID: "svc", Kind: market.KindService, Replicas: 2, Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return serving(r) == 2 }, 5*time.Second) {
		t.Fatal("the service did not start two replicas")
	}
	r, _ := h.Job("svc")
	var victim string
	for node := range runningOn(r) {
		victim = node
		break
	}
	if err := h.Step(victim, market.Drain{Now: h.Now}); err != nil {
		t.Fatal(err)
	}
	lowest := 2
	ok := h.RunUntil(func() bool {
		r, _ := h.Job("svc")
		lowest = min(lowest, serving(r))
		on := runningOn(r)
		return serving(r) == 2 && on[victim] == 0
	}, 5*time.Second)
	if !ok {
		r, _ := h.Job("svc")
		t.Fatalf("replica not moved off the draining node: %v", runningOn(r))
	}
	if lowest < 2 {
		t.Fatalf("the service dropped to %d replicas with a running process during the drain", lowest)
	}
	// The draining node offers nothing any more.
	for _, o := range h.Peer(victim).Node.Ad().Offers {
		t.Errorf("a draining node still offers %+v", o)
	}
}

func TestDrainStopsAndReplacesABatchShare(t *testing.T) {
	h := drainMesh(t)
	spec := market.JobSpec{ID: "batch", Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("batch"); return running(r) == 1 }, 5*time.Second) {
		t.Fatal("the job did not start")
	}
	r, _ := h.Job("batch")
	var victim string
	for node := range runningOn(r) {
		victim = node
	}
	if err := h.Step(victim, market.Drain{Now: h.Now}); err != nil {
		t.Fatal(err)
	}
	ok := h.RunUntil(func() bool {
		r, _ := h.Job("batch")
		on := runningOn(r)
		return running(r) == 1 && on[victim] == 0
	}, 5*time.Second)
	r, _ = h.Job("batch")
	if !ok || r.Epoch < 2 {
		t.Fatalf("share not moved: running on %v at epoch %d", runningOn(r), r.Epoch)
	}
}
