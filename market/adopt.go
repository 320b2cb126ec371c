package market

import (
	"fmt"
	"slices"
)

// adopt makes this node the coordinator of a job from its record (a
// replica, or this node's own record after a restart) under a term above
// the record's. Its live attempts are taken over: each runner is told the
// new term (a RenewalAck), which re-targets its renewals here; they must
// renew within LostAfter or be placed again. An award the old coordinator
// left unanswered is withdrawn. Whatever the record shows missing is
// placed by a new round, under epochs of this term's range.
func (c *coordinator) adopt(rec JobRecord, term uint64) error {
	if err := rec.Spec.Validate(c.n.cat); err != nil {
		return err
	}
	if rec.ID != rec.Spec.ID || rec.Cards < 1 || rec.Cards > MaxCards*MaxReplicas {
		return fmt.Errorf("%w: record %q of spec %q with %d cards", ErrBadEvent, rec.ID, rec.Spec.ID, rec.Cards)
	}
	if err := c.checkSigned(rec.Spec, rec.Signature); err != nil {
		return err
	}
	term = max(term, rec.Term+1)
	top := rec.Epoch
	for _, pl := range rec.Placements {
		top = max(top, pl.Epoch)
	}
	if top >= firstEpoch(term+1, "") {
		return fmt.Errorf("%w: job %s has issued epoch %d, beyond term %d's range", ErrBadEvent, rec.ID, top, term)
	}
	if old := c.jobs[rec.ID]; old != nil {
		if old.term >= term {
			return fmt.Errorf("%w: job %s is coordinated here at term %d already", ErrStale, rec.ID, old.term)
		}
		c.cancelRound(old)
	}
	j := c.newJob(rec.Spec)
	j.sig = rec.Signature
	j.term, j.epoch, j.target = term, rec.Epoch, rec.Cards
	j.state, j.reason, j.exitCode, j.restarts = rec.State, rec.Reason, rec.ExitCode, rec.Restarts
	j.submittedAt, j.runningAt, j.endedAt = rec.SubmittedAt, rec.RunningAt, rec.EndedAt
	j.cardSeconds, j.cost, j.priceCU, j.explain = rec.CardSeconds, rec.CostCNY, rec.ClearingPriceCU, rec.Explanation
	j.everRan = !rec.RunningAt.IsZero()
	for _, cp := range rec.Checkpoints {
		if cp.Validate() == nil {
			cp.Holders = slices.Clone(cp.Holders)
			j.checkpoints = append(j.checkpoints, cp)
		}
	}
	c.jobs[rec.ID] = j
	c.active[rec.ID] = j
	done := map[int]bool{} // shares that exited 0 (batch): not placed again
	for _, pl := range rec.Placements {
		p := &placement{Placement: pl, lastHeard: c.n.now}
		p.Cards = append([]string(nil), pl.Cards...)
		j.placements = append(j.placements, p)
		j.byAttempt[shareEpoch{p.Share, p.Epoch}] = p
		j.nextShare = max(j.nextShare, p.Share+1)
		j.epoch = max(j.epoch, p.Epoch)
		switch {
		case p.State == PlacementExited && p.ExitCode != nil && *p.ExitCode == 0:
			done[p.Share] = true
		case p.State == PlacementAwarded:
			c.settle(j, p, PlacementRejected, "", "the coordinator changed before the award was answered")
			c.n.send(p.Node, &Stop{Job: j.spec.ID, Term: term, Share: p.Share, Epoch: p.Epoch, Reason: p.Reason})
		case p.State.live():
			j.live[p.Share] = p
			if p.State == PlacementAccepted || p.State == PlacementRunning {
				c.n.send(p.Node, &RenewalAck{Job: j.spec.ID, Term: term, Share: p.Share, Epoch: p.Epoch})
			} else {
				c.n.send(p.Node, &Stop{Job: j.spec.ID, Term: term, Share: p.Share, Epoch: p.Epoch, Reason: p.Reason})
			}
		}
	}
	c.touch(j)
	if j.state.Terminal() {
		return nil
	}
	c.findMissing(j, done)
	switch {
	case j.twoPhase() && len(j.needSlots) > 0 && len(j.live) > 0:
		c.replace(j, nil) // a gang short of a member starts over whole
	case j.twoPhase():
		c.startGang(j) // members that committed but never got their Start
	}
	c.startRound(j)
	c.refresh(j)
	return nil
}

// findMissing sets the needs of an adopted job: what its target lacks
// beyond its live attempts and the batch shares that are done.
func (c *coordinator) findMissing(j *job, done map[int]bool) {
	batch := j.spec.KindOrDefault() != KindService
	if j.flexible() {
		held := 0
		for _, p := range j.live {
			held += len(p.Cards)
		}
		for _, p := range j.placements {
			if batch && done[p.Share] && p.State == PlacementExited {
				held += len(p.Cards)
			}
		}
		j.needCards = max(0, j.target-held)
		return
	}
	for s := 0; s < j.target/j.perSlot(); s++ {
		if j.live[s] == nil && !(batch && done[s]) {
			j.needSlots = append(j.needSlots, s)
		}
	}
}

// onSuperseded lets a job go when a runner reports a coordinator of a
// higher term: everything this node still holds for the job is stopped
// (runners that follow the new coordinator ignore that, being of the
// higher term, and so does this node's own runner, which follows it from
// now on; attempts this node placed alone stop) and the job leaves this
// node's books with a last record in state JobMoved.
func (c *coordinator) onSuperseded(from string, m *Superseded) error {
	j := c.jobs[m.Job]
	if j == nil || !Outranks(m.Term, m.Coordinator, j.term, c.n.cfg.ID) {
		return fmt.Errorf("%w: superseded at term %d", ErrStale, m.Term)
	}
	// An attempt of the job on this very node follows the coordinator of
	// the higher term instead of stopping: that coordinator acks its
	// renewals if it holds it live, and stops it if not. Stopping it here
	// would move a share whenever this node went silent for a moment —
	// frozen for a second or two, which memberlist takes for a death and a
	// successor for a reason to adopt — while the share ran on.
	for _, p := range j.liveSorted() {
		if p.Node == c.n.cfg.ID {
			c.n.sup.follow(m.Job, p.Share, p.Epoch, m.Term, m.Coordinator)
		}
	}
	c.abandon(j, fmt.Sprintf("coordinated by %s at term %d now", m.Coordinator, m.Term))
	for _, p := range j.liveSorted() {
		c.settle(j, p, PlacementStopped, CauseStopped, "")
	}
	j.movedTo, j.movedTerm = m.Coordinator, m.Term
	c.setState(j, JobMoved, fmt.Sprintf("coordinated by %s at term %d now", m.Coordinator, m.Term))
	delete(c.jobs, m.Job)
	delete(c.active, m.Job)
	return nil
}
