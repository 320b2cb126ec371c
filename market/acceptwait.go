package market

import "time"

// Award timeouts that follow the suppliers' answers. A supplier accepts an
// award only once its write of the attempt is on its disk, so on a
// supplier whose disk is busy (many nodes syncing one disk, a slow cloud
// volume) every accept takes longer than a fixed AwardTimeout: every
// award timed out, its share went to a spare that timed out the same way,
// and a job under load was placed again and again under new epochs
// without ever running. The coordinator keeps, per supplier, a smoothed
// time from award to accept (late accepts included: they say how late
// the supplier is) and waits twice that, never less than AwardTimeout and
// never more than maxAwardWaitFactor times it.
//
// Two more answers set the wait, so that a coordinator need not lose an
// award to a supplier before it waits long enough for it:
//
//   - The supplier's bid in the round. A bid travels the path an accept
//     takes, less the disk write, so an accept is seldom faster: the award
//     waits at least twice the time the bid took. Under CPU load (20 node
//     processes on two cores) a bid took 300 ms and more, and a fixed
//     500 ms timed out a fifth of the awards; each such share started
//     twice, once on the spare and once, late, on the supplier that was
//     then told to stop: work that fed the load.
//   - Every supplier's accepts, smoothed together: the wait for a supplier
//     this coordinator has not heard accept yet. In a mesh of many
//     coordinators each one meets most suppliers for the first time.

// maxAwardWaitFactor bounds the award timeout at this many AwardTimeouts.
const maxAwardWaitFactor = 4

// maxAcceptTimes bounds the suppliers whose accept times are kept; past it
// the table starts again (a supplier then waits as the mesh-wide time says
// until it answers once more).
const maxAcceptTimes = 4096

// acceptTimes holds each supplier's smoothed award → accept time, and one
// smoothed over all of them.
type acceptTimes struct {
	by  map[string]time.Duration
	all time.Duration
}

// observe folds one award → accept time of node into its smoothed time and
// the mesh-wide one: a slower answer counts at once, a faster one an
// eighth at a time.
func (a *acceptTimes) observe(node string, d time.Duration) {
	if d < 0 {
		return
	}
	if a.by == nil || len(a.by) >= maxAcceptTimes {
		a.by = map[string]time.Duration{}
	}
	old, ok := a.by[node]
	a.by[node] = smooth(old, ok, d)
	a.all = smooth(a.all, true, d)
}

// smooth is the next smoothed time after old (none when !ok) and a new
// observation d.
func smooth(old time.Duration, ok bool, d time.Duration) time.Duration {
	if !ok || d > old {
		return d
	}
	return old - (old-d)/8
}

// timeout is how long an award to node waits for its accept, where the
// node's bid in the round took bid (0 when unknown, as for a bid to a
// broadcast).
func (a *acceptTimes) timeout(node string, base, bid time.Duration) time.Duration {
	known, ok := a.by[node]
	if !ok {
		known = a.all
	}
	return min(max(base, 2*known, 2*bid), maxAwardWaitFactor*base)
}
