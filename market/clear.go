package market

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Lot is what one supplier offers a job in a round: the cards of its bid.
type Lot struct {
	Node         string
	Region       string // as the supplier's bid says; "" unknown
	Availability Availability
	Cards        []BidCard
	// Expired marks a lot whose reservation has lapsed (or is about to):
	// none of its cards can be awarded.
	Expired bool
}

// Need is what a round must place. Exactly one form is set.
type Need struct {
	// Cards > 0: this many cards anywhere (LayoutAny); each node's cards
	// form one share.
	Cards int
	// Slots > 0: Slots shares of PerSlot cards, each on its own node
	// (LayoutPerNode, LayoutOneNode, service replicas).
	Slots, PerSlot int
}

func (n Need) String() string {
	if n.Cards > 0 {
		return text.Count(n.Cards, "card")
	}
	return text.Count(n.Slots, "node") + " × " + text.Count(n.PerSlot, "card")
}

// total is the number of cards the need adds up to.
func (n Need) total() int { return n.Cards + n.Slots*n.PerSlot }

// clearInput is one clearing problem.
type clearInput struct {
	lots    []Lot
	need    Need
	match   *matcher
	scorer  *scorer
	seed    uint64
	exclude map[string]bool    // nodes that may not win (they hold a share that must be apart)
	held    map[string]heldLot // nodes held back whatever they bid (heldback.go)
	avoid   map[string]bool    // nodes that win only when nothing else will do
	// spread, when not nil, spreads slot winners over regions (service
	// replicas, spread.go); the regions in it hold a replica already.
	spread   map[string]bool
	maxPrice float64
	explain  *explainer // nil: do not explain
	// mixed lets a share hold cards of several models
	// (JobSpec.MixedModels); otherwise each winner's cards are of one
	// model (onemodel.go).
	mixed bool
}

// winner is one node's share of a clearing.
type winner struct {
	lot   int
	cards []int     // indexes into lots[lot].Cards, best first
	pay   []float64 // CNY per card-hour for each card
	cost  float64   // sum of the cards' scores
}

// clearing is the result of clearing one round.
type clearing struct {
	ok      bool
	short   string // why it did not clear
	winners []winner
	priceCU float64 // uniform clearing price, CNY per surviving CU-hour
	cost    float64 // sum of the winners' scores: what clearing minimizes
}

// candidate is one feasible card, ranked.
type candidate struct {
	lot, card int
	score     float64
	avoid     bool
	preempts  bool
	tie       uint64
}

// compare orders candidates: not avoided first, then by score, then cards
// that preempt nothing, then by the seeded tie-break. Scores are never NaN,
// so plain comparisons do (cmp.Compare's NaN handling costs a third of a
// clearing's time).
func (a *candidate) compare(b *candidate) int {
	switch {
	case a.avoid != b.avoid:
		if a.avoid {
			return 1
		}
		return -1
	case a.score < b.score:
		return -1
	case a.score > b.score:
		return 1
	case a.preempts != b.preempts:
		if a.preempts {
			return 1
		}
		return -1
	case a.tie < b.tie:
		return -1
	case a.tie > b.tie:
		return 1
	}
	return 0
}

// clearBids finds the cheapest set of cards that satisfies the need and its
// layout, by effective price per compute unit (see scorer), and the uniform
// clearing price. It is a pipeline: feasibility checks drop cards with a
// named reason, the scorer ranks the rest, and a layout stage picks winners.
// Ties go by a hash of the job's seed, so the same input always gives the
// same answer.
//
// The clearing price is the best (lowest) score among the feasible cards
// that lost (for a per-node layout: the best losing node's mean score over
// the cards it would have given); with no loser, the worst winning score.
// Each winner card is paid that price converted back with its own survival
// and compute units, never below its bid and never above the job's max
// (scorer.pay). Avoided nodes do not set the price.
func clearBids(in clearInput) clearing {
	cands, perLot := feasibleCards(in)
	if in.need.Cards > 0 {
		if !in.mixed && anyLotMixes(in, cands, perLot) {
			return clearAnyOneModel(in, cands, perLot)
		}
		return clearAny(in, cands)
	}
	return clearSlots(in, cands, perLot)
}

// feasibleCards runs the feasibility checks on every card of every lot and
// scores the cards that pass. perLot[i] is the number that passed in lot i.
func feasibleCards(in clearInput) ([]candidate, []int) {
	n := 0
	for i := range in.lots {
		n += len(in.lots[i].Cards)
	}
	cands := make([]candidate, 0, n)
	perLot := make([]int, len(in.lots))
	for li := range in.lots {
		lot := &in.lots[li]
		switch {
		case lot.Expired:
			in.explainGroup(lot, ReasonLease, len(lot.Cards), "the reservation lapsed before the round cleared")
			continue
		case in.exclude[lot.Node]:
			in.explainGroup(lot, ReasonExcluded, len(lot.Cards), "the node already runs a share of this job")
			continue
		case in.held[lot.Node].reason != reasonPassed:
			h := in.held[lot.Node]
			in.explainGroup(lot, h.reason, len(lot.Cards), h.detail)
			continue
		}
		p := in.scorer.survival(lot.Node, lot.Availability)
		avoid := in.avoid[lot.Node]
		var failed map[Reason]int
		var firstFail map[Reason]cardFacts
		for ci := range lot.Cards {
			c := &lot.Cards[ci]
			facts := cardFacts{model: c.Model, vendor: c.Vendor, memMiB: c.MemoryMiB, cu: c.ComputeUnits, price: c.PriceCNY, preempts: c.Preempts, simulated: c.Simulated}
			if r := in.match.check(&facts); r != reasonPassed {
				if in.explain != nil {
					if failed == nil {
						failed, firstFail = map[Reason]int{}, map[Reason]cardFacts{}
					}
					if failed[r] == 0 {
						firstFail[r] = facts
					}
					failed[r]++
				}
				continue
			}
			cands = append(cands, candidate{
				lot: li, card: ci,
				score:    in.scorer.score(c.PriceCNY, p, c.ComputeUnits),
				avoid:    avoid,
				preempts: c.Preempts,
				tie:      tieKey(in.seed, lot.Node, c.ID),
			})
			perLot[li]++
		}
		for r, k := range failed {
			f := firstFail[r]
			in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: f.model, Cards: k, Reason: r, Detail: in.match.detail(r, &f)})
		}
	}
	return cands, perLot
}

func (in *clearInput) explainGroup(lot *Lot, r Reason, cards int, detail string) {
	if in.explain == nil || cards == 0 {
		return
	}
	in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[0].Model, Cards: cards, Reason: r, Detail: detail})
}

// clearAny picks the need.Cards best cards wherever they are.
func clearAny(in clearInput, cands []candidate) clearing {
	m := in.need.Cards
	if len(cands) < m {
		return clearing{short: fmt.Sprintf("bids offer %d feasible cards, the job needs %d", len(cands), m)}
	}
	selectBest(cands, m)
	return settleAny(in, cands[:m], cands[m:], nil)
}

// settleAny prices and groups the winning cards of an any layout: won are
// the winners; lost the feasible cards that could have won instead (the
// best of them sets the price); idle the cards of winning nodes that their
// share cannot take, being of another model than it (onemodel.go).
func settleAny(in clearInput, won, lost, idle []candidate) clearing {
	res := clearing{ok: true, priceCU: -1}
	if len(lost) > 0 {
		best := &lost[0]
		for i := range lost {
			if lost[i].compare(best) < 0 {
				best = &lost[i]
			}
		}
		if !best.avoid { // non-avoided candidates rank first
			res.priceCU = best.score
		}
	}
	// With no loser, or only avoided ones, the worst winner sets the
	// price; a loser never sets it below a winner's score (with the
	// greedy choice none is; under the one-model rule, none is at the
	// optimum either, and a winner is never paid below its bid anyway).
	for i := range won {
		res.priceCU = max(res.priceCU, won[i].score)
	}
	byLot := map[int]int{} // lot → index in res.winners
	for _, c := range won {
		wi, ok := byLot[c.lot]
		if !ok {
			wi = len(res.winners)
			byLot[c.lot] = wi
			res.winners = append(res.winners, winner{lot: c.lot})
		}
		w := &res.winners[wi]
		w.cards = append(w.cards, c.card)
		w.cost += c.score
		res.cost += c.score
	}
	in.price(&res)
	if in.explain != nil {
		in.explainWinners(&res, won)
		in.explainLosers(lost, ReasonOutbid, res.priceCU)
		in.explainOtherModels(idle)
	}
	return res
}

// selectBest reorders c so that its first k elements are the k best by
// compare (in no particular order): a quickselect, linear on average,
// where a full sort of thousands of candidates would dominate a clearing.
func selectBest(c []candidate, k int) {
	lo, hi := 0, len(c)-1
	for lo < hi {
		// Median of three as the pivot, moved to hi.
		mid := lo + (hi-lo)/2
		if c[mid].compare(&c[lo]) < 0 {
			c[mid], c[lo] = c[lo], c[mid]
		}
		if c[hi].compare(&c[lo]) < 0 {
			c[hi], c[lo] = c[lo], c[hi]
		}
		if c[mid].compare(&c[hi]) < 0 {
			c[mid], c[hi] = c[hi], c[mid]
		}
		pivot := c[hi]
		store := lo
		for i := lo; i < hi; i++ {
			if c[i].compare(&pivot) < 0 {
				c[i], c[store] = c[store], c[i]
				store++
			}
		}
		c[store], c[hi] = c[hi], c[store]
		switch {
		case store == k || store == k-1:
			return
		case store < k:
			lo = store + 1
		default:
			hi = store - 1
		}
	}
}

// clearSlots picks need.Slots nodes that each give need.PerSlot cards, the
// set with the least total score. Under the one-model rule (onemodel.go) a
// node gives the PerSlot best cards of its best model group that holds
// that many.
func clearSlots(in clearInput, cands []candidate, perLot []int) clearing {
	k, s := in.need.PerSlot, in.need.Slots
	type nodeSet struct {
		lot         int
		start, n    int // the lot's cards are cands[start:start+n]
		first, size int // the group it gives from: cands[first:first+size], best first
		cost        float64
		avoid, pre  bool
		tie         uint64
		unqualified bool
		mostOfOne   int // unqualified: the most feasible cards of one model
	}
	sets := make([]nodeSet, 0, len(in.lots))
	// feasibleCards appends each lot's cards together, in lot order: only
	// each lot's own run needs sorting.
	for i := 0; i < len(cands); {
		j := i + perLot[cands[i].lot]
		run := cands[i:j]
		bounds := []int{0, len(run)}
		if in.mixed {
			slices.SortFunc(run, func(a, b candidate) int { return a.compare(&b) })
		} else {
			bounds = modelGroups(&in, run)
		}
		set := nodeSet{lot: cands[i].lot, start: i, n: j - i, avoid: cands[i].avoid, tie: tieKey(in.seed, in.lots[cands[i].lot].Node, ""), unqualified: true}
		for g := 0; g+1 < len(bounds); g++ {
			group := run[bounds[g]:bounds[g+1]]
			set.mostOfOne = max(set.mostOfOne, len(group))
			if len(group) < k {
				continue
			}
			cost, pre := 0.0, false
			for _, c := range group[:k] {
				cost += c.score
				pre = pre || c.preempts
			}
			if set.unqualified || cost < set.cost {
				set.unqualified, set.first, set.size, set.cost, set.pre = false, i+bounds[g], len(group), cost, pre
			}
		}
		sets = append(sets, set)
		i = j
	}
	qualified := sets[:0:0]
	for _, set := range sets {
		if set.unqualified {
			if in.explain != nil {
				lot := &in.lots[set.lot]
				run := cands[set.start : set.start+set.n]
				best := slices.MinFunc(run, func(a, b candidate) int { return a.compare(&b) })
				detail := fmt.Sprintf("%s, the layout needs %d on one node", text.Count(set.n, "feasible card"), k)
				if set.mostOfOne < set.n {
					detail = fmt.Sprintf("%s, at most %d of one model; the layout needs %d of one model on one node", text.Count(set.n, "feasible card"), set.mostOfOne, k)
				}
				in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[best.card].Model, Cards: set.n,
					Reason: ReasonLayout, Score: best.score, Detail: detail})
			}
			continue
		}
		qualified = append(qualified, set)
	}
	if len(qualified) < s {
		return clearing{short: fmt.Sprintf("bids offer %s with %s, the job needs %d", text.Count(len(qualified), "node"), text.Count(k, "feasible card"), s)}
	}
	slices.SortFunc(qualified, func(a, b nodeSet) int {
		if a.avoid != b.avoid {
			if a.avoid {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.cost, b.cost); c != 0 {
			return c
		}
		if a.pre != b.pre {
			if a.pre {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.tie, b.tie)
	})
	winners, losers := qualified[:s], qualified[s:]
	passedOver := 0 // losers[:passedOver] rank above a winner: passed over for their region
	if in.spread != nil {
		picked, rest := spreadOver(len(qualified), s,
			func(i int) string { return in.lots[qualified[i].lot].Region },
			func(i int) bool { return qualified[i].avoid }, in.spread)
		winners, losers = make([]nodeSet, 0, s), make([]nodeSet, 0, len(rest))
		for _, i := range picked {
			winners = append(winners, qualified[i])
		}
		for _, i := range rest {
			losers = append(losers, qualified[i])
			if i < picked[len(picked)-1] {
				passedOver++
			}
		}
	}
	res := clearing{ok: true, priceCU: -1}
	worst := 0.0
	for _, set := range winners {
		w := winner{lot: set.lot, cost: set.cost}
		for _, c := range cands[set.first : set.first+k] {
			w.cards = append(w.cards, c.card)
		}
		res.winners = append(res.winners, w)
		res.cost += set.cost
		worst = max(worst, set.cost/float64(k))
	}
	if len(losers) > 0 && !losers[0].avoid { // in rank order: non-avoided first, best first
		res.priceCU = losers[0].cost / float64(k)
	}
	// With no loser, or only avoided ones, the worst winner sets the
	// price; so it does when a cheaper loser was passed over for its
	// region: a uniform price below a winner's score would pay that
	// winner its bid only.
	res.priceCU = max(res.priceCU, worst)
	in.price(&res)
	if in.explain != nil {
		var won []candidate
		for _, set := range winners {
			won = append(won, cands[set.first:set.first+k]...)
			in.explainLot(cands[set.first+k:set.first+set.size], ReasonNotNeeded, res.priceCU)
			other := slices.Concat(cands[set.start:set.first], cands[set.first+set.size:set.start+set.n])
			in.explainOtherModels(other)
		}
		in.explainWinners(&res, won)
		for i, set := range losers {
			lot := cands[set.first : set.first+set.size]
			if i < passedOver && !set.avoid {
				c := &lot[0]
				l := &in.lots[c.lot]
				detail := fmt.Sprintf("region %s holds a replica already; a node in another region won", l.Region)
				if l.Region == "" {
					detail = "the node advertises no region; nodes in regions without a replica won"
				}
				in.explain.add(ExplainEntry{Stage: "bid", Node: l.Node, Model: l.Cards[c.card].Model, Cards: len(lot),
					Reason: ReasonRegion, Score: c.score, Detail: detail})
				continue
			}
			in.explainLot(lot, ReasonOutbid, res.priceCU)
		}
	}
	return res
}

// price fills each winner card's pay from the clearing price.
func (in *clearInput) price(res *clearing) {
	for wi := range res.winners {
		w := &res.winners[wi]
		lot := &in.lots[w.lot]
		p := in.scorer.survival(lot.Node, lot.Availability)
		w.pay = make([]float64, len(w.cards))
		for i, ci := range w.cards {
			c := &lot.Cards[ci]
			w.pay[i] = in.scorer.pay(res.priceCU, p, c.ComputeUnits, c.PriceCNY, in.maxPrice)
		}
	}
}

func (in *clearInput) explainWinners(res *clearing, won []candidate) {
	best := make([]float64, len(in.lots))
	for _, c := range won {
		if b := best[c.lot]; b == 0 || c.score < b {
			best[c.lot] = c.score
		}
	}
	for _, w := range res.winners {
		lot := &in.lots[w.lot]
		mean := 0.0
		for _, p := range w.pay {
			mean += p
		}
		sim := false
		for _, ci := range w.cards {
			sim = sim || lot.Cards[ci].Simulated
		}
		in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[w.cards[0]].Model, Cards: len(w.cards),
			Reason: ReasonWon, Score: best[w.lot], pay: mean / float64(len(w.pay)), simulated: sim})
	}
}

// explainLot adds one entry for cands, the losing cards of one lot, best
// first.
func (in *clearInput) explainLot(cands []candidate, r Reason, priceCU float64) {
	if len(cands) == 0 {
		return
	}
	c := &cands[0]
	reason := r
	if c.avoid && r == ReasonOutbid {
		reason = ReasonAvoided
	}
	lot := &in.lots[c.lot]
	in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[c.card].Model, Cards: len(cands), Reason: reason, Score: c.score, priceCU: priceCU})
}

// explainLosers adds one entry per lot for cands (of many lots, any order).
func (in *clearInput) explainLosers(cands []candidate, r Reason, priceCU float64) {
	type group struct {
		lot, card, n int
		best         float64
		avoid        bool
	}
	var groups []group
	at := make([]int32, len(in.lots)) // lot → 1 + index in groups
	for _, c := range cands {
		gi := int(at[c.lot]) - 1
		if gi < 0 {
			gi = len(groups)
			at[c.lot] = int32(gi + 1)
			groups = append(groups, group{lot: c.lot, card: c.card, best: c.score, avoid: c.avoid})
		}
		g := &groups[gi]
		g.n++
		if c.score < g.best {
			g.best, g.card = c.score, c.card
		}
	}
	for _, g := range groups {
		lot := &in.lots[g.lot]
		reason := r
		if g.avoid && r == ReasonOutbid {
			reason = ReasonAvoided
		}
		in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[g.card].Model, Cards: g.n, Reason: reason, Score: g.best, priceCU: priceCU})
	}
}
