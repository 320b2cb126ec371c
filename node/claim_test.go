package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Two members that try to take one job over at once, at the same term
// (two successors acting on different views of who is first): one claim
// wins, the other is refused by the members that granted the one that
// outranks it (a claimant refuses what its own claim outranks too), and
// even a claimant that had won could commit nothing once outranked. One
// successor coordinates the job, and the share that was lost runs again
// once, not twice.
func TestOfTwoClaimantsTheOutrankedOneStartsNothing(t *testing.T) {
	sm := newSimMesh(t, "", "", "", "", "a100-80g:1", "a100-80g:2", "a100-80g:2")
	coords := sm.nodes[:4]
	sm.neverCoordinate(sm.nodes[4:]...)
	for _, n := range coords {
		sm.waitBook(n, 5)
	}
	// Whichever runner takes the job, its loss leaves two nodes that
	// could each take the share.
	first := sm.nodes[4]
	id := firstID("two-claimants", func(string) bool { return true })
	order := market.Coordinators(id, peerIDs(coords), 4)
	coord := sm.byID(order[0])
	if _, err := first.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, first, id, 20*time.Second, market.JobRunning)
	lost, _ := livePlacement(rec)
	a, b := sm.byID(order[1]), sm.byID(order[2])
	eventually(t, 10*time.Second, "both successors hold the job's record", func() bool {
		ra, okA := a.view.Job(id)
		rb, okB := b.view.Job(id)
		return okA && okB && ra.State == market.JobRunning && rb.State == market.JobRunning
	})

	// The coordinator and the runner go at once; the two successors race.
	runner := sm.byID(lost.Node)
	for _, n := range []*Node{coord, runner} {
		if err := sm.net.Crash(n.ID()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	won := map[*Node]uint64{}
	var mu sync.Mutex
	for _, n := range []*Node{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, _ := n.view.Job(id)
			adopt, term, res := n.claimToAdopt(own, own.Term+1, coord.ID())
			if res != claimWon {
				return
			}
			mu.Lock()
			won[n] = term
			mu.Unlock()
			n.postWait(func() {
				if _, mine := n.mk.Job(id); !mine {
					n.adopt(adopt, coord.ID(), term)
				}
			})
		}()
	}
	wg.Wait()
	// Membership's own succession races the two as well: whoever wins,
	// what follows must hold.
	t.Logf("claims won by the two: %d", len(won))

	// One new attempt runs; no second one starts on the other runners.
	var others []*Node
	for _, n := range sm.nodes[4:] {
		if n != runner {
			others = append(others, n)
		}
	}
	attempts := func() []market.Attempt {
		var out []market.Attempt
		for _, n := range others {
			var as []market.Attempt
			n.do(context.Background(), func() { as = n.mk.Attempts() })
			for _, at := range as {
				if at.Job == id && at.State != market.AttemptDone {
					out = append(out, at)
				}
			}
		}
		return out
	}
	eventually(t, 20*time.Second, "the lost share runs again", func() bool { return len(attempts()) > 0 })
	// Never twice at once. It may run zero times for a moment: an award
	// that carried its start (a one-share job) and whose accept came after
	// the award timed out (a loaded machine) is stopped once the
	// coordinator hears the late accept, and the share is placed again.
	throughout(t, 4*time.Second, func() bool { return len(attempts()) <= 1 }, func() string {
		return fmt.Sprintf("the share runs %d times at once: %v", len(attempts()), attempts())
	})
	eventually(t, 10*time.Second, "the share runs", func() bool { return len(attempts()) == 1 })
	var final market.JobRecord
	eventually(t, 10*time.Second, "one successor coordinates the job and the other let it go", func() bool {
		var coordinating []string
		for _, n := range []*Node{a, b} {
			var r market.JobRecord
			var mine bool
			n.do(context.Background(), func() { r, mine = n.mk.Job(id) })
			if mine && r.State == market.JobRunning {
				coordinating = append(coordinating, n.ID().ShortString())
				final = r
			}
		}
		return len(coordinating) == 1
	})
	t.Logf("coordinated by %s at term %d: %s", final.Coordinator, final.Term, describePlacements(final))
}
