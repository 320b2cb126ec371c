package markettest

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// A burst of gang jobs that ask for more than the mesh has (the burst
// bench's: ten 64-card and two 256-card jobs at once on 40 nodes of 8
// cards) must not deadlock on the suppliers' reservations, each job
// holding some cards and none enough: within 2 s of virtual time every
// card runs a share, as five of the 64-card jobs, and the rest wait with
// a reason. The market core alone, so that a real stack that does worse
// (gpumesh bench --scenario burst) is known to lose the time elsewhere.
func TestABurstOfGangJobsFillsTheMesh(t *testing.T) {
	h := New(Options{Seed: 1, Latency: 2 * time.Millisecond, Jitter: 2 * time.Millisecond})
	for i := range 40 {
		id := fmt.Sprintf("n%02d", i)
		h.MustAddSupplier(id, "a100-80g:8")
	}
	var ids []string
	for i := range 12 {
		cards := 64
		if i >= 10 {
			cards = 256
		}
		id := fmt.Sprintf("j%02d", i)
		if _, err := h.Submit(market.JobSpec{ID: id, Cards: cards, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	h.RunFor(2 * time.Second)
	running, cards := 0, 0
	for _, id := range ids {
		r, _ := h.Job(id)
		switch {
		case r.State == market.JobRunning:
			running++
			if LiveCards(r) != r.Spec.Cards {
				t.Errorf("%s runs on %d of its %d cards", id, LiveCards(r), r.Spec.Cards)
			}
		case r.State == market.JobPending && r.Reason == "":
			t.Errorf("%s waits without a reason", id)
		}
		cards += LiveCards(r)
	}
	if running != 5 || cards != 320 {
		t.Errorf("2 s after the burst: %d of 12 jobs running on %d of 320 cards; want 5 on all 320", running, cards)
	}
}
