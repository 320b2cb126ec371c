package metrics

import (
	"runtime"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/node/api"
)

// Identifiers of the fixture that must never appear in the metrics.
const (
	fixturePeer   = "12D3KooWGzYxeHm6Z3C6cLdS8a8u1yFgdWXbBy6sSz5TrHnE7qS1"
	fixtureJob    = "j-7f3a9c2e1b"
	fixtureCardID = "GPU-5d1a8e0e-3f7b-4c1e-9b2a-7a1c0d9e8f11"
)

// fixtureStatus is a node with two H100s (one running a job, one unhealthy)
// in a mesh of five members.
func fixtureStatus(at time.Time) *api.Status {
	st := &api.Status{
		At: at,
		Node: api.NodeStatus{
			PeerID: fixturePeer, Version: "v0.1.0", StartedAt: at.Add(-time.Hour), UptimeSeconds: 3600,
			Reachability: api.ReachabilityPrivate, Region: "cn-east",
			Cards: []api.Card{
				{Card: device.Card{ID: fixtureCardID, Vendor: device.VendorNVIDIA, Model: "h100-sxm-80g"}, Healthy: true, State: "running", Job: fixtureJob},
				{Card: device.Card{ID: "GPU-2", Vendor: device.VendorNVIDIA, Model: "h100-sxm-80g", Health: device.Unhealthy("Xid 79")}, Healthy: false, State: "free"},
			},
		},
		Jobs:     api.JobsStatus{ByState: map[string]int{"running": 2, "pending": 1, "succeeded": 4}},
		Warnings: []string{"card GPU-2 unhealthy: Xid 79"},
	}
	st.Mesh.Members = api.MemberCounts{Alive: 3, Suspect: 1, Dead: 1}
	st.Mesh.AddCards(api.Capacity{Model: "h100-sxm-80g", Vendor: "nvidia", Free: 6, Reserved: 1, Busy: 1})
	st.Mesh.AddCards(api.Capacity{Model: "rtx4090-48g", Vendor: "nvidia", Free: 2})
	st.Mesh.AddCards(api.Capacity{Model: "mtt-s4000-48g", Vendor: "mthreads", Busy: 4})
	st.Mesh.AddRegion("cn-east", 10)
	st.Mesh.AddRegion("cn-north", 4)
	return st
}

// fakeGossip is a gossip.Stats source the test moves forward.
type fakeGossip struct{ s gossip.Stats }

func (f *fakeGossip) stats() gossip.Stats { return f.s }

func newFakeGossip() *fakeGossip {
	return &fakeGossip{s: gossip.Stats{
		BytesIn: 1000, BytesOut: 2000, RPCsIn: 10, RPCsOut: 20, DroppedRPCs: 1,
		Topics: map[string]gossip.TopicStats{
			"/gpumesh/test/capacity/1": {
				Published: 5, Accepted: 40, Duplicates: 12, MeshPeers: 4,
				Rejected: map[string]uint64{"bad signature": 2, "malformed": 1},
				Ignored:  map[string]uint64{"stale seq": 3},
			},
			"/gpumesh/test/bids/1": {Accepted: 7, MeshPeers: 2, Rejected: map[string]uint64{}, Ignored: map[string]uint64{}},
		},
		Sync: gossip.SyncStats{Syncs: 2},
	}}
}

func goVersion() string { return runtime.Version() }
