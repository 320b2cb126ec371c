package market

import (
	"fmt"
	"slices"
	"time"
)

// The coordinator's side of running attempts: lease renewals carry usage
// (billing), their silence declares a share lost, and only the current
// epoch of a share is believed (fencing).

func (c *coordinator) onRenewal(from string, m *Renewal) error {
	j := c.jobs[m.Job]
	if j == nil {
		// Perhaps a successor that has not got the record yet: stay silent
		// and let the runner fence itself if nobody answers.
		return fmt.Errorf("%w: renewal for %s", ErrUnknownJob, m.Job)
	}
	if m.Term > j.term {
		return fmt.Errorf("%w: renewal of term %d, this coordinator has term %d", ErrStale, m.Term, j.term)
	}
	stop := func(why string) error {
		c.n.send(from, &Stop{Job: m.Job, Term: j.term, Share: m.Share, Epoch: m.Epoch, Reason: why})
		return fmt.Errorf("%w: renewal for %s share %d epoch %d: %s", ErrStale, m.Job, m.Share, m.Epoch, why)
	}
	p := j.byAttempt[shareEpoch{m.Share, m.Epoch}]
	if p == nil || p.Node != from {
		return stop("not a current attempt of the job")
	}
	if p.State == PlacementAwarded {
		c.accepted(j, p) // its Accept was lost: the renewal says the same
	}
	switch p.State {
	case PlacementAccepted, PlacementRunning:
	case PlacementStopping:
		c.billReceipt(j, p, m.CardSeconds, m.Receipt)
		return stop(p.Reason)
	default:
		return stop(fmt.Sprintf("the attempt is %s", p.State))
	}
	if p.watched {
		c.track.ran(from, min(c.n.now.Sub(p.lastHeard), c.n.cfg.LostAfter))
	}
	p.watched = true
	p.lastHeard, p.suspectSince = c.n.now, time.Time{}
	c.billReceipt(j, p, m.CardSeconds, m.Receipt)
	if m.Started && p.StartedAt.IsZero() {
		p.StartedAt = c.n.now
		c.touch(j)
		if j.spec.Service == nil {
			c.replaced(j, p) // a replica it replaces stops once its process runs
		}
	}
	c.onReadyRenewal(j, p, m.Ready) // or, for a service with a port, once it is ready
	if p.State == PlacementRunning && !m.Started && p.gang != nil {
		c.sendStart(j, p) // the Start was lost
	}
	c.n.send(from, &RenewalAck{Job: m.Job, Term: j.term, Share: m.Share, Epoch: m.Epoch})
	return nil
}

// usageSlack is how much more usage than the coordinator's own clock allows
// a runner may report (the two clocks differ; reports travel).
const usageSlack = time.Minute

// billReceipt bills usage reported with receipt: all of it, or, with
// Config.BillOnlyReceipts, only when the report carries a receipt (or
// comes from this node's own cards), which then becomes the placement's
// latest (if the usage was billed whole).
func (c *coordinator) billReceipt(j *job, p *placement, cardSeconds float64, receipt []byte) {
	if c.n.cfg.BillOnlyReceipts && len(receipt) == 0 && p.Node != c.n.cfg.ID {
		return // (a share on the coordinator's own cards has no one to sign for it but itself)
	}
	c.bill(j, p, cardSeconds)
	if len(receipt) > 0 && p.CardSeconds == cardSeconds {
		p.Receipt = receipt
		c.touch(j)
	}
}

// bill accepts an attempt's cumulative usage: only the rise since the last
// report counts, at the attempt's price, and never more than its cards could
// have run since the award (a runner cannot bill time that did not pass).
func (c *coordinator) bill(j *job, p *placement, cardSeconds float64) {
	limit := float64(len(p.Cards)) * (c.n.now.Sub(p.AwardedAt) + usageSlack).Seconds()
	total := min(cardSeconds, limit)
	delta := total - p.CardSeconds
	if delta <= 0 {
		return
	}
	cost := delta * p.PriceCNY / 3600
	p.CardSeconds = total // exactly the report: a receipt's figure
	p.CostCNY += cost
	j.cardSeconds += delta
	j.cost += cost
	c.touch(j)
}

func (c *coordinator) onAttemptEnded(from string, m *AttemptEnded) error {
	c.n.send(from, &EndAck{Job: m.Job, Share: m.Share, Epoch: m.Epoch})
	j := c.jobs[m.Job]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, m.Job)
	}
	p := j.byAttempt[shareEpoch{m.Share, m.Epoch}]
	if p == nil || p.Node != from || !p.State.live() {
		return fmt.Errorf("%w: end of %s share %d epoch %d, not a live attempt", ErrStale, m.Job, m.Share, m.Epoch)
	}
	if p.State == PlacementAwarded {
		if m.Cause != CauseExited && m.Cause != CauseStopped {
			// It ended before its Accept arrived: as good as a rejected award.
			c.billReceipt(j, p, m.CardSeconds, m.Receipt)
			c.awardFailed(j, p, ReasonRejected, "ended before its accept arrived: "+string(m.Cause))
			return nil
		}
		c.accepted(j, p)
	}
	c.billReceipt(j, p, m.CardSeconds, m.Receipt)
	code := m.ExitCode
	p.ExitCode = &code
	p.Outputs = m.Outputs
	why := "" // the runner's word on it ("did not start: ..."), as ": why"
	if m.Reason != "" {
		why = ": " + m.Reason
	}
	switch {
	case p.State == PlacementStopping:
		c.settle(j, p, PlacementStopped, m.Cause, "")
		c.movedAfterStop(j, p)
	case m.Cause == CauseExited:
		c.settle(j, p, PlacementExited, m.Cause, fmt.Sprintf("exit status %d%s", code, why))
	case m.Cause == CauseTimeLimit:
		c.settle(j, p, PlacementExited, m.Cause, "stopped at the supplier's time limit")
	case m.Cause == CauseNotStarted:
		c.settle(j, p, PlacementLost, m.Cause, "could not start there"+why)
		if n := notStarted(j); n >= MaxNotStarted && !j.state.Terminal() {
			c.fail(j, fmt.Sprintf("share %d could not start on %d suppliers%s", p.Share, n, why), nil)
		}
	default:
		c.settle(j, p, PlacementLost, m.Cause, string(m.Cause)+why)
	}
	// Fenced or a card lost: the supplier lost it. Preempted: it said so,
	// for work the job's kind lets take its cards.
	c.trackEnd(p, p.State == PlacementLost && m.Cause != CausePreempted && m.Cause != CauseNotStarted)
	switch p.State {
	case PlacementExited:
		c.onExit(j, p, code, why)
	case PlacementLost:
		c.onLost(j, p)
	}
	c.refresh(j)
	c.checkDone(j)
	return nil
}

// MaxNotStarted is how many placements of a job may end not_started (the
// supplier could not ready its image) before the job fails: each is placed
// again elsewhere until then.
const MaxNotStarted = 3

// notStarted counts the job's placements that ended not_started.
func notStarted(j *job) int {
	n := 0
	for _, p := range j.placements {
		if p.Cause == CauseNotStarted {
			n++
		}
	}
	return n
}

// onExit handles a share whose process exited by itself; why is what its
// runner said of it (": did not start: ..."), or "".
func (c *coordinator) onExit(j *job, p *placement, code int, why string) {
	if j.state.Terminal() {
		return
	}
	switch {
	case j.spec.KindOrDefault() == KindService:
		j.restarts++
		c.replace(j, p)
	case p.Cause == CauseTimeLimit:
		c.fail(j, fmt.Sprintf("share %d ran as long as its supplier allows and was stopped (set a shorter expected duration, or choose suppliers with a longer limit)", p.Share), &code)
	case code != 0:
		c.fail(j, fmt.Sprintf("share %d exited with status %d%s", p.Share, code, why), &code)
	}
}

// onLost places a lost share again under a new epoch, preferring other
// nodes. A gang cannot run short of a member: all of it is placed again.
func (c *coordinator) onLost(j *job, p *placement) {
	if j.state.Terminal() {
		return
	}
	for s, old := range j.replaces {
		if old == p { // its replacement is already being placed
			delete(j.replaces, s)
			return
		}
	}
	j.avoid[p.Node] = true
	if j.everRan {
		j.rerouting = true
	}
	c.replace(j, p)
}

func (c *coordinator) replace(j *job, p *placement) {
	switch {
	case j.twoPhase():
		c.cancelRound(j)
		for _, q := range j.liveSorted() {
			c.stopPlacement(j, q, "a member of the gang was lost")
		}
		j.needSlots = j.needSlots[:0]
		for i := 0; i < j.target/j.perSlot(); i++ {
			j.needSlots = append(j.needSlots, i)
		}
		j.nextShare = max(j.nextShare, len(j.needSlots))
	case p == nil: // nothing lost (a caller restarting a gang)
	case j.flexible(): // its cards go to new shares; the first takes its number
		j.needCards += len(p.Cards)
		j.freeShares = append(j.freeShares, p.Share)
	default:
		j.needSlots = append(j.needSlots, p.Share)
	}
	c.touch(j)
	if j.round == nil {
		c.startRound(j)
	}
}

// declareLost ends an attempt whose runner went silent and places its
// share again; the runner, if alive, is told to stop (it has fenced itself
// already if it could not reach this coordinator).
func (c *coordinator) declareLost(j *job, p *placement, why string) {
	c.n.send(p.Node, &Stop{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, Reason: why})
	c.trackEnd(p, true)
	c.settle(j, p, PlacementLost, "", why)
	c.onLost(j, p)
	c.refresh(j)
}

// trackEnd adds the end of an attempt to its node's track record: one this
// coordinator watched (saw accept or renew), and, for a loss, heard from
// since this coordinator was last frozen (then the silence was its own).
func (c *coordinator) trackEnd(p *placement, lost bool) {
	if !p.watched || lost && p.lastHeard.Before(c.resumedAt) {
		return
	}
	run := time.Duration(0)
	if !lost {
		run = min(c.n.now.Sub(p.lastHeard), c.n.cfg.LostAfter)
	}
	c.track.ended(p.Node, lost, run)
}

// peerLost notes the hint: the node's attempts are checked HintGrace after
// it, and declared lost only if they stayed silent since.
func (c *coordinator) peerLost(node string) {
	for _, j := range c.active {
		for _, p := range j.live {
			if p.Node == node && p.suspectSince.IsZero() {
				p.suspectSince = c.n.now
			}
		}
	}
}

func (c *coordinator) tick() {
	now := c.n.now
	cfg := &c.n.cfg
	if !c.lastTick.IsZero() && now.Sub(c.lastTick) > cfg.FenceAfter/2 {
		c.resumedAt = now
	}
	c.lastTick = now
	// By job ID, not map order: what a tick sends comes out in the same
	// order on every run, so a harness replays a seed exactly.
	c.order = c.order[:0]
	for id := range c.active {
		c.order = append(c.order, id)
	}
	slices.Sort(c.order)
	for _, id := range c.order {
		j := c.active[id]
		if j == nil {
			continue
		}
		if r := j.round; r != nil {
			if r.phase == phaseBidding && !now.Before(r.deadline) {
				c.closeBidding(j, r)
			} else if r.phase == phaseAwarding {
				c.awardTimeouts(j, r)
			}
		}
		for _, p := range j.liveSorted() {
			if j.live[p.Share] != p {
				continue // settled by an earlier step of this loop
			}
			silent := now.Sub(p.lastHeard)
			switch p.State {
			case PlacementStopping:
				if silent > cfg.LostAfter {
					c.settle(j, p, PlacementStopped, "", p.Reason+"; no final report")
					c.checkDone(j)
				}
			case PlacementAccepted, PlacementRunning:
				switch {
				case silent > cfg.LostAfter:
					c.declareLost(j, p, fmt.Sprintf("no lease renewal for %v", silent.Round(time.Millisecond)))
				case !p.suspectSince.IsZero() && now.Sub(p.suspectSince) >= cfg.HintGrace:
					c.declareLost(j, p, fmt.Sprintf("reported lost and silent for %v", now.Sub(p.suspectSince).Round(time.Millisecond)))
				}
			}
		}
		if j.round == nil && j.hasNeed() && !j.state.Terminal() && !now.Before(j.retryAt) {
			c.startRound(j)
		}
		if j.state.Terminal() && len(j.live) == 0 {
			delete(c.active, id)
		}
	}
}
