package metrics

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// CardWarnings returns a warning for each of cards that is unhealthy, for
// api.Status.Warnings.
func CardWarnings(cards []api.Card) []string {
	var out []string
	for _, c := range cards {
		if c.Healthy {
			continue
		}
		w := fmt.Sprintf("card %s (%s) unhealthy", c.ID, c.Model)
		if c.Health.Reason != "" {
			w += ": " + c.Health.Reason
		}
		out = append(out, w+"; it is withdrawn from the mesh")
	}
	return out
}

// Flaps notices members that change state often (alive → suspect → alive
// ...): a peer on a bad link or a machine that keeps rebooting, which the
// auction then keeps choosing and losing. Time is passed in. It is not safe
// for concurrent use; the node's driver owns it.
//
// It tracks at most maxPeers peers; when more change state, those quiet the
// longest are forgotten first.
type Flaps struct {
	window    time.Duration
	threshold int
	maxPeers  int
	changes   map[string][]time.Time // peer → its state changes in the window
}

// NewFlaps returns a Flaps that calls a peer flapping after threshold state
// changes within window (the node's default: 6 in 10 minutes). It panics
// if window or threshold is not positive.
func NewFlaps(window time.Duration, threshold int) *Flaps {
	if window <= 0 || threshold <= 0 {
		panic("metrics: NewFlaps needs a positive window and threshold")
	}
	return &Flaps{window: window, threshold: threshold, maxPeers: 4096, changes: map[string][]time.Time{}}
}

// Changed records that peer changed state at at.
func (f *Flaps) Changed(peer string, at time.Time) {
	ts := f.prune(f.changes[peer], at)
	if len(ts) >= 4*f.threshold { // enough to call it flapping; keep memory bounded
		ts = ts[1:]
	}
	if _, known := f.changes[peer]; !known && len(f.changes) >= f.maxPeers {
		f.forgetQuietest()
	}
	f.changes[peer] = append(ts, at)
}

func (f *Flaps) prune(ts []time.Time, now time.Time) []time.Time {
	cut := 0
	for cut < len(ts) && !ts[cut].After(now.Add(-f.window)) {
		cut++
	}
	return ts[cut:]
}

func (f *Flaps) forgetQuietest() {
	var quiet string
	var last time.Time
	for p, ts := range f.changes {
		if t := ts[len(ts)-1]; quiet == "" || t.Before(last) {
			quiet, last = p, t
		}
	}
	delete(f.changes, quiet)
}

// Warnings returns a warning for each peer flapping at now, sorted by peer,
// and forgets peers that have been quiet for a whole window.
func (f *Flaps) Warnings(now time.Time) []string {
	var peers []string
	for p, ts := range f.changes {
		ts = f.prune(ts, now)
		if len(ts) == 0 {
			delete(f.changes, p)
			continue
		}
		f.changes[p] = ts
		if len(ts) >= f.threshold {
			peers = append(peers, p)
		}
	}
	slices.Sort(peers)
	out := make([]string, len(peers))
	for i, p := range peers {
		n := fmt.Sprint(len(f.changes[p]))
		if len(f.changes[p]) >= 4*f.threshold {
			n += " or more" // Changed keeps no more
		}
		out[i] = fmt.Sprintf("peer %s flapping: %s state changes in the last %v", p, n, f.window)
	}
	return out
}
