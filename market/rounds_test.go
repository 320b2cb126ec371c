package market_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// A coordinator lets go of a job's rounds once they are over: the jobs it
// still holds after they ended keep their explanations, not their rounds'
// asks, lots and scratch (about 5 KB a job, held as long as the job).
func TestAJobLetsGoOfItsRoundsOnceTheyAreOver(t *testing.T) {
	h := markettest.New(markettest.Options{Seed: 3, Latency: 2 * time.Millisecond,
		Run: func(market.Execution) (time.Duration, int, bool) { return 200 * time.Millisecond, 0, false }})
	h.MustAdd(market.DefaultConfig("coord"))
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		cfg := market.DefaultConfig(id)
		cfg.Cards = markettest.MustCards(id, "a100-80g:2")
		h.MustAdd(cfg)
	}
	h.RunFor(time.Second)
	for i := range 10 {
		if err := h.SubmitAt("coord", market.JobSpec{ID: fmt.Sprintf("j%d", i), Cards: 1 + i%3, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	coord := h.Peer("coord").Node
	if !h.RunUntil(func() bool { r, _ := h.Job("j0"); return r.State == market.JobRunning }, 5*time.Second) {
		t.Fatal("j0 never ran")
	}
	ended := func() bool {
		for _, r := range coord.Jobs() {
			if !r.State.Terminal() {
				return false
			}
		}
		return true
	}
	if !h.RunUntil(ended, 30*time.Second) {
		t.Fatal("the jobs did not all end in 30 s")
	}
	if n := coord.RoundsHeld(); n != 0 {
		t.Errorf("the coordinator's ended jobs still reach %d rounds", n)
	}
	for _, r := range coord.Jobs() {
		if r.State != market.JobSucceeded || r.Explanation == nil {
			t.Errorf("job %s %s, explanation %v", r.ID, r.State, r.Explanation)
		}
	}
}
