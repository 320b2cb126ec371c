package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Commits. What a coordinator decides about a job takes effect outside it
// only once every replica of the job's record holds the record that
// decided it: an award (which starts an attempt), a gang's Start, an
// attempt's EndAck (after which its runner stops reporting the end), and
// an execution this node starts for a job it coordinates itself. So a
// successor — which adopts the newest record among the holders it claims
// the job from (claim.go) — knows every attempt that may have started and
// every end a runner stopped reporting: it never places a share that
// runs, and never runs again a share or a job that ended.
//
// The messages about one attempt wait, in order, behind the first of them
// that waits: a Stop never overtakes the award it follows. Messages about
// a job's other attempts go on: a renewal ack to a running share must not
// wait for a new share's award to commit (its runner would fence). An
// award that waited longer than the market's AwardTimeout is dropped when
// its record commits: the coordinator has given the share to a spare
// meanwhile, and the runner must not start it.

// mark orders the records one coordinator makes of a job: by term, then
// version.
type mark struct{ term, version uint64 }

func markOf(rec market.JobRecord) mark { return mark{rec.Term, rec.Version} }

func (m mark) atLeast(o mark) bool {
	return m.term > o.term || m.term == o.term && m.version >= o.version
}

// heldTTL bounds how long a message waits for its record's commit: a
// coordinator that cannot reach its replicas for that long has lost the
// job to a successor, or will.
const heldTTL = 30 * time.Second

// gate holds messages and executions until their job's record commits.
// Its methods are safe for concurrent use.
type gate struct {
	mu        sync.Mutex
	committed map[string]mark
	held      map[string][]heldMessage
	waiters   map[string][]waiter
}

type heldMessage struct {
	need  mark
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
	need mark
	ch   chan struct{}
}

func newGate() *gate {
	return &gate{committed: map[string]mark{}, held: map[string][]heldMessage{}, waiters: map[string][]waiter{}}
}

// hold queues msg behind job's commit of need, and reports false when it
// may go now: the record is committed and no message of its attempt waits.
func (g *gate) hold(job string, need mark, msg market.Message, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := attemptKeyOf(msg)
	if !g.behindLocked(job, key) && g.committed[job].atLeast(need) {
		return false
	}
	g.held[job] = append(g.held[job], heldMessage{need, msg, key, now})
	return true
}

// behind reports whether a message about msg's attempt waits: msg must
// wait too.
func (g *gate) behind(job string, msg market.Message) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.behindLocked(job, attemptKeyOf(msg))
}

func (g *gate) behindLocked(job string, key attemptOf) bool {
	for _, h := range g.held[job] {
		if h.key == key {
			return true
		}
	}
	return false
}

// await returns a channel closed once job's record reaches need.
func (g *gate) await(job string, need mark) <-chan struct{} {
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

// unwait drops the waiter of job whose channel is ch: its caller stopped
// waiting (replicateForAck's time ran out).
func (g *gate) unwait(job string, ch <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keepWaitersLocked(job, func(w waiter) bool { return w.ch != ch })
}

// keepWaitersLocked keeps the waiters of job that keep accepts.
func (g *gate) keepWaitersLocked(job string, keep func(waiter) bool) {
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

// awaited reports whether a caller waits for job's record to commit.
func (g *gate) awaited(job string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiters[job]) > 0
}

// commit records that every replica holds job's record at m, and returns
// the messages that may go now, in the order they were held: those
// committed, unless a message of their attempt before them still waits.
// An award held longer than staleAward is dropped, not returned.
func (g *gate) commit(job string, m mark, now time.Time, staleAward time.Duration) (out []market.Message, dropped int) {
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
		if _, award := h.msg.Payload.(*market.Award); award && staleAward > 0 && now.Sub(h.since) > staleAward {
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

// waiting lists the jobs that hold messages or executions.
func (g *gate) waiting() []string {
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

// drop discards what job holds (its coordinator let it go, or its
// messages waited longer than heldTTL) and returns how many messages it
// dropped. Executions waiting on it stay waiting for a stop.
func (g *gate) drop(job string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.held[job])
	delete(g.held, job)
	return n
}

// stale lists the jobs whose oldest held message waited since before
// cutoff.
func (g *gate) stale(cutoff time.Time) []string {
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

// forget drops job's commit mark once the job is gone from this node.
func (g *gate) forget(job string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.held[job]) == 0 && len(g.waiters[job]) == 0 {
		delete(g.committed, job)
	}
}

// gated reports whether a message's effect must wait for its job's record
// to commit: it may start an attempt, or it tells a runner its end is
// recorded.
func gated(p market.Payload) bool {
	switch p.(type) {
	case *market.Award, *market.Start, *market.EndAck:
		return true
	}
	return false
}

// sendCommitted sends msgs, holding those that must wait for their job's
// record to reach every replica (and those of the same job behind them).
// It runs on the driver, after persist. The probe requests are taken out
// here on the driver (they read its state), before a message is held, and
// the receipts and countersignatures were attached when the turn decided
// the message (drain): what committed sends later, from the replication
// goroutines, is ready to go.
func (n *Node) sendCommitted(msgs []market.Message) {
	n.send(n.gateOut(n.probesOut(msgs), time.Now()))
}

// gateOut returns the messages of msgs that may go now, and holds the
// others (sendCommitted). A decision that takes effect outside (gated) of
// a job whose record this node holds from another coordinator is dropped:
// a replica holder answered that a coordinator outranking this one holds
// the job (onSuperseding), after the turn that decided it. Sent, an award
// would start a share that the job's replicas never heard of, beside the
// one that coordinator runs (soak seed 1796599946222083395: a coordinator
// frozen past its successor's takeover awarded the share again as it
// resumed, and the award left ungated).
func (n *Node) gateOut(msgs []market.Message, now time.Time) []market.Message {
	out := msgs[:0:0]
	for _, m := range msgs {
		job := m.Payload.JobID()
		if g := gated(m.Payload); g || n.gate.behind(job, m) {
			need, wait, superseded := n.commitNeeded(job)
			if superseded && g {
				n.log.Info("a decision of a job this node no longer coordinates dropped", "job", job, "to", m.To, "kind", fmt.Sprintf("%T", m.Payload))
				continue
			}
			if wait && n.gate.hold(job, need, m, now) {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// commitNeeded returns the record of job that this node coordinates and
// that must reach the job's replicas before a decision of it takes effect
// (wait); wait is false when this node does not coordinate the job or it
// has no replicas. superseded reports that the record this node holds of
// the job is another coordinator's: what this node decided of it as its
// coordinator must not take effect at all.
func (n *Node) commitNeeded(job string) (need mark, wait, superseded bool) {
	rec, ok := n.view.job(job)
	switch {
	case !ok:
		return mark{}, false, false
	case rec.Coordinator != n.id.String():
		return mark{}, false, true
	case len(n.replicaTargets(job)) == 0:
		return mark{}, false, false
	}
	return markOf(rec), true, false
}

// committed notes that every replica acknowledged rec, and sends what
// waited for it.
func (n *Node) committed(rec market.JobRecord) {
	msgs, dropped := n.gate.commit(rec.ID, markOf(rec), time.Now(), n.awardTimeout)
	if len(msgs) > 0 {
		n.send(msgs)
	}
	if dropped > 0 {
		n.log.Debug("awards that waited past the award timeout for the job's replicas dropped", "job", rec.ID, "count", dropped)
	}
	if !settling(rec) {
		n.gate.forget(rec.ID) // the job is over here: nothing more to gate
		n.repl.forget(rec.ID)
	}
}

// dropStaleHeld discards the messages that waited for a commit longer than
// heldTTL: the coordinator could not reach its job's replicas, so a
// successor may hold the job (the market re-sends what still matters).
func (n *Node) dropStaleHeld(now time.Time) {
	for _, job := range n.gate.stale(now.Add(-heldTTL)) {
		if k := n.gate.drop(job); k > 0 {
			n.log.Warn("messages waited too long for the job's replicas; dropped", "job", job, "count", k)
		}
	}
}
