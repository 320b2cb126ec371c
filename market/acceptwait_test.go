package market_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// acceptOrRenewal matches a supplier's Accept and renewals: both wait for
// its write of the attempt.
func acceptOrRenewal(m market.Message) bool {
	switch m.Payload.(type) {
	case *market.Accept, *market.Renewal:
		return true
	}
	return false
}

func isAward(m market.Message) bool {
	_, ok := m.Payload.(*market.Award)
	return ok
}

// slowAccepts makes every supplier's Accept and renewals arrive d late
// (its disk takes that long to write the attempt).
func slowAccepts(h *markettest.Harness, d time.Duration) {
	h.AddRule(&markettest.Rule{Match: acceptOrRenewal, Delay: d})
}

// A supplier whose accepts all come after AwardTimeout (a busy disk): the
// first award times out, and the next waits as long as the supplier took,
// so the job runs instead of being placed again and again.
func TestAwardsWaitForASupplierThatAnswersLate(t *testing.T) {
	h := rankedMesh(t, 1, 2, nil)
	wait := market.DefaultConfig("x").AwardTimeout
	slowAccepts(h, wait+200*time.Millisecond)
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 2, MaxPriceCNY: 40, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	var rec market.JobRecord
	if !h.RunUntil(func() bool {
		rec, _ = h.Peer("coord").Node.Job("j1")
		return rec.State == market.JobRunning
	}, 30*time.Second) {
		t.Fatalf("not running 30 s after the submit: %s (%s), %d placements", rec.State, rec.Reason, len(rec.Placements))
	}
	timedOut := 0
	for _, p := range rec.Placements {
		if strings.Contains(p.Reason, "no answer to the award") {
			timedOut++
		}
	}
	if timedOut != 1 || len(rec.Placements) != 2 {
		t.Errorf("%d placements, %d timed out; want the first timed out and the second running\n%+v", len(rec.Placements), timedOut, rec.Placements)
	}
}

// A supplier that answers at once keeps the configured timeout: an award
// it never answers is given up on after AwardTimeout, as before.
func TestAwardTimeoutStaysForSuppliersThatAnswer(t *testing.T) {
	h := rankedMesh(t, 1, 2, nil)
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if !h.RunUntil(func() bool {
		rec, _ := h.Peer("coord").Node.Job("j1")
		return rec.State == market.JobRunning
	}, 5*time.Second) {
		t.Fatal("j1 not running")
	}
	h.AddRule(&markettest.Rule{Match: acceptOrRenewal, Drop: true})
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j2", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	var awarded, given time.Time
	if !h.RunUntil(func() bool {
		rec, _ := h.Peer("coord").Node.Job("j2")
		for _, p := range rec.Placements {
			if strings.Contains(p.Reason, "no answer to the award") {
				awarded, given = p.AwardedAt, p.EndedAt
				return true
			}
		}
		return false
	}, 5*time.Second) {
		t.Fatal("j2's unanswered award was never given up on")
	}
	// The coordinator looks at its awards on its ticks: a few ms late.
	if d, want := given.Sub(awarded), market.DefaultConfig("x").AwardTimeout; d < want || d > want+50*time.Millisecond {
		t.Errorf("gave up %v after the award, want AwardTimeout %v (and its tick)", d, want)
	}
}

// awardsTimedOut counts the placements of rec whose award was given up on
// for want of an answer.
func awardsTimedOut(rec market.JobRecord) int {
	n := 0
	for _, p := range rec.Placements {
		if strings.Contains(p.Reason, "no answer to the award") {
			n++
		}
	}
	return n
}

// runs submits spec at coord and runs the harness until the job runs.
func runs(t *testing.T, h *markettest.Harness, spec market.JobSpec) market.JobRecord {
	t.Helper()
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	return runningAtCoord(t, h, spec.ID)
}

// runningAtCoord runs the harness until job runs at coord, at most 30 s.
func runningAtCoord(t *testing.T, h *markettest.Harness, job string) market.JobRecord {
	t.Helper()
	var rec market.JobRecord
	if !h.RunUntil(func() bool {
		rec, _ = h.Peer("coord").Node.Job(job)
		return rec.State == market.JobRunning
	}, 30*time.Second) {
		t.Fatalf("%s not running after 30 s: %s (%s), %d placements", job, rec.State, rec.Reason, len(rec.Placements))
	}
	return rec
}

// A supplier slow at every answer (its process starved of CPU): its bid
// took longer than AwardTimeout, so its accept will too. The award waits
// twice as long as the bid took, and the job runs on its first award
// instead of starting twice (once on a spare, once late on the supplier,
// which is then told to stop).
func TestAnAwardWaitsTwiceAsLongAsTheSuppliersBidTook(t *testing.T) {
	h := rankedMesh(t, 1, 2, func(c *market.Config) { c.BidWindow = 2 * time.Second })
	late := market.DefaultConfig("x").AwardTimeout + 100*time.Millisecond
	h.AddRule(&markettest.Rule{Delay: late, Match: func(m market.Message) bool {
		switch m.Payload.(type) {
		case *market.Bid, *market.Accept, *market.Renewal:
			return true
		}
		return false
	}})
	rec := runs(t, h, market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}})
	if n := awardsTimedOut(rec); n != 0 || len(rec.Placements) != 1 {
		t.Errorf("%d placements, %d timed out; want the first award accepted\n%+v", len(rec.Placements), n, rec.Placements)
	}
}

// A coordinator that has seen accepts come late waits as long for a
// supplier it has not heard accept yet: the mesh is loaded, not the one
// supplier it met first.
func TestAnAwardToANewSupplierWaitsAsLongAsAcceptsHaveTaken(t *testing.T) {
	h := rankedMesh(t, 1, 1, nil)
	slowAccepts(h, market.DefaultConfig("x").AwardTimeout+200*time.Millisecond)
	// s00's first award times out; the coordinator learns how late it is.
	first := runs(t, h, market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}})
	if awardsTimedOut(first) != 1 {
		t.Fatalf("j1: %d awards timed out, want the first (the test's premise)\n%+v", awardsTimedOut(first), first.Placements)
	}
	// A new supplier joins; s00's only card runs j1, so j2 goes to it.
	c := market.DefaultConfig("s01")
	c.Cards = markettest.MustCards("s01", "a100-80g:1")
	h.MustAdd(c)
	rec := runs(t, h, market.JobSpec{ID: "j2", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}})
	if n := awardsTimedOut(rec); n != 0 || len(rec.Placements) != 1 || rec.Placements[0].Node != "s01" {
		t.Errorf("%d placements, %d timed out; want one award, to s01, accepted\n%+v", len(rec.Placements), n, rec.Placements)
	}
}

// An award its node holds for the job's record to reach the replicas
// (AwardHeld), longer than the award's time for an answer, is not given
// up on while held; its time counts from when it left (AwardSent), and the
// supplier's accept within it places the share. Without the events the
// same hold times the award out, and the share goes to the spare.
func TestAnAwardsTimeForAnAnswerCountsFromWhenItLeft(t *testing.T) {
	base := market.DefaultConfig("x").AwardTimeout
	hold := 3 * base
	for _, told := range []bool{false, true} {
		h := rankedMesh(t, 1, 2, nil)
		h.AddRule(&markettest.Rule{Delay: hold, Count: 1, Match: isAward})
		first := awardJ1(t, h)
		if told {
			if err := h.Step("coord", market.AwardHeld{Now: h.Now, Job: "j1", Share: first.Share, Epoch: first.Epoch}); err != nil {
				t.Fatal(err)
			}
		}
		h.RunFor(hold - time.Millisecond)
		if told {
			if err := h.Step("coord", market.AwardSent{Now: h.Now, Job: "j1", Share: first.Share, Epoch: first.Epoch}); err != nil {
				t.Fatal(err)
			}
		}
		rec := runningAtCoord(t, h, "j1")
		switch n := awardsTimedOut(rec); {
		case told && (n != 0 || len(rec.Placements) != 1 || rec.Placements[0].Node != first.Node):
			t.Errorf("an award held %v and then sent: %d timed out, %d placements; want the first accepted\n%+v", hold, n, len(rec.Placements), rec.Placements)
		case !told && n != 1:
			t.Errorf("an award held %v, the coordinator not told: %d timed out, want 1 (the test's premise)\n%+v", hold, n, rec.Placements)
		}
	}
}

// A held award that never leaves is given up on after MaxAwardHold, and
// the share is awarded again.
func TestAHeldAwardThatNeverLeavesIsGivenUpOn(t *testing.T) {
	h := rankedMesh(t, 1, 2, nil)
	h.AddRule(&markettest.Rule{Drop: true, Count: 1, Match: isAward})
	first := awardJ1(t, h)
	if err := h.Step("coord", market.AwardHeld{Now: h.Now, Job: "j1", Share: first.Share, Epoch: first.Epoch}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(market.MaxAwardHold - time.Second)
	if rec, _ := h.Peer("coord").Node.Job("j1"); len(rec.Placements) != 1 {
		t.Fatalf("a held award was given up on before MaxAwardHold: %+v", rec.Placements)
	}
	rec := runningAtCoord(t, h, "j1")
	if n := awardsTimedOut(rec); n != 1 || rec.Placements[0].EndedAt.Sub(first.AwardedAt) < market.MaxAwardHold {
		t.Errorf("%d awards timed out, want the held one, after MaxAwardHold\n%+v", n, rec.Placements)
	}
}

// awardJ1 submits a 1-card job j1 at coord and runs the harness until
// its first award is made.
func awardJ1(t *testing.T, h *markettest.Harness) market.Placement {
	t.Helper()
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	var first market.Placement
	if !h.RunUntil(func() bool {
		rec, _ := h.Peer("coord").Node.Job("j1")
		if len(rec.Placements) == 0 {
			return false
		}
		first = rec.Placements[0]
		return true
	}, 10*time.Second) {
		t.Fatal("no award 10 s after the submit")
	}
	return first
}
