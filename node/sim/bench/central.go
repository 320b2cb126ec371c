package bench

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// central is the quality scenario's baseline: an ideal central matcher
// with perfect, instant knowledge of every card. For a job it picks, among
// the cards free at that moment, the set that satisfies the job's layout
// at the least total effective price (the market's own objective: price /
// (survival over the job's duration × compute units)). It shares no code
// with the market's clearing.
type central struct {
	nodes       []*centralNode
	unknownMTBF time.Duration
	unknownCU   float64
}

type centralNode struct {
	id    string
	mtbf  time.Duration
	cards []centralCard
}

type centralCard struct {
	id        string
	memoryMiB uint64
	cu        float64
	price     float64
	busy      bool
}

// centralPick is one card a placement takes.
type centralPick struct {
	node  *centralNode
	card  int // index in node.cards
	score float64
}

// feasible reports whether a card may serve spec: the part of the market's
// filter the quality workload uses (max price, least memory counted in
// whole GiB as it rounds).
func (c *central) feasible(spec *market.JobSpec, card *centralCard) bool {
	gib := (card.memoryMiB + 512) / 1024
	return !card.busy && card.price <= spec.MaxPriceCNY && gib*1024 >= spec.MinMemoryMiB &&
		(spec.MinComputeUnits == 0 || card.cu >= spec.MinComputeUnits)
}

// score is a card's effective price for spec on node n.
func (c *central) score(spec *market.JobSpec, n *centralNode, card *centralCard) float64 {
	mtbf := n.mtbf
	if mtbf <= 0 {
		mtbf = c.unknownMTBF
	}
	d := spec.ExpectedDuration.Std()
	if d <= 0 {
		d = time.Hour
	}
	surv := math.Max(math.Exp(-d.Hours()/mtbf.Hours()), 1e-6)
	cu := card.cu
	if cu <= 0 {
		cu = c.unknownCU
	}
	return card.price / (surv * cu)
}

// place chooses the cheapest feasible placement of spec among the free
// cards; ok is false when none exists. It changes nothing (see setBusy).
func (c *central) place(spec *market.JobSpec) (picks []centralPick, ok bool) {
	perNode := make([][]centralPick, 0, len(c.nodes)) // each node's feasible cards, cheapest first
	for _, n := range c.nodes {
		var ps []centralPick
		for i := range n.cards {
			if c.feasible(spec, &n.cards[i]) {
				ps = append(ps, centralPick{node: n, card: i, score: c.score(spec, n, &n.cards[i])})
			}
		}
		slices.SortFunc(ps, func(a, b centralPick) int { return cmp.Compare(a.score, b.score) })
		perNode = append(perNode, ps)
	}
	switch spec.Layout.Mode {
	case market.LayoutPerNode, market.LayoutOneNode:
		k := spec.Cards
		if spec.Layout.Mode == market.LayoutPerNode {
			k = spec.Layout.PerNode
		}
		slots := spec.Cards / k
		type slot struct {
			picks []centralPick
			cost  float64
		}
		var cand []slot
		for _, ps := range perNode {
			if len(ps) < k {
				continue
			}
			s := slot{picks: ps[:k]}
			for _, p := range s.picks {
				s.cost += p.score
			}
			cand = append(cand, s)
		}
		if len(cand) < slots {
			return nil, false
		}
		slices.SortStableFunc(cand, func(a, b slot) int { return cmp.Compare(a.cost, b.cost) })
		for _, s := range cand[:slots] {
			picks = append(picks, s.picks...)
		}
	default:
		var all []centralPick
		for _, ps := range perNode {
			all = append(all, ps...)
		}
		if len(all) < spec.Cards {
			return nil, false
		}
		slices.SortStableFunc(all, func(a, b centralPick) int { return cmp.Compare(a.score, b.score) })
		picks = all[:spec.Cards]
	}
	return picks, true
}

// setBusy marks the cards with these IDs busy.
func (c *central) setBusy(ids []string) {
	for _, n := range c.nodes {
		for i := range n.cards {
			if slices.Contains(ids, n.cards[i].id) {
				n.cards[i].busy = true
			}
		}
	}
}
