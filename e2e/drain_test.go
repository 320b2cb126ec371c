//go:build unix

package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// A supplier stopped with SIGTERM while it runs with --drain-timeout moves
// its service replica before it stops: the replacement runs elsewhere
// before the old replica ends, so the service never has fewer replicas
// alive than it asks; then the node leaves the mesh.
func TestSIGTERMWithDrainTimeoutMovesTheReplicaFirst(t *testing.T) {
	// n0 and n1 ask the most: they coordinate and run nothing while the
	// cheaper cards are free. The service's two replicas run on two of
	// n2, n3, n4; the third takes the one that moves.
	prices := []float64{9, 9, 2, 3, 5}
	specs := make([]string, len(prices))
	extra := make([][]string, len(prices))
	for i, p := range prices {
		specs[i] = "a100-80g:1"
		extra[i] = []string{"--price", fmt.Sprintf("a100-80g=%g", p), "--drain-timeout", "30s"}
	}
	c := newClusterWith(t, nil, chaosSeed(t), specs, extra)
	n := c.nodes
	svc, coord := c.submitAt(n[:2], c.service(2))
	running := func(r market.JobRecord) (out []market.Placement) {
		for _, p := range r.Live() {
			if p.State == market.PlacementRunning {
				out = append(out, p)
			}
		}
		return out
	}
	rec := c.waitRecord(svc.id, 30*time.Second, "both replicas running", func(r market.JobRecord) bool { return len(running(r)) == 2 })
	watch := c.watchReplicas(svc.id, 2)
	var old market.Placement
	for _, p := range running(rec) {
		if p.Node != coord.peerID {
			old = p
		}
	}
	victim := c.byID(old.Node)
	if victim == nil {
		t.Fatalf("no node runs a replica apart from the coordinator: %s", describe(&rec))
	}
	oldMark := c.waitMarker(svc.id, old.Share, old.Epoch, "start", 10*time.Second)

	c.note("SIGTERM to %s, which runs replica %d (drain timeout 30 s)", victim.name, old.Share)
	stopped := time.Now()
	victim.signal(syscall.SIGTERM)
	victim.waitExit(45 * time.Second)
	c.down[victim] = true
	t.Logf("%s drained and exited in %v", victim.name, time.Since(stopped).Round(time.Millisecond))

	least, zero := watch.result()
	if least < 2 {
		t.Errorf("the service fell to %d replicas alive during the drain (none for %v); the replacement must run before the old replica stops", least, zero)
	}
	if groupAlive(oldMark.pgid) {
		t.Errorf("the drained node's replica (process group %d) still runs after the node exited", oldMark.pgid)
	}
	after := c.waitRecord(svc.id, 10*time.Second, "two replicas running, none on the stopped node", func(r market.JobRecord) bool {
		live := running(r)
		return len(live) == 2 && live[0].Node != victim.peerID && live[1].Node != victim.peerID && distinctNodes(r)
	})
	for _, p := range after.Placements {
		if p.Share == old.Share && p.Epoch == old.Epoch && p.State == market.PlacementLost {
			t.Errorf("the drained replica was declared lost, not moved: %s", describe(&after))
		}
	}
	eventually(t, 20*time.Second, "the other nodes see the drained node as left", func() bool {
		return c.any().peers()[victim.peerID].State == "left"
	})
	c.finish(60 * time.Second)
}
