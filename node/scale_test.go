package node

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
)

// Scaling through a node that does not coordinate the job answers as the
// coordinator did: a count outside the elastic range is a 400 naming the
// range, not "its coordinator did not answer"; a scale-down stops a whole
// share and places nothing new; an ended job is a 409 naming its state.
func TestScaleAnswersAsTheCoordinatorDoes(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(nil), "", "a100-80g:1", "a100-80g:1")
	coord, asker := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(sm.nodes[1:]...) // node 0 coordinates; node 1 only forwards
	sm.waitBook(coord, 2)
	ctx := context.Background()
	c := apiClient(t, asker, testOwner(0))
	rec, err := c.Submit(ctx, market.JobSpec{AllowSimulated: true, Cards: 2, MaxPriceCNY: 20, Elastic: &market.Elastic{Min: 1, Max: 2},
		Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	id := rec.ID
	eventually(t, 30*time.Second, "the job runs on both cards", func() bool {
		rec, err = c.Job(ctx, id)
		return err == nil && rec.State == market.JobRunning && len(rec.Live()) == 2
	})
	if rec.Coordinator != coord.ID().String() {
		t.Fatalf("coordinated by %s, want node 0", rec.Coordinator)
	}

	_, err = c.Scale(ctx, id, 3)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != "cards" ||
		!strings.Contains(ae.Message, "not within the job's elastic range: 3 cards, range 1..2") || strings.Contains(ae.Message, "did not answer") {
		t.Fatalf("scale to 3: %v, want a 400 on cards naming the range", err)
	}

	rec, err = c.Scale(ctx, id, 1)
	if err != nil || rec.Cards != 1 {
		t.Fatalf("scale to 1: %d cards, %v", rec.Cards, err)
	}
	eventually(t, 30*time.Second, "one share stopped", func() bool {
		rec, err = c.Job(ctx, id)
		return err == nil && len(rec.Live()) == 1 && rec.Live()[0].State == market.PlacementRunning
	})
	if len(rec.Placements) != 2 || rec.Epoch != 1 {
		t.Errorf("after the scale-down: %d placements, epoch %d; want the 2 of the start and nothing new", len(rec.Placements), rec.Epoch)
	}

	if _, err := c.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = c.Scale(ctx, id, 2)
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, "has ended (cancelled)") {
		t.Fatalf("scale of a cancelled job: %v, want a 409 naming its state", err)
	}
}
