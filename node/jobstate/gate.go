package jobstate

import (
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Commits. What a coordinator decides about a job takes effect outside it
// only once every replica of the job's record holds the record that
// decided it: an award (which starts an attempt), a gang's Start, an
// attempt's EndAck (after which its runner stops reporting the end), and
// an execution the node starts for a job it coordinates itself. So a
// successor — which adopts the newest record among the holders it claims
// the job from (node/claim.go) — knows every attempt that may have started
// and every end a runner stopped reporting: it never places a share that
// runs, and never runs again a share or a job that ended.
//
// The messages about one attempt wait, in order, behind the first of them
// that waits: a Stop never overtakes the award it follows. Messages about
// a job's other attempts go on: a renewal ack to a running share must not
// wait for a new share's award to commit (its runner would fence). An
// award that the coordinator gave up on while it waited (its answer's time
// ran out, and the share went to a spare) is dropped when its record
// commits: the runner must not start it. Only that: the time an award may
// wait for its accept follows the supplier's answers (market/acceptwait.go)
// and is often longer than AwardTimeout, and an award dropped while its
// coordinator still waits for it times out for sure.

// Gate holds messages and executions until their job's record commits.
// Its methods are safe for concurrent use.
type Gate struct {
	mu        sync.Mutex
	committed map[string]Mark
	held      map[string][]heldMessage
	waiters   map[string][]waiter
}

type heldMessage struct {
	need  Mark
	msg   market.Message
	key   attemptOf
	since time.Time
}

// attemptOf is what orders a job's messages: their destination and share
// (-1 for a message about no one share).
type attemptOf struct {
	to    string
	share int
}

// attemptKeyOf is a message's ordering key.
func attemptKeyOf(m market.Message) attemptOf {
	share := -1
	switch p := m.Payload.(type) {
	case *market.Award:
		share = p.Share
	case *market.Start:
		share = p.Share
	case *market.Stop:
		share = p.Share
	case *market.RenewalAck:
		share = p.Share
	case *market.EndAck:
		share = p.Share
	}
	return attemptOf{m.To, share}
}

type waiter struct {
	need Mark
	ch   chan struct{}
}

// NewGate returns a gate that holds nothing and knows no commits.
func NewGate() *Gate {
	return &Gate{committed: map[string]Mark{}, held: map[string][]heldMessage{}, waiters: map[string][]waiter{}}
}

// Hold queues msg behind job's commit of need, and reports false when it
// may go now: the record is committed and no message of its attempt waits.
// now is when it was held (Stale counts from it).
func (g *Gate) Hold(job string, need Mark, msg market.Message, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := attemptKeyOf(msg)
	if !g.behindLocked(job, key) && g.committed[job].atLeast(need) {
		return false
	}
	g.held[job] = append(g.held[job], heldMessage{need, msg, key, now})
	return true
}

// Behind reports whether a message about msg's attempt waits: msg must
// wait too.
func (g *Gate) Behind(job string, msg market.Message) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.behindLocked(job, attemptKeyOf(msg))
}

func (g *Gate) behindLocked(job string, key attemptOf) bool {
	for _, h := range g.held[job] {
		if h.key == key {
			return true
		}
	}
	return false
}

// Await returns a channel closed once job's record reaches need.
func (g *Gate) Await(job string, need Mark) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	if g.committed[job].atLeast(need) {
		close(ch)
		return ch
	}
	g.waiters[job] = append(g.waiters[job], waiter{need, ch})
	return ch
}

// Unwait drops the waiter of job whose channel is ch: its caller stopped
// waiting (the node's replicateForAck: its time ran out).
func (g *Gate) Unwait(job string, ch <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keepWaitersLocked(job, func(w waiter) bool { return w.ch != ch })
}

// keepWaitersLocked keeps the waiters of job that keep accepts.
func (g *Gate) keepWaitersLocked(job string, keep func(waiter) bool) {
	ws := g.waiters[job][:0]
	for _, w := range g.waiters[job] {
		if keep(w) {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		delete(g.waiters, job)
	} else {
		g.waiters[job] = ws
	}
}

// Awaited reports whether a caller waits for job's record to commit.
func (g *Gate) Awaited(job string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiters[job]) > 0
}

// Commit records that every replica holds job's record at m, and returns
// the messages that may go now, in the order they were held: those
// committed, unless a message of their attempt before them still waits.
// An award that withdrawn reports given up on (nil: none is) is dropped,
// not returned; dropped counts them.
func (g *Gate) Commit(job string, m Mark, withdrawn func(*market.Award) bool) (out []market.Message, dropped int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m.atLeast(g.committed[job]) {
		g.committed[job] = m
	}
	c := g.committed[job]
	blocked := map[attemptOf]bool{}
	var keep []heldMessage
	for _, h := range g.held[job] {
		if blocked[h.key] || !c.atLeast(h.need) {
			blocked[h.key] = true
			keep = append(keep, h)
			continue
		}
		if a, award := h.msg.Payload.(*market.Award); award && withdrawn != nil && withdrawn(a) {
			dropped++
			continue
		}
		out = append(out, h.msg)
	}
	if len(keep) == 0 {
		delete(g.held, job)
	} else {
		g.held[job] = keep
	}
	g.keepWaitersLocked(job, func(w waiter) bool {
		if c.atLeast(w.need) {
			close(w.ch)
			return false
		}
		return true
	})
	return out, dropped
}

// Waiting lists the jobs that hold messages or executions.
func (g *Gate) Waiting() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for job := range g.held {
		out = append(out, job)
	}
	for job := range g.waiters {
		if _, ok := g.held[job]; !ok {
			out = append(out, job)
		}
	}
	return out
}

// Drop discards what job holds (its coordinator let it go, or its
// messages waited too long: Stale) and returns how many messages it
// dropped. Executions waiting on it stay waiting for a stop.
func (g *Gate) Drop(job string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.held[job])
	delete(g.held, job)
	return n
}

// Stale lists the jobs whose oldest held message waited since before
// cutoff.
func (g *Gate) Stale(cutoff time.Time) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for job, h := range g.held {
		if len(h) > 0 && h[0].since.Before(cutoff) {
			out = append(out, job)
		}
	}
	return out
}

// Forget drops job's commit mark once the job is gone from the node. It
// keeps the mark while job holds messages or waiters.
func (g *Gate) Forget(job string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.held[job]) == 0 && len(g.waiters[job]) == 0 {
		delete(g.committed, job)
	}
}

// Gated reports whether a message's effect must wait for its job's record
// to commit: it may start an attempt, or it tells a runner its end is
// recorded.
func Gated(p market.Payload) bool {
	switch p.(type) {
	case *market.Award, *market.Start, *market.EndAck:
		return true
	}
	return false
}
