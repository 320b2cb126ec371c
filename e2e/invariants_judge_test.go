//go:build unix

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// The judge of resumed step counters flags exactly the resumes that no
// checkpoint could explain.
func TestCheckResumesJudgesWhereAttemptsResumed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	term2 := uint64(market.EpochsPerTerm + 417*market.EpochsPerSlot) // a successor's slot at term 2
	type a struct {
		epoch    uint64
		from, at int
	}
	marks := func(as ...a) map[[2]uint64]marker {
		out := map[[2]uint64]marker{}
		for i, x := range as {
			out[[2]uint64{0, x.epoch}] = marker{started: t0.Add(time.Duration(i) * time.Second), from: x.from, at: x.at, hasFrom: true}
		}
		return out
	}
	for _, c := range []struct {
		name  string
		marks map[[2]uint64]marker
		want  string // "" for no violation
	}{
		{"continuous", marks(a{1, 0, 12}, a{2, 10, 25}, a{3, 24, 30}), ""},
		{"lost progress after a takeover: a replica lagged", marks(a{1, 0, 12}, a{2, 10, 25}, a{term2 + 1, 10, 30}), ""},
		{"a first attempt that resumes", marks(a{1, 3, 12}), "resumed from step 3, but the attempts before it reached at most step 0"},
		{"progress no attempt made", marks(a{1, 0, 12}, a{2, 13, 20}), "epoch 2 resumed from step 13, but the attempts before it reached at most step 12"},
		{"one coordinator's checkpoint goes back", marks(a{1, 0, 12}, a{2, 10, 15}, a{3, 0, 30}), "epoch 3 resumed from step 0, but epoch 2 of the same coordinator and term had resumed from step 10"},
	} {
		bad := checkResumes("j", c.marks)
		switch {
		case c.want == "" && len(bad) > 0:
			t.Errorf("%s: flagged %v", c.name, bad)
		case c.want != "" && (len(bad) != 1 || !strings.Contains(bad[0], c.want)):
			t.Errorf("%s: flagged %v, want one saying %q", c.name, bad, c.want)
		}
	}
}
