package node

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/store"
)

// trackRecordOf returns the track record n's market keeps of supplier.
func trackRecordOf(t *testing.T, n *Node, supplier string) (market.TrackRecord, bool) {
	t.Helper()
	var recs []market.TrackRecord
	if err := n.do(context.Background(), func() { recs = n.mk.TrackRecords() }); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Node == supplier {
			return r, true
		}
	}
	return market.TrackRecord{}, false
}

func TestTrackRecordSurvivesACoordinatorRestart(t *testing.T) {
	sm, first, runner := oneCardJobOnTwoRunners(t, "flaky")
	coord := sm.nodes[0]
	if err := sm.net.Crash(runner.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the coordinator records the lost share against its runner", func() bool {
		r, ok := trackRecordOf(t, coord, first.Node)
		return ok && r.Lost == 1
	})

	dir, mcfg := coord.cfg.DataDir, coord.cfg.Mesh
	coord.Close()
	sm.nodes[0] = nil
	other := sm.nodes[1] // the runner still up
	if other == runner {
		other = sm.nodes[2]
	}
	mcfg.Join = other.Mesh().Addrs()
	restarted, err := Start(context.Background(), Config{DataDir: dir, Sim: sm.net, Devices: []device.Backend{}, CoordinatorAfter: time.Millisecond,
		Mesh: mcfg, Executor: executor.Config{Isolation: executor.IsolationProcess}, Logger: testLogger(), Owner: testOwner(0)})
	if err != nil {
		t.Fatal(err)
	}
	sm.nodes[0] = restarted
	r, ok := trackRecordOf(t, restarted, first.Node)
	if !ok || r.Lost != 1 || r.Losses <= 0.99 || r.LastLoss.IsZero() {
		t.Fatalf("after the restart the record of %s is %+v (found %v), want its loss", first.Node, r, ok)
	}
}

func TestUnreadableTrackRecordIsSkipped(t *testing.T) {
	sm := newSimMesh(t)
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	err = st.Apply([]store.Op{
		store.Put(store.TrackRecords, "good-peer", market.TrackRecord{Node: "good-peer", Lost: 2, Losses: 2, At: at}),
		store.Put(store.TrackRecords, "nan-peer", json.RawMessage(`{"node":"nan-peer","losses":-1,"at":"2026-01-01T00:00:00Z"}`)),
		store.Put(store.TrackRecords, "moved-peer", market.TrackRecord{Node: "elsewhere", Lost: 1, Losses: 1, At: at}),
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(context.Background(), Config{DataDir: dir, Sim: sm.net, Devices: []device.Backend{}, Logger: testLogger(), Owner: testOwner(0)})
	if err != nil {
		t.Fatalf("a bad track record kept the node from starting: %v", err)
	}
	sm.nodes = append(sm.nodes, n)
	var recs []market.TrackRecord
	if err := n.do(context.Background(), func() { recs = n.mk.TrackRecords() }); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Node != "good-peer" || recs[0].Lost != 2 {
		t.Errorf("restored %+v, want only good-peer's record", recs)
	}
}
