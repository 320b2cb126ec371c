//go:build unix

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// overlapGrace is how long two attempts of one share may both have a
// process alive: the old attempt's runner fences it when its lease is no
// longer acknowledged (at the latest market.Config.LostAfter after the
// last ack, by the node or, when the node is frozen or dead, by its fence
// keeper), which is when the coordinator places the share again; a
// process killed then is gone within a few milliseconds, and the sampler
// sees the processes every 100 ms.
const overlapGrace = time.Second

// overlaps watches, from process-table samples, every share of every job
// for two attempts (epochs) alive at once, and reports each pair that
// stayed so for longer than the grace.
type overlaps struct {
	grace time.Duration
	// since is when each pair of attempts of a share was first seen
	// alive together, until a sample sees them apart.
	since map[pair]time.Time
	// longest is how long each pair was seen together.
	longest map[pair]time.Duration
}

// pair is two attempts of one share ("job/share"), epochs a < b.
type pair struct {
	share string
	a, b  uint64
}

func (p pair) String() string { return fmt.Sprintf("%s epochs %d and %d", p.share, p.a, p.b) }

// job is the pair's job ID.
func (p pair) job() string { j, _, _ := strings.Cut(p.share, "/"); return j }

func newOverlaps(grace time.Duration) *overlaps {
	return &overlaps{grace: grace, since: map[pair]time.Time{}, longest: map[pair]time.Duration{}}
}

// sample takes the attempts alive at at, by share ("job/share") and epoch.
func (o *overlaps) sample(at time.Time, alive map[string]map[uint64]bool) {
	seen := map[pair]bool{}
	for share, epochs := range alive {
		if len(epochs) < 2 {
			continue
		}
		es := make([]uint64, 0, len(epochs))
		for e := range epochs {
			es = append(es, e)
		}
		slices.Sort(es)
		for i := range es {
			for _, b := range es[i+1:] {
				key := pair{share, es[i], b}
				seen[key] = true
				if _, ok := o.since[key]; !ok {
					o.since[key] = at
				}
				o.longest[key] = max(o.longest[key], at.Sub(o.since[key]))
			}
		}
	}
	for key := range o.since {
		if !seen[key] {
			delete(o.since, key)
		}
	}
}

// violations lists the pairs that ran together beyond the grace, but
// those of the jobs skip names.
func (o *overlaps) violations(skip func(job string) bool) []string {
	var out []string
	for key, d := range o.longest {
		if d > o.grace && (skip == nil || !skip(key.job())) {
			out = append(out, fmt.Sprintf("share %s ran at once for at least %v (grace %v)", key, d.Round(time.Millisecond), o.grace))
		}
	}
	slices.Sort(out)
	return out
}

// longestOverlap is the longest time any two attempts of one share were
// seen alive together, and which.
func (o *overlaps) longestOverlap() (string, time.Duration) {
	var which string
	var d time.Duration
	for key, l := range o.longest {
		if k := key.String(); l > d || l == d && k < which {
			which, d = k, l
		}
	}
	return which, d
}
