package node

import (
	"context"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// chargedCardSeconds reads gpumesh_billed_card_seconds_total{side="charged"}
// of n: the usage of the jobs n coordinates that it billed to their owners.
func chargedCardSeconds(t *testing.T, n *Node) float64 {
	t.Helper()
	var v float64
	if err := n.do(context.Background(), func() {
		mfs, err := n.obs.m.Gatherer().Gather()
		if err != nil {
			t.Error(err)
			return
		}
		for _, mf := range mfs {
			if mf.GetName() != "gpumesh_billed_card_seconds_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if labelOf(m, "side") == "charged" {
					v = m.GetCounter().GetValue()
				}
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// A coordinator that takes over a running job counts, in its charged
// counter, the usage billed from then on, not the bill the job had run up
// under the coordinator it replaced: that was the lost coordinator's to
// count. (Each successor counted the whole bill again, and in a bench run
// of 40 nodes whose members flapped during a burst the mesh's charged
// counters added up to 16 times the usage its suppliers earned.)
func TestATakenOverJobsEarlierBillIsNotChargedAgain(t *testing.T) {
	sm := newSimMesh(t, "", "", "a100-80g:1")
	runner := sm.nodes[2]
	rec, old, successor := runOnTheRunner(t, sm, "billed")
	// The successor's replica shows a bill before the crash.
	var before float64
	eventually(t, 30*time.Second, "the successor's replica shows a bill of at least 2 card-seconds", func() bool {
		r, ok := successor.view.Job("billed")
		before = r.CardSeconds
		return ok && r.CardSeconds >= 2
	})
	if err := sm.net.Crash(old.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the successor coordinates the job", func() bool {
		r, err := runner.Job(context.Background(), "billed")
		return err == nil && r.Coordinator == successor.ID().String() && r.Term > rec.Term
	})
	// It bills the job on: its counter grows.
	eventually(t, 30*time.Second, "the successor charges usage after the takeover", func() bool {
		return chargedCardSeconds(t, successor) > 0
	})
	if _, err := runner.Cancel(context.Background(), "billed"); err != nil {
		t.Fatal(err)
	}
	final := waitState(t, runner, "billed", 10*time.Second, market.JobCancelled)
	charged := chargedCardSeconds(t, successor)
	if most := final.CardSeconds - before; charged > most+1e-6 {
		t.Errorf("the successor charged %.2f card-seconds; the job was billed %.2f in all, %.2f of them before the takeover: want at most %.2f",
			charged, final.CardSeconds, before, most)
	}
	t.Logf("billed %.2f card-seconds, %.2f before the takeover; the successor charged %.2f", final.CardSeconds, before, charged)
}
