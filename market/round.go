package market

import (
	"fmt"
	"slices"
	"time"
)

// A round places what a job needs: it asks candidates for bids, clears the
// bids, awards the winners and replaces rejected awards from the spares.
//
//	startRound ──BidRequests──▶ (bids, declines) ──window or early close──▶ closeBidding
//	closeBidding ──falls short──▶ extend (up to MaxExtensions: wider asks, then broadcast)
//	             ──still short──▶ failRound (release everything, retry after a backoff)
//	closeBidding ──Awards──▶ (accepts; rejects or timeouts → spares) ──▶ finishRound
type round struct {
	id         uint64
	need       Need
	slots      []int // slot layouts: the shares this round places
	phase      roundPhase
	deadline   time.Time
	extensions int
	bcast      bool
	bcastReq   *BidRequest

	asks   []*ask // in the order of the book's scores
	askBy  map[string]*ask
	prefix int // asks[:prefix] have all replied
	filled int // what the replied prefix offers: cards (LayoutAny) or qualifying nodes

	lots  []Lot
	meta  []lotMeta
	lotBy map[string]int

	exclude     map[string]bool // nodes that may not win: they hold a share that must be apart
	outstanding int             // awards not answered yet
	placed      []*placement    // this round's awards
	progress    bool            // an award was accepted
	unfilled    Need            // what neither the winners nor the spares could take
	unfilledIDs []int           // the slots of unfilled
	closedLots  int             // lots in when bidding closed; later ones are spares that came late
	won         map[string]bool // nodes awarded in this round

	x    *explainer
	expl Explanation
}

type roundPhase int

const (
	phaseBidding roundPhase = iota
	phaseAwarding
)

type lotMeta struct {
	lease    string
	expires  time.Time // by the coordinator's clock, with LeaseMargin taken off
	used     bool      // awarded or released
	feasible int
}

func (c *coordinator) startRound(j *job) {
	if j.round != nil || !j.hasNeed() || j.state.Terminal() {
		return
	}
	j.roundSeq++
	r := &round{id: j.roundSeq, askBy: map[string]*ask{}, lotBy: map[string]int{}, exclude: map[string]bool{}, won: map[string]bool{}, x: newExplainer()}
	if j.flexible() {
		r.need = Need{Cards: j.needCards}
		j.needCards = 0
	} else {
		r.need = Need{Slots: len(j.needSlots), PerSlot: j.perSlot()}
		r.slots, j.needSlots = j.needSlots, nil
		for _, p := range j.live {
			if p.State != PlacementStopping {
				r.exclude[p.Node] = true
			}
		}
	}
	r.expl = Explanation{Round: r.id, Need: r.need.String()}
	j.round = r
	asks, enough := c.selectCandidates(j, r.need, r.exclude, r.x, 1, 0)
	if r.need.Slots > 0 {
		// Nodes still stopping this job's attempts (a gang restarting) hold
		// cards the book shows busy: ask them first.
		var own []*ask
		for _, p := range j.liveSorted() {
			if p.State == PlacementStopping && !j.avoid[p.Node] && !r.exclude[p.Node] &&
				!slices.ContainsFunc(asks, func(a *ask) bool { return a.node == p.Node }) {
				own = append(own, &ask{node: p.Node, want: r.need.PerSlot})
			}
		}
		asks = append(own, asks...)
		enough = enough || len(asks) >= r.need.Slots
	}
	c.ask(j, r, asks)
	if !enough {
		c.broadcast(j, r)
	}
	r.deadline = c.n.now.Add(c.n.cfg.BidWindow)
	c.touch(j)
	c.refresh(j)
	if len(r.asks) == 0 && !r.bcast {
		c.closeBidding(j, r)
	}
}

func (r *round) minCards() int {
	if r.need.Slots > 0 {
		return r.need.PerSlot
	}
	return 1
}

func (c *coordinator) ask(j *job, r *round, asks []*ask) {
	for _, a := range asks {
		if r.askBy[a.node] != nil {
			continue
		}
		r.asks = append(r.asks, a)
		r.askBy[a.node] = a
		c.n.send(a.node, &BidRequest{Job: j.spec.ID, Term: j.term, Round: r.id, Filter: FilterOf(&j.spec), Want: a.want, Min: r.minCards()})
	}
	r.expl.Asked = len(r.asks)
}

func (c *coordinator) broadcast(j *job, r *round) {
	if r.bcast {
		return
	}
	r.bcast = true
	r.expl.Broadcast = true
	want := r.need.Cards
	if r.need.Slots > 0 {
		want = r.need.PerSlot
	}
	r.bcastReq = &BidRequest{Job: j.spec.ID, Term: j.term, Round: r.id, Filter: FilterOf(&j.spec), Want: want, Min: r.minCards()}
	c.n.send(Broadcast, r.bcastReq)
}

func (c *coordinator) onBid(from string, m *Bid) error {
	j := c.jobs[m.Job]
	r := (*round)(nil)
	if j != nil {
		r = j.round
	}
	release := func(err error, format string, args ...any) error {
		c.n.send(from, &Release{Job: m.Job, Lease: m.Lease})
		return fmt.Errorf("%w: bid from %s for %s round %d: %s", err, from, m.Job, m.Round, fmt.Sprintf(format, args...))
	}
	switch {
	case j == nil:
		return release(ErrUnknownJob, "no such job")
	case r == nil || r.id != m.Round:
		return release(ErrStale, "the round is over")
	}
	if _, dup := r.lotBy[from]; dup {
		return fmt.Errorf("%w: duplicate bid from %s", ErrStale, from)
	}
	a := r.askBy[from]
	want := 0
	switch {
	case a != nil:
		want = a.want
	case r.bcast:
		want = r.bcastReq.Want
	default:
		return release(ErrRefused, "the node was not asked")
	}
	if len(m.Cards) > want {
		return release(ErrRefused, "%d cards bid, %d asked", len(m.Cards), want)
	}
	lot := Lot{Node: from, Availability: m.Availability, Cards: m.Cards}
	meta := lotMeta{lease: m.Lease, expires: c.n.now.Add(m.LeaseFor.Std() - c.n.cfg.LeaseMargin)}
	if !r.exclude[from] {
		for i := range m.Cards {
			bc := &m.Cards[i]
			f := cardFacts{model: bc.Model, vendor: bc.Vendor, memMiB: bc.MemoryMiB, cu: bc.ComputeUnits, price: bc.PriceCNY, preempts: bc.Preempts}
			if j.match.check(&f) == reasonPassed {
				meta.feasible++
			}
		}
	}
	r.lotBy[from] = len(r.lots)
	r.lots = append(r.lots, lot)
	r.meta = append(r.meta, meta)
	r.expl.Bids++
	if a != nil {
		a.replied, a.feasible = true, meta.feasible
	}
	if r.phase == phaseAwarding {
		c.fillFromSpares(j, r)
		c.finishRound(j, r)
		return nil
	}
	c.maybeCloseEarly(j, r)
	return nil
}

func (c *coordinator) onDecline(from string, m *Decline) error {
	j := c.jobs[m.Job]
	if j == nil || j.round == nil || j.round.id != m.Round {
		return ErrStale
	}
	r := j.round
	a := r.askBy[from]
	if a == nil || a.replied {
		return ErrStale
	}
	a.replied = true
	r.x.add(ExplainEntry{Stage: "bid", Node: from, Reason: ReasonDeclined, Detail: m.Reason})
	if r.phase == phaseBidding {
		c.maybeCloseEarly(j, r)
	}
	return nil
}

// maybeCloseEarly closes bidding once the candidates that replied, taken in
// the book's order up to the first that has not, already satisfy the need:
// the silent ones ranked worse in the book, so they could not improve the
// result. A broadcast round waits for its whole window.
func (c *coordinator) maybeCloseEarly(j *job, r *round) {
	for r.prefix < len(r.asks) && r.asks[r.prefix].replied {
		a := r.asks[r.prefix]
		if r.need.Cards > 0 {
			r.filled += a.feasible
		} else if a.feasible >= r.need.PerSlot {
			r.filled++
		}
		r.prefix++
	}
	enough := r.filled >= r.need.Cards+r.need.Slots // one of the two is 0
	if !r.bcast && (enough || r.prefix == len(r.asks)) {
		c.closeBidding(j, r)
	}
}

// expireLots marks lots whose lease the coordinator can no longer trust.
func (c *coordinator) expireLots(r *round) {
	for i := range r.lots {
		if !c.n.now.Before(r.meta[i].expires) {
			r.lots[i].Expired = true
		}
	}
}

func (c *coordinator) clearInput(j *job, r *round, lots []Lot, need Need, x *explainer) clearInput {
	return clearInput{lots: lots, need: need, match: j.match, scorer: j.scorer, seed: j.seed ^ r.id,
		exclude: r.exclude, avoid: j.avoid, maxPrice: j.spec.MaxPriceCNY, explain: x}
}

func (c *coordinator) closeBidding(j *job, r *round) {
	c.expireLots(r)
	x := newExplainer()
	res := clearBids(c.clearInput(j, r, r.lots, r.need, x))
	if !res.ok {
		if c.extend(j, r) {
			return
		}
		for _, e := range x.entries {
			r.x.add(e)
		}
		c.failRound(j, r, res.short)
		return
	}
	for _, e := range x.entries {
		r.x.add(e)
	}
	r.expl.Outcome = "cleared"
	r.phase = phaseAwarding
	j.priceCU = res.priceCU
	r.expl.ClearingPriceCU = res.priceCU
	epoch := j.nextEpoch()
	for i, w := range res.winners {
		share := 0
		if j.flexible() {
			share = j.allocShare()
		} else {
			share = r.slots[i]
		}
		c.award(j, r, w, share, epoch)
	}
	r.closedLots = len(r.lots)
	for i := range r.lots {
		if !r.meta[i].used && r.meta[i].feasible == 0 {
			c.releaseLot(j, r, i)
		}
	}
	j.wait = ""
	c.refresh(j)
}

// extend asks more candidates when the bids could not satisfy the need:
// from the book, drawn at random from a window that widens each time (see
// selectCandidates), or from the broadcast topic once the book has no one
// left to ask. It reports false when the round may not extend again
// (Config.MaxExtensions).
func (c *coordinator) extend(j *job, r *round) bool {
	if r.extensions >= c.n.cfg.MaxExtensions {
		return false
	}
	skip := map[string]bool{}
	for n := range r.exclude {
		skip[n] = true
	}
	for n := range r.askBy {
		skip[n] = true
	}
	short := r.need
	have := 0
	for i := range r.lots {
		if !r.lots[i].Expired {
			if r.need.Cards > 0 {
				have += r.meta[i].feasible
			} else if r.meta[i].feasible >= r.need.PerSlot {
				have++
			}
		}
	}
	if r.need.Cards > 0 {
		short.Cards = max(1, r.need.Cards-have)
	} else {
		short.Slots = max(1, r.need.Slots-have)
	}
	spread := 1 << (3 * (r.extensions + 1)) // 8, 64, 512 times the candidates
	asks, _ := c.selectCandidates(j, short, skip, nil, spread, r.id<<8|uint64(r.extensions))
	if len(asks) == 0 && r.bcast {
		return false // nobody left to ask
	}
	r.extensions++
	c.ask(j, r, asks)
	if len(asks) == 0 {
		c.broadcast(j, r)
	}
	r.deadline = c.n.now.Add(c.n.cfg.BidWindow)
	return true
}

// failRound gives up on a round: its reservations are released and what it
// had to place waits for a retry after the backoff.
func (c *coordinator) failRound(j *job, r *round, why string) {
	for i := range r.lots {
		if !r.meta[i].used {
			c.releaseLot(j, r, i)
		}
	}
	c.requeue(j, r.need, r.slots)
	j.round = nil
	c.backoff(j, "waiting for capacity: "+why)
	r.expl.Outcome = why
	c.explainRound(j, r)
	c.refresh(j)
}

// backoff schedules the next round of a job that could not be placed:
// doubling from RetryMin to RetryMax, plus up to half again, drawn from the
// job's seed so that jobs competing for the same cards do not retry in
// lockstep.
func (c *coordinator) backoff(j *job, why string) {
	j.backoff = min(max(2*j.backoff, c.n.cfg.RetryMin), c.n.cfg.RetryMax)
	j.retries++
	jitter := time.Duration(mix64(j.seed+j.retries) % uint64(j.backoff/2+1))
	j.retryAt = c.n.now.Add(j.backoff + jitter)
	j.wait = why
}

func (c *coordinator) requeue(j *job, need Need, slots []int) {
	j.needCards += need.Cards
	j.needSlots = append(j.needSlots, slots...)
}

func (c *coordinator) releaseLot(j *job, r *round, i int) {
	if r.meta[i].used {
		return
	}
	r.meta[i].used = true
	c.n.send(r.lots[i].Node, &Release{Job: j.spec.ID, Lease: r.meta[i].lease})
}

// explainRound settles the round's explanation when it ends: asks that
// never answered, and late bids held as spares, get their entries.
func (c *coordinator) explainRound(j *job, r *round) {
	for _, a := range r.asks {
		if _, bid := r.lotBy[a.node]; !bid && !a.replied {
			r.x.add(ExplainEntry{Stage: "bid", Node: a.node, Cards: a.want, Reason: ReasonSilent, Score: a.score,
				Detail: "no answer while the round was open"})
		}
	}
	for i := r.closedLots; i < len(r.lots) && r.phase == phaseAwarding; i++ {
		if !r.won[r.lots[i].Node] {
			r.x.add(ExplainEntry{Stage: "bid", Node: r.lots[i].Node, Model: r.lots[i].Cards[0].Model, Cards: len(r.lots[i].Cards),
				Reason: ReasonNotNeeded, Detail: "arrived after bidding closed; held as a spare, then released"})
		}
	}
	e := r.expl
	r.x.finish(&e, c.n.cfg.ExplainEntries)
	j.explain = &e
	c.touch(j)
}

// award gives winner w of round r the share under epoch.
func (c *coordinator) award(j *job, r *round, w winner, share int, epoch uint64) {
	lot := &r.lots[w.lot]
	meta := &r.meta[w.lot]
	meta.used = true
	p := &placement{round: r, lease: meta.lease, deadline: c.n.now.Add(c.n.cfg.AwardTimeout), lastHeard: c.n.now}
	p.Share, p.Epoch, p.Node, p.State, p.AwardedAt = share, epoch, lot.Node, PlacementAwarded, c.n.now
	p.Model = lot.Cards[w.cards[0]].Model
	for i, ci := range w.cards {
		p.Cards = append(p.Cards, lot.Cards[ci].ID)
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
		Exec: ExecSpec{Command: j.spec.Command, Env: j.spec.Env, Payload: j.spec.Payload},
		Kind: j.spec.KindOrDefault(), World: j.target,
	})
	c.touch(j)
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
	case PlacementAccepted, PlacementRunning:
		return nil // a duplicate
	default: // given up on meanwhile: the node must let the cards go
		c.n.send(from, &Stop{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, Reason: "the award was withdrawn"})
		return fmt.Errorf("%w: accept for %s share %d epoch %d, which is %s", ErrStale, m.Job, m.Share, m.Epoch, p.State)
	}
	c.accepted(j, p)
	c.refresh(j)
	return nil
}

// accepted records that the node of an awarded attempt committed its cards.
func (c *coordinator) accepted(j *job, p *placement) {
	p.lastHeard = c.n.now
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
	epoch := j.nextEpoch()
	for i, w := range res.winners {
		share := 0
		if j.flexible() {
			share = j.allocShare()
		} else {
			share = r.unfilledIDs[i]
		}
		w.lot = index[w.lot]
		c.award(j, r, w, share, epoch)
		lot := &r.lots[w.lot]
		r.x.replace(lot.Node, ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[w.cards[0]].Model, Cards: len(w.cards),
			Reason: ReasonWon, Score: w.cost / float64(len(w.cards)), Detail: fmt.Sprintf("a spare, after an award failed; paid %.2f CNY per card-hour", r.placed[len(r.placed)-1].PriceCNY)})
	}
	r.unfilled, r.unfilledIDs = Need{}, nil
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
	j.round = nil
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
	for _, p := range members {
		world += len(p.Cards)
	}
	for rank, p := range members {
		if p.State != PlacementAccepted {
			continue
		}
		p.gang = &GangInfo{NNodes: len(members), NodeRank: rank, Master: members[0].Node}
		p.world = world
		p.State = PlacementRunning
		c.sendStart(j, p)
	}
	c.touch(j)
}

func (c *coordinator) sendStart(j *job, p *placement) {
	c.n.send(p.Node, &Start{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, World: p.world, Gang: *p.gang})
}

// cancelRound ends the open round: its reservations are released and its
// unanswered awards stopped. What it was placing is dropped; the caller
// requeues what it still wants.
func (c *coordinator) cancelRound(j *job) {
	r := j.round
	if r == nil {
		return
	}
	for i := range r.lots {
		c.releaseLot(j, r, i)
	}
	for _, p := range r.placed {
		if p.State == PlacementAwarded {
			c.stopPlacement(j, p, "the round was cancelled")
		}
	}
	j.round = nil
	c.touch(j)
}
