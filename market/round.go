package market

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
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
	feasible int       // cards that pass the job's checks and may form one share (usableCards)
	held     Reason    // the node is held back whatever it bids (heldback.go)
	heldWhy  string
	bidTook  time.Duration // from the request to the bid; 0 for a bid to a broadcast
}

func (c *coordinator) startRound(j *job) {
	if j.round != nil || !j.hasNeed() || j.state.Terminal() {
		return
	}
	j.roundSeq++
	r := &round{id: j.roundSeq, askBy: map[string]*ask{}, lotBy: map[string]int{}, exclude: map[string]bool{}, won: map[string]bool{}, x: newExplainer(16)}
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
	j.held = heldOffers{}
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
		a.sentAt = c.n.now
		r.asks = append(r.asks, a)
		r.askBy[a.node] = a
		c.n.send(a.node, j.bidRequest(r.id, a.want, r.minCards()))
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
	r.bcastReq = j.bidRequest(r.id, want, r.minCards())
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
		return release(ErrRefused, "%s bid, %d asked", text.Count(len(m.Cards), "card"), want)
	}
	lot := Lot{Node: from, Region: m.Region, Availability: m.Availability, Cards: m.Cards}
	c.track.bid(from, m.Availability)
	meta := lotMeta{lease: m.Lease, expires: c.n.now.Add(m.LeaseFor.Std() - c.n.cfg.LeaseMargin)}
	if a != nil {
		meta.bidTook = c.n.now.Sub(a.sentAt)
	}
	if why, detail := c.nodeHeld(from); why != reasonPassed {
		meta.held, meta.heldWhy = why, detail // a broadcast reached it: it may not win
	} else if why, detail := c.probeAdjust(j, from, lot.Cards); why != reasonPassed {
		meta.held, meta.heldWhy = why, detail
	} else if !r.exclude[from] {
		meta.feasible = usableCards(j.match, m.Cards, j.spec.MixedModels)
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
	a.replied, a.declined = true, m.Reason
	// The entry counts the cards asked of the node, as a silent one's
	// does: "declined" is then as many cards as were refused.
	r.x.add(ExplainEntry{Stage: "bid", Node: from, Cards: a.want, Reason: ReasonDeclined, Detail: m.Reason})
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
	var held map[string]heldLot
	for i := range r.lots {
		if m := &r.meta[i]; m.held != reasonPassed {
			if held == nil {
				held = map[string]heldLot{}
			}
			held[r.lots[i].Node] = heldLot{m.held, m.heldWhy}
		}
	}
	return clearInput{lots: lots, need: need, match: j.match, scorer: j.scorer, seed: j.seed ^ r.id,
		exclude: r.exclude, avoid: j.avoid, spread: j.spreadRegions(), maxPrice: j.spec.MaxPriceCNY, explain: x,
		mixed: j.spec.MixedModels, held: held}
}

func (c *coordinator) closeBidding(j *job, r *round) {
	c.expireLots(r)
	x := &c.clearX // scratch: its entries are copied into the round's
	x.reset()
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
	c.awardAll(j, r, res.winners, r.slots, nil)
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
	j.endRound(r)
	if j.shrinkPending {
		c.shrinkNow(j) // a scale-down came while the round was open
	}
	if j.hasNeed() {
		c.backoff(j, c.shortfall(j, r, why))
	}
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
	c.track.annotate(&e, r.lots, r.lotBy)
	j.explain = &e
	c.touch(j)
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
	j.endRound(r)
	c.touch(j)
}

// endRound lets go of r, j's round, which is over. Its placements stop
// pointing at it (each use of a placement's round checks that it is still
// j's round), so that the job keeps nothing of it (its asks, lots,
// explainer) but the explanation: a job that ended used to hold every
// round it had, for as long as its coordinator held the job.
func (j *job) endRound(r *round) {
	j.round = nil
	for _, p := range r.placed {
		if p.round == r {
			p.round = nil
		}
	}
}
