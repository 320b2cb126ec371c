package fence

import (
	"errors"
	"testing"
	"time"
)

func keys(as []armed) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.key)
	}
	return out
}

func TestTable(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tbl := newTable(3)

	if _, ok := tbl.next(); ok {
		t.Fatal("an empty table has a next deadline")
	}
	for _, a := range []struct {
		key string
		ms  int
	}{{"c", 300}, {"a", 100}, {"b", 200}} {
		if err := tbl.arm(a.key, target{pgid: 10}, at(a.ms)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tbl.arm("d", target{pgid: 10}, at(50)); !errors.Is(err, errTableFull) {
		t.Fatalf("a fourth key: %v, want errTableFull", err)
	}
	// Re-arming a held key is allowed when full, and moves it either way.
	if err := tbl.arm("a", target{pgid: 11, cgroup: "/cg"}, at(250)); err != nil {
		t.Fatal(err)
	}
	if err := tbl.arm("c", target{pgid: 10}, at(150)); err != nil {
		t.Fatal(err)
	}
	if d, _ := tbl.next(); !d.Equal(at(150)) {
		t.Fatalf("next: %v, want +150ms", d.Sub(t0))
	}
	if got := tbl.due(at(149)); len(got) != 0 {
		t.Fatalf("due before the first deadline: %v", keys(got))
	}
	got := tbl.due(at(250))
	if k := keys(got); len(k) != 3 || k[0] != "c" || k[1] != "b" || k[2] != "a" {
		t.Fatalf("due at +250ms: %v, want [c b a]", k)
	}
	if got[2].target != (target{pgid: 11, cgroup: "/cg"}) {
		t.Errorf("re-armed a kills %+v, want its new target", got[2].target)
	}
	if tbl.len() != 0 {
		t.Fatalf("%d keys left after all fell due", tbl.len())
	}

	tbl.arm("x", target{pgid: 10}, at(10))
	tbl.arm("y", target{pgid: 10}, at(20))
	if !tbl.disarm("x") || tbl.disarm("x") || tbl.disarm("never") {
		t.Error("disarm reports wrongly whether the key was armed")
	}
	if k := keys(tbl.due(at(1000))); len(k) != 1 || k[0] != "y" {
		t.Fatalf("due after disarming x: %v, want [y]", k)
	}

	tbl.arm("p", target{pgid: 10}, at(30))
	tbl.arm("q", target{pgid: 10}, at(20))
	if k := keys(tbl.drain()); len(k) != 2 || k[0] != "q" || k[1] != "p" {
		t.Fatalf("drain: %v, want [q p]", k)
	}
	if _, ok := tbl.next(); ok || tbl.len() != 0 {
		t.Fatal("a drained table is not empty")
	}
}
