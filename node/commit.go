package node

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/jobstate"
)

// Commits. What a coordinator decides about a job takes effect outside it
// only once every replica of the job's record holds the record that
// decided it; until then jobstate.Gate holds it (node/jobstate/gate.go
// says why, and in what order it lets messages go). This file wires the
// gate: what the driver sends goes through it, and what the replicate
// loop commits leaves it.

// heldTTL bounds how long a message waits for its record's commit: a
// coordinator that cannot reach its replicas for that long has lost the
// job to a successor, or will. It is the market's MaxAwardHold, the
// longest a coordinator waits for an award it was told is held.
const heldTTL = market.MaxAwardHold

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
		if g := jobstate.Gated(m.Payload); g || n.gate.Behind(job, m) {
			need, wait, superseded := n.commitNeeded(job)
			if superseded && g {
				n.log.Info("a decision of a job this node no longer coordinates dropped", "job", job, "to", m.To, "kind", fmt.Sprintf("%T", m.Payload))
				continue
			}
			if wait && n.gate.Hold(job, need, m, now) {
				n.noteAward(m, true)
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
func (n *Node) commitNeeded(job string) (need jobstate.Mark, wait, superseded bool) {
	rec, ok := n.view.Job(job)
	switch {
	case !ok:
		return jobstate.Mark{}, false, false
	case rec.Coordinator != n.self:
		return jobstate.Mark{}, false, true
	case len(n.replicaTargets(job)) == 0:
		return jobstate.Mark{}, false, false
	}
	return jobstate.MarkOf(rec), true, false
}

// committed notes that every replica acknowledged rec, and sends what
// waited for it.
func (n *Node) committed(rec market.JobRecord) {
	msgs, dropped := n.gate.Commit(rec.ID, jobstate.MarkOf(rec), n.awardWithdrawn)
	if len(msgs) > 0 {
		n.send(msgs)
		for _, m := range msgs {
			n.noteAward(m, false)
		}
	}
	if dropped > 0 {
		n.log.Debug("awards given up on while they waited for the job's replicas dropped", "job", rec.ID, "count", dropped)
	}
	if !jobstate.Settling(rec) {
		n.gate.Forget(rec.ID) // the job is over here: nothing more to gate
		n.repl.Forget(rec.ID)
	}
}

// noteAward tells the market that m, if an award, is held for its
// record's commit (held) or has left after it: its time for an answer
// counts from when it left (market.AwardHeld). The news goes to the
// driver if it has room; without it, the award's time counts from when
// it was made, as the market alone knows.
func (n *Node) noteAward(m market.Message, held bool) {
	a, ok := m.Payload.(*market.Award)
	if !ok {
		return
	}
	job, share, epoch := a.Job, a.Share, a.Epoch
	n.post(func() {
		if held {
			n.step(market.AwardHeld{Now: time.Now(), Job: job, Share: share, Epoch: epoch})
		} else {
			n.step(market.AwardSent{Now: time.Now(), Job: job, Share: share, Epoch: epoch})
		}
	})
}

// awardWithdrawn reports whether the coordinator has given up on award a:
// the record it last persisted shows a's attempt no longer awarded (its
// answer's time ran out, or the job ended), or not at all.
func (n *Node) awardWithdrawn(a *market.Award) bool {
	rec, ok := n.view.Job(a.Job)
	if !ok {
		return true
	}
	for _, p := range rec.Placements {
		if p.Share == a.Share && p.Epoch == a.Epoch {
			return p.State != market.PlacementAwarded
		}
	}
	return true
}

// dropStaleHeld discards the messages that waited for a commit longer than
// heldTTL: the coordinator could not reach its job's replicas, so a
// successor may hold the job (the market re-sends what still matters).
func (n *Node) dropStaleHeld(now time.Time) {
	for _, job := range n.gate.Stale(now.Add(-heldTTL)) {
		if k := n.gate.Drop(job); k > 0 {
			n.log.Warn("messages waited too long for the job's replicas; dropped", "job", job, "count", k)
		}
	}
}
