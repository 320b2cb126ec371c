package jobstate

import (
	"fmt"
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// What the audit walks every 3 s on a node holding the records of 50,000
// jobs that ended and 50 still running: every record, filtered (before
// the settling index), against the index (go test -bench AuditWalk
// ./node/jobstate/).
func BenchmarkAuditWalk(b *testing.B) {
	v := NewView()
	for i := range 50_000 {
		v.Put(market.JobRecord{ID: fmt.Sprintf("ended-%d", i), Coordinator: "c", State: market.JobSucceeded, Version: 9,
			Spec:       market.JobSpec{Command: []string{"python", "train.py"}},
			Placements: []market.Placement{{Share: 0, Epoch: 1, Node: "s", State: market.PlacementExited}}})
	}
	for i := range 50 {
		v.Put(market.JobRecord{ID: fmt.Sprintf("live-%d", i), Coordinator: "c", State: market.JobRunning, Version: 3,
			Placements: []market.Placement{{Share: 0, Epoch: 1, Node: "s", State: market.PlacementRunning}}})
	}
	b.Run("every-record", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for _, rec := range v.All() {
				if Settling(rec) {
					n++
				}
			}
			if n != 50 {
				b.Fatal(n)
			}
		}
	})
	b.Run("settling-index", func(b *testing.B) {
		for b.Loop() {
			if n := len(v.Settling()); n != 50 {
				b.Fatal(n)
			}
		}
	})
}
