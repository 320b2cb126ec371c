package market

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Awards: the winners of a round are awarded their shares; an award that
// is rejected or not answered in time goes to a spare under a new epoch; a
// gang starts together once all its members have committed.

// awardAll awards each winner its share, all under one new epoch: a new
// share number for LayoutAny, the next of slots otherwise. index maps the
// winners' lots to the round's lots (nil: they are the round's).
func (c *coordinator) awardAll(j *job, r *round, winners []winner, slots, index []int) []*placement {
	epoch := j.nextEpoch(c.n.cfg.ID)
	placed := make([]*placement, 0, len(winners))
	for i, w := range winners {
		share := 0
		if j.flexible() {
			share = j.allocShare()
		} else {
			share = slots[i]
		}
		if index != nil {
			w.lot = index[w.lot]
		}
		placed = append(placed, c.award(j, r, w, share, epoch))
	}
	return placed
}

// award gives winner w of round r the share under epoch.
func (c *coordinator) award(j *job, r *round, w winner, share int, epoch uint64) *placement {
	lot := &r.lots[w.lot]
	meta := &r.meta[w.lot]
	meta.used = true
	wait := c.accepts.timeout(lot.Node, c.n.cfg.AwardTimeout, meta.bidTook)
	p := &placement{round: r, lease: meta.lease, wait: wait, deadline: c.n.now.Add(wait), lastHeard: c.n.now}
	p.Share, p.Epoch, p.Node, p.Region, p.State, p.AwardedAt = share, epoch, lot.Node, lot.Region, PlacementAwarded, c.n.now
	p.Model = shareModel(lot, w.cards)
	for i, ci := range w.cards {
		p.Cards = append(p.Cards, lot.Cards[ci].ID)
		p.Simulated = p.Simulated || lot.Cards[ci].Simulated
		p.PriceCNY += w.pay[i]
		p.BidCNY += lot.Cards[ci].PriceCNY
	}
	p.PriceCNY /= float64(len(w.cards))
	p.BidCNY /= float64(len(w.cards))
	j.placements = append(j.placements, p)
	j.byAttempt[shareEpoch{share, epoch}] = p
	j.live[share] = p
	r.placed = append(r.placed, p)
	r.outstanding++
	r.won[lot.Node] = true
	if !j.flexible() {
		r.exclude[lot.Node] = true
	}
	c.n.send(lot.Node, &Award{
		Job: j.spec.ID, Term: j.term, Round: r.id, Lease: meta.lease, Share: share, Epoch: epoch,
		Cards: p.Cards, PriceCNY: p.PriceCNY, Start: !j.twoPhase(),
		Exec: ExecOf(&j.spec), Kind: j.spec.KindOrDefault(), World: j.target, Signed: j.signed(),
		Restore: j.restoreFor(share),
	})
	c.touch(j)
	return p
}

// shareModel is the model of a share's cards: the model of all of them,
// or, in a share that mixes models (JobSpec.MixedModels), every model it
// holds, sorted and joined by "+" ("a100-80g+rtx4090-24g"): a record
// never labels a card with a model it is not.
func shareModel(lot *Lot, cards []int) string {
	var models []string
	for _, ci := range cards {
		if m := lot.Cards[ci].Model; !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	slices.Sort(models)
	return strings.Join(models, "+")
}

func (c *coordinator) onAccept(from string, m *Accept) error {
	j := c.jobs[m.Job]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, m.Job)
	}
	p := j.byAttempt[shareEpoch{m.Share, m.Epoch}]
	if p == nil || p.Node != from {
		return fmt.Errorf("%w: accept from %s for an attempt it was not awarded", ErrRefused, from)
	}
	switch p.State {
	case PlacementAwarded:
		c.accepts.observe(from, c.n.now.Sub(p.answerFrom()))
	case PlacementAccepted, PlacementRunning:
		return nil // a duplicate
	default: // given up on meanwhile: the node must let the cards go
		// Late or not, it is how long this supplier takes to answer: an
		// award timed out waits longer next time.
		c.accepts.observe(from, c.n.now.Sub(p.answerFrom()))
		c.n.send(from, &Stop{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, Reason: "the award was withdrawn"})
		return fmt.Errorf("%w: accept for %s share %d epoch %d, which is %s", ErrStale, m.Job, m.Share, m.Epoch, p.State)
	}
	c.accepted(j, p)
	c.refresh(j)
	return nil
}

// accepted records that the node of an awarded attempt committed its cards.
func (c *coordinator) accepted(j *job, p *placement) {
	p.lastHeard, p.watched = c.n.now, true
	p.State = PlacementAccepted
	if !j.twoPhase() {
		p.State = PlacementRunning
	}
	c.touch(j)
	if r := p.round; r != nil && r == j.round {
		r.outstanding--
		r.progress = true
		c.finishRound(j, r)
	}
}

func (c *coordinator) onReject(from string, m *Reject) error {
	j := c.jobs[m.Job]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, m.Job)
	}
	p := j.byAttempt[shareEpoch{m.Share, m.Epoch}]
	if p == nil || p.Node != from {
		return fmt.Errorf("%w: reject from %s for an attempt it was not awarded", ErrRefused, from)
	}
	if p.State != PlacementAwarded {
		return ErrStale
	}
	c.awardFailed(j, p, ReasonRejected, m.Reason)
	return nil
}

// awardFailed gives the share of a rejected or unanswered award to a spare.
func (c *coordinator) awardFailed(j *job, p *placement, why Reason, detail string) {
	c.settle(j, p, PlacementRejected, "", detail)
	r := p.round
	if r == nil || r != j.round {
		return
	}
	r.outstanding--
	r.x.replace(p.Node, ExplainEntry{Stage: "bid", Node: p.Node, Model: p.Model, Cards: len(p.Cards), Reason: why, Detail: detail})
	if j.flexible() {
		j.freeShares = append(j.freeShares, p.Share)
		r.unfilled.Cards += len(p.Cards)
	} else {
		r.unfilled.Slots++
		r.unfilled.PerSlot = j.perSlot()
		r.unfilledIDs = append(r.unfilledIDs, p.Share)
	}
	c.fillFromSpares(j, r)
	c.finishRound(j, r)
	c.refresh(j)
}

// fillFromSpares clears what the round still lacks against the lots nobody
// has won yet; each replacement award takes a new epoch.
func (c *coordinator) fillFromSpares(j *job, r *round) {
	if r.unfilled.total() == 0 || j.state.Terminal() {
		return
	}
	c.expireLots(r)
	var spare []Lot
	var index []int
	for i := range r.lots {
		if !r.meta[i].used && !r.lots[i].Expired {
			spare = append(spare, r.lots[i])
			index = append(index, i)
		}
	}
	if len(spare) == 0 {
		return
	}
	res := clearBids(c.clearInput(j, r, spare, r.unfilled, nil))
	if !res.ok {
		return
	}
	for i, p := range c.awardAll(j, r, res.winners, r.unfilledIDs, index) {
		w := &res.winners[i]
		r.x.replace(p.Node, ExplainEntry{Stage: "bid", Node: p.Node, Model: p.Model, Cards: len(p.Cards), Reason: ReasonWon,
			Score: w.cost / float64(len(w.cards)), Detail: fmt.Sprintf("a spare, after an award failed; paid %.2f CNY per card-hour", p.PriceCNY)})
	}
	r.unfilled, r.unfilledIDs = Need{}, nil
}

// MaxAwardHold bounds how long an award held for its record's commit
// (AwardHeld) is waited for before it counts as unanswered. A node drops
// a message held longer than this.
const MaxAwardHold = 30 * time.Second

// awardGated moves the deadline of the award of job's share under epoch,
// still awaiting its answer: held, it waits up to MaxAwardHold from the
// award; sent (no longer held), its time for an answer counts from now.
func (c *coordinator) awardGated(job string, share int, epoch uint64, held bool) {
	j := c.jobs[job]
	if j == nil {
		return
	}
	for _, p := range j.placements {
		if p.Share != share || p.Epoch != epoch || p.State != PlacementAwarded {
			continue
		}
		if held && p.sentAt.IsZero() {
			if d := p.AwardedAt.Add(MaxAwardHold); d.After(p.deadline) {
				p.deadline = d
			}
		} else if !held {
			p.sentAt, p.deadline = c.n.now, c.n.now.Add(p.wait)
		}
		return
	}
}

// awardTimeouts treats awards not answered within AwardTimeout as
// rejected, and tells the node to let go in case its Accept was lost.
func (c *coordinator) awardTimeouts(j *job, r *round) {
	for _, p := range r.placed {
		if p.State == PlacementAwarded && !c.n.now.Before(p.deadline) {
			c.n.send(p.Node, &Stop{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, Reason: "the award timed out"})
			c.awardFailed(j, p, ReasonTimedOut, "no answer to the award within the timeout")
			if j.round != r {
				return
			}
		}
	}
}

// finishRound ends a round whose awards are all answered: spares are
// released, a gang starts (or, if incomplete, lets go of its members and
// retries), and what is still missing goes to the next round.
func (c *coordinator) finishRound(j *job, r *round) {
	if r != j.round || r.phase != phaseAwarding || r.outstanding > 0 {
		return
	}
	for i := range r.lots {
		c.releaseLot(j, r, i)
	}
	c.explainRound(j, r)
	j.endRound(r)
	switch {
	case j.twoPhase() && r.unfilled.total() > 0:
		for _, p := range r.placed {
			if p.State.live() {
				c.stopPlacement(j, p, "the gang could not be completed")
			}
		}
		c.requeue(j, Need{}, r.slots)
		r.progress = false
	case j.twoPhase():
		c.startGang(j)
		c.requeue(j, r.unfilled, r.unfilledIDs)
	default:
		c.requeue(j, r.unfilled, r.unfilledIDs)
	}
	if j.shrinkPending {
		c.shrinkNow(j)
	}
	if j.hasNeed() {
		if r.progress {
			c.startRound(j)
		} else {
			c.backoff(j, "waiting for capacity: "+j.needString()+" could not be placed")
		}
	}
	c.refresh(j)
	c.checkDone(j)
}

// startGang sends every committed gang member its Start with the roster:
// the live members in share order, rank 0 the master.
func (c *coordinator) startGang(j *job) {
	var members []*placement
	for _, p := range j.liveSorted() {
		if p.State == PlacementAccepted || p.State == PlacementRunning {
			members = append(members, p)
		}
	}
	world := 0
	roster := make([]GangMember, len(members))
	for i, p := range members {
		world += len(p.Cards)
		roster[i] = GangMember{Node: p.Node, Share: p.Share, Epoch: p.Epoch}
	}
	for rank, p := range members {
		if p.State != PlacementAccepted {
			continue
		}
		p.gang = &GangInfo{NNodes: len(members), NodeRank: rank, Master: members[0].Node, Members: roster}
		p.world = world
		p.State = PlacementRunning
		c.sendStart(j, p)
	}
	c.touch(j)
}

func (c *coordinator) sendStart(j *job, p *placement) {
	c.n.send(p.Node, &Start{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, World: p.world, Gang: *p.gang})
}
