package market

import (
	"math"
	"path"
	"slices"
	"time"
)

// This file holds naive reference solvers that the fast clearing is checked
// against. They share no code with clear.go, feasible.go or rank.go: the
// checks and the scoring are written again here, plainly.

type refParams struct {
	filter      Filter
	duration    time.Duration
	unknownMTBF time.Duration
	unknownCU   float64
	exclude     map[string]bool
	// mixed lets one node's cards in a solution be of several models;
	// false: each node gives cards of one model (the one-model rule).
	mixed bool
}

func (rp *refParams) feasible(c BidCard) bool {
	f := rp.filter
	if len(f.Models) > 0 {
		ok := false
		for _, m := range f.Models {
			if hit, _ := path.Match(m, c.Model); hit || m == c.Model {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	if len(f.Vendors) > 0 && !slices.Contains(f.Vendors, c.Vendor) {
		return false
	}
	gib := (c.MemoryMiB + 512) / 1024
	if gib*1024 < f.MinMemoryMiB {
		return false
	}
	if f.MinComputeUnits > 0 && c.ComputeUnits < f.MinComputeUnits {
		return false
	}
	if c.PriceCNY > f.MaxPriceCNY {
		return false
	}
	if c.Preempts && f.Preemptible {
		return false
	}
	return true
}

func (rp *refParams) score(lot *Lot, c BidCard) float64 {
	mtbf := lot.Availability.MTBF.Std()
	if mtbf <= 0 {
		mtbf = rp.unknownMTBF
	}
	p := math.Exp(-rp.duration.Hours() / mtbf.Hours())
	if p < 1e-6 {
		p = 1e-6
	}
	cu := c.ComputeUnits
	if cu <= 0 {
		cu = rp.unknownCU
	}
	return c.PriceCNY / (p * cu)
}

// perNodeScores returns, for every lot that may win, its feasible cards'
// scores in ascending order.
func (rp *refParams) perNodeScores(lots []Lot) [][]float64 {
	var out [][]float64
	for _, groups := range rp.perNodeGroups(lots) {
		var s []float64
		for _, g := range groups {
			s = append(s, g...)
		}
		slices.Sort(s)
		out = append(out, s)
	}
	return out
}

// perNodeGroups returns, for every lot that may win, the groups of cards
// one share may take from it, each group's scores in ascending order: one
// group per model, or, when mixed, one group of all its feasible cards.
func (rp *refParams) perNodeGroups(lots []Lot) [][][]float64 {
	var out [][][]float64
	for i := range lots {
		lot := &lots[i]
		if lot.Expired || rp.exclude[lot.Node] {
			continue
		}
		byModel := map[string][]float64{}
		var models []string
		for _, c := range lot.Cards {
			if !rp.feasible(c) {
				continue
			}
			key := c.Model
			if rp.mixed {
				key = "*"
			}
			if _, seen := byModel[key]; !seen {
				models = append(models, key)
			}
			byModel[key] = append(byModel[key], rp.score(lot, c))
		}
		var groups [][]float64
		for _, m := range models {
			s := byModel[m]
			slices.Sort(s)
			groups = append(groups, s)
		}
		out = append(out, groups)
	}
	return out
}

// bruteForce tries every subset of cards and returns the least total score
// of a subset that satisfies need, and whether one exists. Only for small
// instances (it is exponential in the number of cards).
func bruteForce(lots []Lot, need Need, rp *refParams) (float64, bool) {
	type card struct {
		node  int
		model string
		score float64
		ok    bool
	}
	var cards []card
	for i := range lots {
		lot := &lots[i]
		for _, c := range lot.Cards {
			ok := !lot.Expired && !rp.exclude[lot.Node] && rp.feasible(c)
			cards = append(cards, card{node: i, model: c.Model, score: rp.score(lot, c), ok: ok})
		}
	}
	best, found := math.Inf(1), false
	perNode := make([]int, len(lots))
	nodeModel := make([]string, len(lots))
	for mask := 0; mask < 1<<len(cards); mask++ {
		clear(perNode)
		clear(nodeModel)
		cost, n, valid := 0.0, 0, true
		for i, c := range cards {
			if mask&(1<<i) == 0 {
				continue
			}
			if !c.ok {
				valid = false
				break
			}
			if !rp.mixed && perNode[c.node] > 0 && nodeModel[c.node] != c.model {
				valid = false // one node's cards of two models: the one-model rule
				break
			}
			nodeModel[c.node] = c.model
			cost += c.score
			perNode[c.node]++
			n++
		}
		if !valid {
			continue
		}
		if need.Cards > 0 {
			valid = n == need.Cards
		} else {
			nodes := 0
			for _, k := range perNode {
				switch k {
				case 0:
				case need.PerSlot:
					nodes++
				default:
					valid = false
				}
			}
			valid = valid && nodes == need.Slots
		}
		if valid && cost < best {
			best, found = cost, true
		}
	}
	return best, found
}

// dpOptimum solves the same problem by dynamic programming over nodes: how
// many cards each node gives (any layout) or which nodes give exactly
// PerSlot cards (slot layouts). Polynomial, for the large instances of the
// quality benchmark.
func dpOptimum(lots []Lot, need Need, rp *refParams) (float64, bool) {
	nodes := rp.perNodeGroups(lots)
	inf := math.Inf(1)
	if need.Cards > 0 {
		m := need.Cards
		dp := make([]float64, m+1)
		for i := range dp {
			dp[i] = inf
		}
		dp[0] = 0
		for _, groups := range nodes {
			next := slices.Clone(dp)
			for _, s := range groups { // the node gives cards of one group
				prefix := 0.0
				for take := 1; take <= len(s); take++ {
					prefix += s[take-1]
					for have := 0; have+take <= m; have++ {
						if dp[have] < inf && dp[have]+prefix < next[have+take] {
							next[have+take] = dp[have] + prefix
						}
					}
				}
			}
			dp = next
		}
		return dp[m], dp[m] < inf
	}
	k, slots := need.PerSlot, need.Slots
	dp := make([]float64, slots+1)
	for i := range dp {
		dp[i] = inf
	}
	dp[0] = 0
	for _, groups := range nodes {
		cost := inf // the node's best group of k cards
		for _, s := range groups {
			if len(s) < k {
				continue
			}
			c := 0.0
			for _, v := range s[:k] {
				c += v
			}
			cost = min(cost, c)
		}
		if cost == inf {
			continue
		}
		for j := slots; j >= 1; j-- {
			if dp[j-1] < inf && dp[j-1]+cost < dp[j] {
				dp[j] = dp[j-1] + cost
			}
		}
	}
	return dp[slots], dp[slots] < inf
}
