package market

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// The one-model rule: unless the job says otherwise (JobSpec.MixedModels),
// a share's cards are of one model. A share is what one node gives a job,
// so a winner takes its cards from one model group of its bid: the bid's
// feasible cards of one model.
//
// For slot layouts (clearSlots) a node's cost is that of its best group
// holding PerSlot cards. For the any layout, the cheapest cards anywhere
// (clearAny's greedy choice) may take two models of one node; instead:
//
//   - A node whose feasible cards are all of one model ("pure") puts them
//     in one pool: taking the q best of the pool is the best use of q
//     cards from those nodes (each node's cost grows with each card it
//     gives, so their sum is a greedy choice).
//   - A node with feasible cards of several models ("mixed") gives t cards
//     of one of its groups, or none: a dynamic program over these nodes
//     finds the best cost of h cards from them, for every h.
//   - The answer is the best h plus the pool's m − h best.
//
// Costs compare as (avoided cards, score): a node to avoid wins only when
// nothing else will do, as in clearAny. The dynamic program is over the
// mixed nodes only, so a round of single-model nodes (most suppliers) pays
// nothing for the rule. reference_test.go checks it against brute force.

// anyLotMixes reports whether some lot has feasible cards of more than one
// model. cands holds each lot's feasible cards together, in lot order.
func anyLotMixes(in clearInput, cands []candidate, perLot []int) bool {
	for i := 0; i < len(cands); {
		lot := &in.lots[cands[i].lot]
		j := i + perLot[cands[i].lot]
		first := lot.Cards[cands[i].card].Model
		for _, c := range cands[i+1 : j] {
			if lot.Cards[c.card].Model != first {
				return true
			}
		}
		i = j
	}
	return false
}

// modelGroups sorts one lot's candidates by model, then best first, and
// returns the bounds of each model's run: run k is run[bounds[k]:bounds[k+1]].
func modelGroups(in *clearInput, run []candidate) []int {
	lot := &in.lots[run[0].lot]
	one := true // the usual case: a node of one model
	for _, c := range run[1:] {
		if lot.Cards[c.card].Model != lot.Cards[run[0].card].Model {
			one = false
			break
		}
	}
	if one {
		slices.SortFunc(run, func(a, b candidate) int { return a.compare(&b) })
		return []int{0, len(run)}
	}
	slices.SortFunc(run, func(a, b candidate) int {
		if c := cmp.Compare(lot.Cards[a.card].Model, lot.Cards[b.card].Model); c != 0 {
			return c
		}
		return a.compare(&b)
	})
	bounds := []int{0}
	for k := 1; k < len(run); k++ {
		if lot.Cards[run[k].card].Model != lot.Cards[run[k-1].card].Model {
			bounds = append(bounds, k)
		}
	}
	return append(bounds, len(run))
}

// pairCost is a cost compared as (cards on avoided nodes, score).
type pairCost struct {
	avoided int
	score   float64
}

// unreachable marks a pairCost no choice attains.
const unreachable = math.MaxInt

func (a pairCost) reachable() bool { return a.avoided != unreachable }

func (a pairCost) less(b pairCost) bool {
	if a.avoided != b.avoided {
		return a.avoided < b.avoided
	}
	return a.score < b.score
}

func (a pairCost) plus(c *candidate) pairCost {
	a.score += c.score
	if c.avoid {
		a.avoided++
	}
	return a
}

// modelPick is a mixed node's choice in the dynamic program: t cards of
// its group g (t == 0: none).
type modelPick struct{ g, t int32 }

// clearAnyOneModel is clearAny under the one-model rule (see above).
func clearAnyOneModel(in clearInput, cands []candidate, perLot []int) clearing {
	m := in.need.Cards
	var pool []candidate
	type mixedLot struct {
		run    []candidate
		bounds []int
	}
	var mixed []mixedLot
	most := 0 // the most cards the mixed nodes can give
	for i := 0; i < len(cands); {
		j := i + perLot[cands[i].lot]
		run := cands[i:j]
		bounds := modelGroups(&in, run)
		if len(bounds) == 2 {
			pool = append(pool, run...)
		} else {
			mixed = append(mixed, mixedLot{run, bounds})
			big := 0
			for k := 0; k+1 < len(bounds); k++ {
				big = max(big, bounds[k+1]-bounds[k])
			}
			most += big
		}
		i = j
	}
	if len(pool)+most < m {
		return clearing{short: fmt.Sprintf("bids offer %d feasible cards of one model per node, the job needs %d", len(pool)+most, m)}
	}
	slices.SortFunc(pool, func(a, b candidate) int { return a.compare(&b) })

	// best[h]: the least cost of h cards from the mixed nodes seen so far;
	// picks[n][h]: what mixed node n gives in it.
	H := min(m, most)
	best := make([]pairCost, H+1)
	for h := range best {
		best[h] = pairCost{avoided: unreachable}
	}
	best[0] = pairCost{}
	picks := make([][]modelPick, len(mixed))
	for n, ml := range mixed {
		next := slices.Clone(best)
		pick := make([]modelPick, H+1)
		for g := 0; g+1 < len(ml.bounds); g++ {
			group := ml.run[ml.bounds[g]:ml.bounds[g+1]]
			prefix := pairCost{}
			for t := 1; t <= len(group) && t <= H; t++ {
				prefix = prefix.plus(&group[t-1])
				for h := 0; h+t <= H; h++ {
					if !best[h].reachable() {
						continue
					}
					c := pairCost{best[h].avoided + prefix.avoided, best[h].score + prefix.score}
					if c.less(next[h+t]) {
						next[h+t], pick[h+t] = c, modelPick{int32(g), int32(t)}
					}
				}
			}
		}
		best, picks[n] = next, pick
	}
	// The pool's prefix costs, and the best split between the two.
	poolCost := make([]pairCost, min(m, len(pool))+1)
	for q := 1; q < len(poolCost); q++ {
		poolCost[q] = poolCost[q-1].plus(&pool[q-1])
	}
	split, total := -1, pairCost{avoided: unreachable}
	for h := max(0, m-len(pool)); h <= H; h++ {
		if !best[h].reachable() {
			continue
		}
		c := pairCost{best[h].avoided + poolCost[m-h].avoided, best[h].score + poolCost[m-h].score}
		if c.less(total) {
			split, total = h, c
		}
	}
	if split < 0 { // cannot happen: len(pool)+most >= m
		return clearing{short: fmt.Sprintf("bids offer no set of %d feasible cards of one model per node", m)}
	}
	won := slices.Clone(pool[:m-split])
	lost := slices.Clone(pool[m-split:])
	var idle []candidate
	for n, h := len(mixed)-1, split; n >= 0; n-- {
		ml, p := mixed[n], picks[n][h]
		if p.t == 0 {
			lost = append(lost, ml.run...) // it could have won: its cards are losers
			continue
		}
		for g := 0; g+1 < len(ml.bounds); g++ {
			group := ml.run[ml.bounds[g]:ml.bounds[g+1]]
			if g != int(p.g) {
				idle = append(idle, group...)
				continue
			}
			won = append(won, group[:p.t]...)
			lost = append(lost, group[p.t:]...)
		}
		h -= int(p.t)
	}
	return settleAny(in, won, lost, idle)
}

// explainOtherModels adds one entry per lot for cards of a winning node
// that its share left out for being of another model.
func (in *clearInput) explainOtherModels(idle []candidate) {
	for i := 0; i < len(idle); {
		j := i + 1
		for j < len(idle) && idle[j].lot == idle[i].lot {
			j++
		}
		lot := &in.lots[idle[i].lot]
		in.explain.add(ExplainEntry{Stage: "bid", Node: lot.Node, Model: lot.Cards[idle[i].card].Model, Cards: j - i, Reason: ReasonNotNeeded,
			Score: idle[i].score, Detail: "the node won with cards of another model; a share's cards are of one model unless the job allows mixed models"})
		i = j
	}
}
