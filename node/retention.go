package node

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/gpumesh/gpumesh/node/store"
)

// DefaultKeepJobs is Config.KeepJobs's default.
const DefaultKeepJobs = 72 * time.Hour

// jobsPruneInterval is how often the records of jobs that ended are
// swept.
const jobsPruneInterval = 10 * time.Minute

// What a node keeps of jobs that ended, and for how long: the records of
// jobs (below) and the directories of attempts (attemptsJanitor, at the
// end). The rules are the executor's (Tidy, Prune) and jobstate's
// (Expired, Forget, Tombstone); this file wires them to the node.

// A node holds the record of every job it coordinates or replicates; a
// record is kilobytes (spec, placements, explanation), and the audit, the
// API and memory all carried every job the node ever held. Once a job
// ended KeepJobs ago with nothing left live, each node that holds its
// record drops it on its own and keeps a tombstone (jobstate.Tombstone):
// the job's end, under its coordinator, term and version. Reads of the
// job (gpumesh job, a peer's audit or claim) find the end rebuilt from
// it; a copy of the job from before its end is refused; a submission of
// the same ID is refused with 409. Tombstones are kept for good.

// jobsJanitor drops the records of jobs that ended KeepJobs ago, when the
// node starts and every jobsPruneInterval, until the node closes.
func (n *Node) jobsJanitor() {
	defer n.wg.Done()
	t := time.NewTicker(jobsPruneInterval)
	defer t.Stop()
	now := time.Now()
	n.forgetEnded(now)
	for {
		select {
		case <-n.ctx.Done():
			return
		case now = <-t.C:
		}
		// Not at the start: the jobs submitted here are asked of their
		// coordinators, whom the mesh may not have found yet.
		n.forgetSubmitted(now.Add(-n.cfg.KeepJobs))
		n.forgetEnded(now)
	}
}

// forgetEnded drops the records of the jobs that ended before
// now-KeepJobs: from the market (on the driver, in the same turn as from
// the view, so that no submission of the same ID slips in between) and
// then from disk, where a tombstone replaces each. A crash before the
// write brings the records back, to be dropped again.
func (n *Node) forgetEnded(now time.Time) {
	before := now.Add(-n.cfg.KeepJobs)
	old := n.view.Expired(before)
	// In batches: a node upgraded with a long history has many to drop,
	// and the driver must not stop for all of them at once.
	for len(old) > 0 && n.ctx.Err() == nil {
		batch := old[:min(len(old), forgetPerTurn)]
		old = old[len(batch):]
		n.forgetBatch(batch, before, now)
	}
}

// forgetPerTurn is how many records forgetEnded drops in one driver turn
// and one write.
const forgetPerTurn = 1000

// forgetBatch drops old's records (forgetEnded).
func (n *Node) forgetBatch(old []market.JobRecord, before, now time.Time) {
	var gone []jobstate.Tombstone
	err := n.do(n.ctx, func() {
		for _, rec := range old {
			own, mine := n.mk.Job(rec.ID)
			if mine && jobstate.Settling(own) {
				continue
			}
			t, ok := n.view.Forget(rec.ID, before, now)
			if !ok {
				continue
			}
			if mine {
				if err := n.mk.Forget(rec.ID); err != nil {
					n.log.Warn("ended job not dropped from the market", "job", rec.ID, "err", err)
				}
			}
			n.gate.Forget(rec.ID)
			n.repl.Forget(rec.ID)
			gone = append(gone, t)
		}
	})
	if err != nil || len(gone) == 0 {
		return
	}
	ops := make([]store.Op, 0, 2*len(gone))
	for _, t := range gone {
		ops = append(ops, store.Delete(store.Jobs, t.ID), store.Put(store.Tombstones, t.ID, t))
	}
	if err := n.storeApply(ops); err != nil {
		n.log.Warn("records of ended jobs not dropped from the state file", "jobs", len(gone), "err", err)
		return
	}
	n.log.Info("dropped the records of jobs that ended long ago", "jobs", len(gone), "ended_before", before.Round(time.Second), "keep_jobs", n.cfg.KeepJobs)
}

// forgetSubmitted stops listing, as submitted through this node, the
// jobs submitted before before that other nodes coordinate and that have
// ended before it, or that no node knows any more (gpumesh jobs asks
// their coordinators for each). A job still running stays listed, however
// old; one whose coordinator does not answer is asked again next time.
func (n *Node) forgetSubmitted(before time.Time) {
	for _, id := range n.view.SubmittedBefore(before) {
		ctx, cancel := context.WithTimeout(n.ctx, callTimeout)
		rec, err := n.Job(ctx, id)
		cancel()
		switch {
		case n.ctx.Err() != nil:
			return
		case err == nil && jobstate.Ended(rec) && jobstate.EndedAt(rec).Before(before),
			isNotFound(err):
			n.view.Unsubmit(id)
		}
	}
}

// loadTombstones reads back the tombstones of the jobs whose records this
// node dropped, before the records themselves.
func (n *Node) loadTombstones() error {
	return n.store.ForEach(store.Tombstones, func(id string, raw []byte) error {
		var t jobstate.Tombstone
		if err := json.Unmarshal(raw, &t); err != nil || t.ID != id {
			n.log.Error("unreadable tombstone in the state file; skipped", "job", id, "err", err)
			return nil
		}
		n.view.PutTombstone(t)
		return nil
	})
}

// attemptsPruneInterval is how often the directories of ended attempts
// are swept: those older than the executor's KeepLogs go, logs and all.
const attemptsPruneInterval = 10 * time.Minute

// attemptsJanitor prunes the attempts' directories when the node starts
// (what its last run left) and every attemptsPruneInterval, until the
// node closes. An attempt's work directory goes as soon as its outputs
// are kept (runAttempt); its logs, which `gpumesh logs` reads, stay for
// KeepLogs.
func (n *Node) attemptsJanitor() {
	defer n.wg.Done()
	keep := n.exec.Config().KeepLogs
	t := time.NewTicker(attemptsPruneInterval)
	defer t.Stop()
	now := time.Now()
	for {
		removed, err := n.exec.Prune(now.Add(-keep))
		if removed > 0 {
			n.log.Info("removed the directories of attempts that ended long ago", "attempts", removed, "older_than", keep)
		}
		if err != nil {
			n.log.Warn("attempt directories not pruned", "err", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case now = <-t.C:
		}
	}
}
