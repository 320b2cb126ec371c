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
	h.MustAddSupplier("n0", "a100-80g:2")
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

// EachCardState walks the cards in Cards' order with Cards' states: free,
// reserved for a bid, running, and unhealthy.
func TestEachCardStateAgreesWithCards(t *testing.T) {
	h := New(Options{Seed: 4, Latency: 2 * time.Millisecond,
		Run: func(market.Execution) (time.Duration, int, bool) { return time.Hour, 0, false }})
	for i := range 2 {
		id := fmt.Sprintf("n%d", i)
		h.MustAddSupplier(id, "a100-80g:4")
	}
	h.RunFor(time.Second)
	agree := func(when string) map[market.CardState]int {
		seen := map[market.CardState]int{}
		for _, p := range h.Peers() {
			cards := p.Node.Cards()
			i := 0
			p.Node.EachCardState(func(id string, st market.CardState) {
				if i >= len(cards) || cards[i].Card.ID != id || cards[i].State != st {
					t.Errorf("%s, %s: card %d is %s %s; Cards says %+v", when, p.ID, i, id, st, cards[min(i, len(cards)-1)].State)
				}
				seen[st]++
				i++
			})
			if i != len(cards) {
				t.Errorf("%s, %s: %d cards walked, Cards lists %d", when, p.ID, i, len(cards))
			}
		}
		return seen
	}
	agree("idle")
	if _, err := h.Submit(market.JobSpec{ID: "j1", Cards: 3, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	reserved := false
	h.RunUntil(func() bool {
		reserved = agree("bidding")[market.CardReserved] > 0
		return reserved
	}, time.Second)
	if !reserved {
		t.Error("no card seen reserved for the bids")
	}
	if !h.RunUntil(func() bool { r, _ := h.Job("j1"); return r.State == market.JobRunning }, 5*time.Second) {
		t.Fatal("j1 never ran")
	}
	if got := agree("running"); got[market.CardRunning] != 3 {
		t.Errorf("running: %v", got)
	}
	n0 := h.Peer("n0")
	cards := MustCards("n0", "a100-80g:4")
	cards[0].Health.Healthy, cards[0].Health.Reason = false, "XID 79"
	if err := n0.Node.Step(market.CardsChanged{Now: h.Now, Cards: cards}); err != nil {
		t.Fatal(err)
	}
	if got := agree("a card unhealthy"); got[market.CardUnhealthy] != 1 {
		t.Errorf("a card unhealthy: %v", got)
	}
}
