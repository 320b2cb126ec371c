package market_test

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// ready lists the running placements whose readiness probe answers.
func ready(r market.JobRecord) []market.Placement {
	var out []market.Placement
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning && p.Ready {
			out = append(out, p)
		}
	}
	return out
}

func serviceSpec() market.JobSpec {
	return market.JobSpec{ID: "svc", Kind: market.KindService, Replicas: 2, Cards: 1, MaxPriceCNY: 20, Command: []string{"x"},
		Service: &market.ServiceSpec{Port: 8000, ReadyPath: "/healthz"}}
}

func setReady(t *testing.T, h *markettest.Harness, p market.Placement, ok bool) {
	t.Helper()
	if err := h.Step(p.Node, market.ExecutionReady{Now: h.Now, Job: "svc", Share: p.Share, Epoch: p.Epoch, Ready: ok}); err != nil {
		t.Fatal(err)
	}
}

func TestAServiceReplicaIsReadyOnlyWhileItsRunnerSaysSo(t *testing.T) {
	h := drainMesh(t)
	if err := h.SubmitAt("coord", serviceSpec()); err != nil {
		t.Fatal(err)
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return serving(r) == 2 }, 5*time.Second) {
		t.Fatal("the service did not start two replicas")
	}
	r, _ := h.Job("svc")
	if got := ready(r); len(got) != 0 {
		t.Fatalf("replicas ready before any probe answered: %+v", got)
	}
	var first market.Placement
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning {
			first = p
			break
		}
	}
	setReady(t, h, first, true)
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return len(ready(r)) == 1 }, time.Second) {
		t.Fatal("the coordinator did not learn the replica is ready")
	}
	r, _ = h.Job("svc")
	if got := ready(r)[0]; got.Share != first.Share || got.Epoch != first.Epoch {
		t.Fatalf("share %d epoch %d is ready, want share %d epoch %d", got.Share, got.Epoch, first.Share, first.Epoch)
	}
	setReady(t, h, first, false)
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return len(ready(r)) == 0 }, time.Second) {
		t.Fatal("a replica whose probe stopped answering stays ready")
	}
	// Readiness of an attempt that does not run here is refused.
	if err := h.Step("s1", market.ExecutionReady{Now: h.Now, Job: "svc", Share: 9, Epoch: 99, Ready: true}); err == nil {
		t.Error("readiness of an unknown attempt was taken")
	}
}

func TestADrainedReplicaStopsOnlyOnceItsReplacementIsReady(t *testing.T) {
	h := drainMesh(t)
	if err := h.SubmitAt("coord", serviceSpec()); err != nil {
		t.Fatal(err)
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return serving(r) == 2 }, 5*time.Second) {
		t.Fatal("the service did not start two replicas")
	}
	r, _ := h.Job("svc")
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning {
			setReady(t, h, p, true)
		}
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return len(ready(r)) == 2 }, time.Second) {
		t.Fatal("the replicas are not ready")
	}
	r, _ = h.Job("svc")
	victim := ready(r)[0].Node
	if err := h.Step(victim, market.Drain{Now: h.Now}); err != nil {
		t.Fatal(err)
	}
	// The replacement starts, but is not ready: the drained replica runs on.
	var repl market.Placement
	if !h.RunUntil(func() bool {
		r, _ := h.Job("svc")
		for _, p := range r.Placements {
			if p.State == market.PlacementRunning && p.Node != victim && !p.StartedAt.IsZero() && !p.Ready {
				repl = p
				return true
			}
		}
		return false
	}, 5*time.Second) {
		t.Fatal("no replacement started")
	}
	h.RunFor(2 * time.Second)
	r, _ = h.Job("svc")
	if runningOn(r)[victim] != 1 {
		t.Fatalf("the drained replica stopped before its replacement was ready: %v", runningOn(r))
	}
	setReady(t, h, repl, true)
	if !h.RunUntil(func() bool { r, _ := h.Job("svc"); return runningOn(r)[victim] == 0 }, 5*time.Second) {
		t.Fatal("the drained replica runs on after its replacement became ready")
	}
	r, _ = h.Job("svc")
	if n := len(ready(r)); n != 2 {
		t.Errorf("%d ready replicas after the drain, want 2", n)
	}
}
