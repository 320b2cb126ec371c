package market

import "testing"

func TestEpochsOfATermStayInItsRange(t *testing.T) {
	for _, term := range []uint64{1, 2, 3, 17, 1 << 20} {
		j := &job{term: term}
		first := j.nextEpoch("12D3KooWcoordinator")
		if got := EpochTerm(first); got != term {
			t.Errorf("term %d: first epoch %d reads as term %d", term, first, got)
		}
		if term > 1 && first <= EpochsPerTerm*(term-1) || first > EpochsPerTerm*term {
			t.Errorf("term %d: first epoch %d inside term %d's range", term, first, term-1)
		}
		// An adopted record's epochs go on rising within the term.
		j.epoch = first + 41
		if next := j.nextEpoch("12D3KooWcoordinator"); next != first+42 || EpochTerm(next) != term {
			t.Errorf("term %d: after %d came %d", term, first+41, next)
		}
	}
}

func TestOutranksIsAStrictOrder(t *testing.T) {
	cases := []struct {
		t1     uint64
		c1     string
		t2     uint64
		c2     string
		want12 bool
	}{
		{2, "a", 1, "z", true},  // the higher term wins
		{1, "z", 2, "a", false}, //
		{3, "b", 3, "a", true},  // at equal terms, the greater peer ID
		{3, "a", 3, "b", false},
		{3, "a", 3, "a", false}, // never itself
	}
	for _, c := range cases {
		if got := Outranks(c.t1, c.c1, c.t2, c.c2); got != c.want12 {
			t.Errorf("Outranks(%d %s, %d %s) = %v", c.t1, c.c1, c.t2, c.c2, got)
		}
		if c.t1 != c.t2 || c.c1 != c.c2 {
			if Outranks(c.t1, c.c1, c.t2, c.c2) == Outranks(c.t2, c.c2, c.t1, c.c1) {
				t.Errorf("(%d %s) and (%d %s): exactly one must outrank the other", c.t1, c.c1, c.t2, c.c2)
			}
		}
	}
}

func TestCoordinatorsOfOneTermDrawDifferentSlots(t *testing.T) {
	a, b := &job{term: 3}, &job{term: 3}
	ea, eb := a.nextEpoch("12D3KooWA2qnifuMvHiUQUgVMWSHgC5QBbKXUbGr8bgkGVM6paGV"), b.nextEpoch("12D3KooW9r13cLvARFexYFt2HXBxsndWx9yPcwTnDm2HuwEBGgvT")
	if ea == eb || EpochTerm(ea) != 3 || EpochTerm(eb) != 3 {
		t.Fatalf("two coordinators of term 3 issued %d and %d", ea, eb)
	}
}
