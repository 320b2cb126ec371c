package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// bruteCentral tries every subset of the free feasible cards and returns
// the least total score of one that satisfies spec's layout.
func bruteCentral(c *central, spec *market.JobSpec) (float64, bool) {
	type card struct {
		node  int
		score float64
	}
	var cards []card
	for i, n := range c.nodes {
		for k := range n.cards {
			if c.feasible(spec, &n.cards[k]) {
				cards = append(cards, card{i, c.score(spec, n, &n.cards[k])})
			}
		}
	}
	best, ok := math.Inf(1), false
	for mask := 0; mask < 1<<len(cards); mask++ {
		per := map[int]int{}
		total, count := 0.0, 0
		for i, cd := range cards {
			if mask&(1<<i) != 0 {
				per[cd.node]++
				total += cd.score
				count++
			}
		}
		if count != spec.Cards {
			continue
		}
		switch spec.Layout.Mode {
		case market.LayoutPerNode:
			fits := true
			for _, v := range per {
				fits = fits && v == spec.Layout.PerNode
			}
			if !fits {
				continue
			}
		case market.LayoutOneNode:
			if len(per) != 1 {
				continue
			}
		}
		if total < best {
			best, ok = total, true
		}
	}
	return best, ok
}

// The central matcher finds the cheapest placement: the same cost as
// trying every subset, on random small meshes with some cards busy.
func TestCentralIsOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for inst := range 300 {
		c := &central{unknownMTBF: 6 * time.Hour, unknownCU: 0.1}
		for i := range 1 + r.IntN(5) {
			n := &centralNode{id: fmt.Sprintf("n%d", i), mtbf: time.Duration(r.IntN(100)) * time.Hour}
			for k := range 1 + r.IntN(4) {
				n.cards = append(n.cards, centralCard{id: fmt.Sprintf("n%d-%d", i, k), memoryMiB: uint64(16+r.IntN(64)) << 10,
					cu: float64(r.IntN(4)) / 2, price: 1 + float64(r.IntN(20)), busy: r.IntN(5) == 0})
			}
			c.nodes = append(c.nodes, n)
		}
		spec := market.JobSpec{ID: "j", MaxPriceCNY: 15, ExpectedDuration: market.Duration(time.Duration(1+r.IntN(24)) * time.Hour)}
		if r.IntN(3) == 0 {
			spec.MinMemoryMiB = 32 << 10
		}
		switch r.IntN(3) {
		case 0:
			spec.Cards = 1 + r.IntN(6)
		case 1:
			k := 1 + r.IntN(2)
			spec.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: k}
			spec.Cards = k * (1 + r.IntN(3))
		case 2:
			spec.Layout.Mode = market.LayoutOneNode
			spec.Cards = 1 + r.IntN(3)
		}
		want, wantOK := bruteCentral(c, &spec)
		picks, ok := c.place(&spec)
		if ok != wantOK {
			t.Fatalf("instance %d (%+v): placed %v, brute force %v", inst, spec.Layout, ok, wantOK)
		}
		if !ok {
			continue
		}
		got := 0.0
		seen := map[string]bool{}
		for _, p := range picks {
			card := p.node.cards[p.card]
			if card.busy || seen[card.id] || !c.feasible(&spec, &card) {
				t.Fatalf("instance %d: picked %+v (busy, twice or infeasible)", inst, card)
			}
			seen[card.id] = true
			got += p.score
		}
		if len(picks) != spec.Cards || math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Fatalf("instance %d (%d cards %+v): %d picks costing %v, optimum %v", inst, spec.Cards, spec.Layout, len(picks), got, want)
		}
	}
}

// setBusy takes cards out of later placements.
func TestCentralSetBusy(t *testing.T) {
	c := &central{unknownMTBF: time.Hour, unknownCU: 1}
	c.nodes = []*centralNode{{id: "a", cards: []centralCard{{id: "a0", cu: 1, price: 1}, {id: "a1", cu: 1, price: 2}}}}
	spec := market.JobSpec{Cards: 1, MaxPriceCNY: 10}
	p, _ := c.place(&spec)
	if p[0].node.cards[p[0].card].id != "a0" {
		t.Fatalf("picked %+v, want the cheaper a0", p[0])
	}
	c.setBusy([]string{"a0"})
	if p, _ = c.place(&spec); p[0].node.cards[p[0].card].id != "a1" {
		t.Fatalf("picked %+v after a0 went busy", p[0])
	}
	c.setBusy([]string{"a1"})
	if _, ok := c.place(&spec); ok {
		t.Fatal("placed on a full node")
	}
}
