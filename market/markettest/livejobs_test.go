package markettest

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// LiveJobs lists the records of the jobs a coordinator has that have not
// ended, and JobCounts counts them all by state, as Jobs shows them.
func TestLiveJobsAndJobCountsAgreeWithJobs(t *testing.T) {
	h := New(Options{Seed: 2, Latency: 2 * time.Millisecond,
		Run: func(e market.Execution) (time.Duration, int, bool) {
			if e.Job == "long" {
				return time.Hour, 0, false
			}
			return 100 * time.Millisecond, 0, false
		}})
	cfg := market.DefaultConfig("n0")
	cfg.Cards = MustCards("n0", "a100-80g:2")
	h.MustAdd(cfg)
	h.RunFor(time.Second)
	for _, id := range []string{"short", "long"} {
		if _, err := h.Submit(market.JobSpec{ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	n := h.Peer("n0").Node
	if !h.RunUntil(func() bool { r, _ := h.Job("short"); return r.State == market.JobSucceeded }, 10*time.Second) {
		t.Fatal("the short job never ended")
	}
	var live, wantLive []string
	for _, r := range n.LiveJobs() {
		live = append(live, r.ID)
	}
	want := map[market.JobState]int{}
	for _, r := range n.Jobs() {
		want[r.State]++
		if !r.State.Terminal() {
			wantLive = append(wantLive, r.ID)
		}
	}
	if fmt.Sprint(live) != fmt.Sprint(wantLive) || len(live) == 0 || len(live) == len(n.Jobs()) {
		t.Errorf("LiveJobs = %v, Jobs shows %v not ended of %d", live, wantLive, len(n.Jobs()))
	}
	if got := n.JobCounts(); fmt.Sprint(got) != fmt.Sprint(want) || got[market.JobSucceeded] != 1 {
		t.Errorf("JobCounts = %v, Jobs shows %v", got, want)
	}
}
