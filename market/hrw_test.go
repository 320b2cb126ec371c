package market

import (
	"fmt"
	"slices"
	"testing"
)

func TestCoordinators(t *testing.T) {
	members := []string{"a", "b", "c", "d", "e"}
	got := Coordinators("j1", members, 3)
	if len(got) != 3 {
		t.Fatalf("Coordinators = %v", got)
	}
	shuffled := []string{"e", "c", "a", "d", "b", "c"}
	if again := Coordinators("j1", shuffled, 3); !slices.Equal(again, got) {
		t.Fatalf("order or duplicates of members change the answer: %v vs %v", again, got)
	}
	if all := Coordinators("j1", members, 99); len(all) != 5 || !slices.Equal(all[:3], got) {
		t.Fatalf("r beyond members: %v", all)
	}
	if Coordinators("j1", members, 0) != nil || Coordinators("j1", nil, 3) != nil {
		t.Fatal("r=0 or no members must give nil")
	}
	// Pinned values: the weight function is part of the protocol (every
	// node must compute the same coordinator), so it must not drift.
	if top := Coordinators("j1", members, 1)[0]; top != pinnedTop {
		t.Fatalf("coordinator of j1 is %s; the hash changed (was %s)", top, pinnedTop)
	}
}

const pinnedTop = "d"

func TestCoordinatorsSpreadAndStability(t *testing.T) {
	var members []string
	for i := 0; i < 20; i++ {
		members = append(members, fmt.Sprintf("12D3KooWnode%02d", i))
	}
	count := map[string]int{}
	const jobs = 20000
	before := map[string]string{}
	for i := 0; i < jobs; i++ {
		id := fmt.Sprintf("job-%d", i)
		top := Coordinators(id, members, 1)[0]
		count[top]++
		before[id] = top
	}
	for m, n := range count {
		if n < jobs/20*7/10 || n > jobs/20*13/10 {
			t.Errorf("member %s coordinates %d of %d jobs; want about %d", m, n, jobs, jobs/20)
		}
	}
	// Removing one member moves only the jobs it coordinated.
	gone := members[7]
	rest := slices.Delete(slices.Clone(members), 7, 8)
	for id, top := range before {
		now := Coordinators(id, rest, 1)[0]
		if top != gone && now != top {
			t.Fatalf("job %s moved from %s to %s though %s left", id, top, now, gone)
		}
	}
}
