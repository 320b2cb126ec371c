package market

import "time"

// Award timeouts that follow each supplier's answers. A supplier accepts
// an award only once its write of the attempt is on its disk, so on a
// supplier whose disk is busy (many nodes syncing one disk, a slow cloud
// volume) every accept takes longer than a fixed AwardTimeout: every
// award timed out, its share went to a spare that timed out the same way,
// and a job under load was placed again and again under new epochs
// without ever running. The coordinator keeps, per supplier, a smoothed
// time from award to accept (late accepts included: they say how late
// the supplier is) and waits twice that, never less than AwardTimeout and
// never more than maxAwardWaitFactor times it; a supplier that never
// answered keeps AwardTimeout.

// maxAwardWaitFactor bounds the award timeout at this many AwardTimeouts.
const maxAwardWaitFactor = 4

// maxAcceptTimes bounds the suppliers whose accept times are kept; past it
// the table starts again (a supplier then waits AwardTimeout until it
// answers once more).
const maxAcceptTimes = 4096

// acceptTimes holds each supplier's smoothed award → accept time.
type acceptTimes map[string]time.Duration

// observe folds one award → accept time of node into its smoothed time:
// a slower answer counts at once, a faster one an eighth at a time.
func (a *acceptTimes) observe(node string, d time.Duration) {
	if d < 0 {
		return
	}
	if *a == nil || len(*a) >= maxAcceptTimes {
		*a = acceptTimes{}
	}
	old, ok := (*a)[node]
	switch {
	case !ok || d > old:
		(*a)[node] = d
	default:
		(*a)[node] = old - (old-d)/8
	}
}

// timeout is how long an award to node waits for its accept.
func (a acceptTimes) timeout(node string, base time.Duration) time.Duration {
	return min(max(base, 2*a[node]), maxAwardWaitFactor*base)
}
