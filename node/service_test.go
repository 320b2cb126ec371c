package node

import (
	"context"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// liveReplicas counts a service's running placements and the distinct nodes
// they run on.
func liveReplicas(rec market.JobRecord) (running int, nodes map[string]bool) {
	nodes = map[string]bool{}
	for _, p := range rec.Placements {
		if p.State == market.PlacementRunning {
			running++
			nodes[p.Node] = true
		}
	}
	return running, nodes
}

func TestServiceReplicasSpreadAndSurviveALoss(t *testing.T) {
	sm := newSimMesh(t, "", "l40s-48g:2", "l40s-48g:2", "l40s-48g:2", "l40s-48g:2")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 8)
	spec := market.JobSpec{AllowSimulated: true, ID: "svc", Kind: market.KindService, Replicas: 3, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	var rec market.JobRecord
	eventually(t, 20*time.Second, "three replicas run on three nodes", func() bool {
		rec, _ = coord.Job(context.Background(), "svc")
		n, nodes := liveReplicas(rec)
		return n == 3 && len(nodes) == 3
	})
	_, nodes := liveReplicas(rec)
	var victim string
	for id := range nodes {
		victim = id
		break
	}
	if err := sm.net.Crash(sm.byID(victim).ID()); err != nil {
		t.Fatal(err)
	}
	// Never at zero; back to three on three other nodes.
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, _ = coord.Job(context.Background(), "svc")
		n, nodes := liveReplicas(rec)
		if n == 0 {
			t.Fatal("the service ran no replica at all")
		}
		if n == 3 && len(nodes) == 3 && !nodes[victim] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service not back to 3 replicas on 3 nodes: %d on %v", n, nodes)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

func TestDrainMovesReplicasWithoutAGap(t *testing.T) {
	sm := newSimMesh(t, "", "l40s-48g:1", "l40s-48g:1", "l40s-48g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 3)
	spec := market.JobSpec{AllowSimulated: true, ID: "web", Kind: market.KindService, Replicas: 2, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	var rec market.JobRecord
	eventually(t, 20*time.Second, "two replicas run", func() bool {
		rec, _ = coord.Job(context.Background(), "web")
		n, _ := liveReplicas(rec)
		return n == 2
	})
	_, nodes := liveReplicas(rec)
	var victim *Node
	for id := range nodes {
		victim = sm.byID(id)
		break
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- victim.Drain(ctx)
	}()
	lowest := 2
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
			// The drained node's last report reaches the coordinator
			// just after: the record follows within moments, and the
			// service still never drops below two meanwhile.
			eventually(t, 5*time.Second, "the record shows both replicas off the drained node", func() bool {
				rec, _ = coord.Job(context.Background(), "web")
				n, nodes := liveReplicas(rec)
				lowest = min(lowest, n)
				return n == 2 && !nodes[victim.ID().String()]
			})
			if lowest < 2 {
				t.Fatalf("the service ran %d replicas during the drain", lowest)
			}
			return
		default:
		}
		r, _ := coord.Job(context.Background(), "web")
		n, _ := liveReplicas(r)
		lowest = min(lowest, n)
		time.Sleep(5 * time.Millisecond) // sampling interval
	}
}
