package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// A node with an A100 and an RTX 4090 does not give both to a 2-card job
// that names no model: such a job fails at once, saying no node has two
// of one model. Allowing mixed models, the job runs on both, and its
// placement names both models.
func TestMixedCardsNeedTheJobsConsent(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1,rtx4090-24g:1")
	coord, mixed := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(mixed)
	sm.waitBook(coord, 2)
	ctx := context.Background()
	rec, err := coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "two-any", Cards: 2, MaxPriceCNY: 30, Command: []string{"sleep", "300"}})
	if err == nil && rec.State != market.JobFailed {
		rec = waitState(t, coord, "two-any", 30*time.Second, market.JobFailed, market.JobRunning)
	}
	if err != nil || rec.State != market.JobFailed || !strings.Contains(rec.Reason, "the mesh has 1 of one model per node") {
		t.Fatalf("a 2-card job on one mixed node: %s (%s), %v; want it failed, saying why", rec.State, rec.Reason, err)
	}
	if _, err := coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "two-mixed", Cards: 2, MixedModels: true, MaxPriceCNY: 30, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	rec = waitState(t, coord, "two-mixed", 30*time.Second, market.JobRunning, market.JobFailed)
	live := rec.Live()
	if rec.State != market.JobRunning || len(live) != 1 || len(live[0].Cards) != 2 || live[0].Model != "a100-80g+rtx4090-24g" {
		t.Fatalf("mixed allowed: %s, placements %+v; want one share of both cards labelled a100-80g+rtx4090-24g", rec.State, live)
	}
}
