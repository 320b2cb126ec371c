package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// A submission is acknowledged only once the job's record is on every
// replica of its group: the moment Submit returns, the replicas hold it.
// A coordinator cut off from its replicas does not acknowledge: the
// submitter gets a 503 that says to submit again with the same ID, and
// doing so once the replicas are back is acknowledged, for the one job.
func TestSubmitWaitsForItsReplicas(t *testing.T) {
	sm := newSimMesh(t, "", "", "", "a100-80g:2")
	entry := sm.nodes[3]
	sm.neverCoordinate(entry)
	for _, n := range sm.nodes[:3] {
		sm.waitBook(n, 2)
	}
	var coords []string
	for _, n := range sm.nodes[:3] {
		coords = append(coords, n.ID().String())
	}
	group := func(id string) (coord *Node, replicas []*Node) {
		order := market.Coordinators(id, coords, 3)
		return sm.byID(order[0]), []*Node{sm.byID(order[1]), sm.byID(order[2])}
	}
	holds := func(n *Node, id string) bool {
		_, ok := n.view.job(id)
		return ok
	}
	spec := func(id string) market.JobSpec {
		return market.JobSpec{ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	}

	// A normal submission: acknowledged, and on both replicas already.
	if _, err := entry.Submit(context.Background(), spec("replicated")); err != nil {
		t.Fatal(err)
	}
	_, replicas := group("replicated")
	for _, r := range replicas {
		if !holds(r, "replicated") {
			t.Errorf("replica %s does not hold the record when the submission is acknowledged", r.ID().ShortString())
		}
	}

	// A coordinator cut off from both its replicas.
	id := "cut-off-replicas"
	coord, replicas := group(id)
	for _, r := range replicas {
		sm.net.Cut(coord.ID(), r.ID())
	}
	_, err := entry.Submit(context.Background(), spec(id))
	var he *api.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable {
		t.Fatalf("submit with the replicas cut off: %v, want a 503", err)
	}
	for _, w := range []string{id, "2 of its 2 replicas", "submit it again with the same ID"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal %q does not say %q", err, w)
		}
	}
	for _, r := range replicas {
		if holds(r, id) {
			t.Fatalf("replica %s holds the record across the cut; the test needs it not to", r.ID().ShortString())
		}
	}

	// Resubmitted once the links are back: acknowledged, replicated, and
	// still the one job with its one attempt.
	for _, r := range replicas {
		sm.net.Heal(coord.ID(), r.ID())
	}
	rec, err := entry.Submit(context.Background(), spec(id))
	if err != nil {
		t.Fatalf("resubmit after the heal: %v", err)
	}
	if rec.Coordinator != coord.ID().String() {
		t.Errorf("resubmission coordinated by %s, want %s", rec.Coordinator, coord.ID())
	}
	for _, r := range replicas {
		if !holds(r, id) {
			t.Errorf("replica %s does not hold the record when the resubmission is acknowledged", r.ID().ShortString())
		}
	}
	rec = waitState(t, coord, id, 20*time.Second, market.JobRunning)
	if n := len(rec.Placements); n != 1 {
		t.Errorf("%d placements after the resubmission, want 1: %s", n, fmt.Sprint(rec.Placements))
	}
}
