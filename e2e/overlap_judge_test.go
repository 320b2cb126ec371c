//go:build unix

package e2e

import (
	"strings"
	"testing"
	"time"
)

// The judge of double runs flags a share whose two attempts were seen
// alive together for longer than the grace, and only that.
func TestOverlapsJudgeFlagsSharesRunTwice(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	alive := func(pairs ...string) map[string]map[uint64]bool {
		out := map[string]map[uint64]bool{}
		for _, p := range pairs {
			share, epoch, _ := strings.Cut(p, "@")
			if out[share] == nil {
				out[share] = map[uint64]bool{}
			}
			var e uint64
			for _, c := range epoch {
				e = e*10 + uint64(c-'0')
			}
			out[share][e] = true
		}
		return out
	}
	o := newOverlaps(time.Second)
	// j1/0: epochs 1 and 2 together for 300 ms (a fence): within grace.
	// j2/0: epochs 1 and 5 together for 1.5 s: a double run.
	// j3/0: one attempt at a time, handing over.
	samples := []map[string]map[uint64]bool{
		alive("j1/0@1", "j2/0@1", "j3/0@1"),
		alive("j1/0@1", "j1/0@2", "j2/0@1", "j2/0@5", "j3/0@1"),
		alive("j1/0@1", "j1/0@2", "j2/0@1", "j2/0@5", "j3/0@2"),
		alive("j1/0@1", "j1/0@2", "j2/0@1", "j2/0@5"),
		alive("j1/0@2", "j2/0@1", "j2/0@5"),
		alive("j1/0@2", "j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@1", "j2/0@5"),
		alive("j2/0@5"),
	}
	for i, s := range samples {
		o.sample(t0.Add(time.Duration(i)*100*time.Millisecond), s)
	}
	bad := o.violations(nil)
	if len(bad) != 1 || !strings.Contains(bad[0], "j2/0 epochs 1 and 5") || !strings.Contains(bad[0], "1.4s") {
		t.Errorf("flagged %v, want j2/0's epochs 1 and 5 together for 1.4s", bad)
	}
	if which, d := o.longestOverlap(); !strings.Contains(which, "j2/0") || d != 1400*time.Millisecond {
		t.Errorf("longest overlap %s %v, want j2/0 for 1.4s", which, d)
	}
	if bad := o.violations(func(job string) bool { return job == "j2" }); len(bad) != 0 {
		t.Errorf("with j2 excused, flagged %v", bad)
	}
}
