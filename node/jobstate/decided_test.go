package jobstate

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// What the driver decided of its own coordination is judged against until
// it is written: an adoption at a higher term refuses an outranked
// coordinator's replica even before it is on disk.
func TestDecidedHoldsOwnRecordsUntilWritten(t *testing.T) {
	d := NewDecided()
	self := "12D3KooWself"
	mine := market.JobRecord{ID: "j1", Coordinator: self, Term: 3, Version: 5}
	d.Note(self, mine)
	if got, ok := d.Own("j1"); !ok || got.Term != 3 || got.Version != 5 {
		t.Fatalf("decided, not written: %+v %v", got, ok)
	}
	// An older version written (a turn before) leaves the newer decision.
	d.Written(market.JobRecord{ID: "j1", Coordinator: self, Term: 3, Version: 4})
	if _, ok := d.Own("j1"); !ok {
		t.Fatalf("an older write dropped the newer decision")
	}
	d.Written(mine)
	if _, ok := d.Own("j1"); ok {
		t.Fatalf("still held once written")
	}
	// A job this node lets go (moved, or another coordinator's record)
	// is no longer its own.
	d.Note(self, mine)
	d.Note(self, market.JobRecord{ID: "j1", Coordinator: "12D3KooWother", Term: 4, Version: 1})
	if _, ok := d.Own("j1"); ok {
		t.Fatalf("a job yielded to another is still held as this node's")
	}
	d.Note(self, mine)
	d.Note(self, market.JobRecord{ID: "j1", Coordinator: self, Term: 3, Version: 6, State: market.JobMoved})
	if _, ok := d.Own("j1"); ok {
		t.Fatalf("a moved job is still held as this node's")
	}
}
