package market_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// rankedMesh is a coordinator with no cards and n suppliers s00, s01, ...
// of perNode A100s each, equally available, s00 the cheapest and each next
// one 0.10 CNY dearer: the book ranks them by name. cfg adjusts every
// node's config.
func rankedMesh(t *testing.T, n, perNode int, cfg func(*market.Config)) *markettest.Harness {
	t.Helper()
	h := markettest.New(markettest.Options{})
	c := market.DefaultConfig("coord")
	if cfg != nil {
		cfg(&c)
	}
	h.MustAdd(c)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("s%02d", i)
		c := market.DefaultConfig(id)
		c.Cards = markettest.MustCards(id, fmt.Sprintf("a100-80g:%d", perNode))
		c.Prices.PerModel = map[string]float64{"a100-80g": 10 + 0.1*float64(i)}
		c.Availability.MTBF = market.Duration(100 * time.Hour)
		if cfg != nil {
			cfg(&c)
		}
		h.MustAdd(c)
	}
	return h
}

type askSent struct {
	node string
	want int
}

// firstAsks submits a job for cards cards to coord and returns the bid
// requests its first round sent, in order, before any is delivered.
func firstAsks(t *testing.T, h *markettest.Harness, job string, cards int) []askSent {
	t.Helper()
	var asks []askSent
	h.OnReady = func(p *markettest.Peer, rd market.Ready) {
		for _, m := range rd.Messages {
			if r, ok := m.Payload.(*market.BidRequest); ok && p.ID == "coord" && r.Job == job {
				if m.To == market.Broadcast {
					t.Fatalf("job %s broadcast its request: the book should satisfy it", job)
				}
				asks = append(asks, askSent{m.To, r.Want})
			}
		}
	}
	defer func() { h.OnReady = nil }()
	if err := h.SubmitAt("coord", market.JobSpec{ID: job, Cards: cards, MaxPriceCNY: 40, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	return asks
}

// TestSparesBeyondTheNeed checks the size of the candidate set a round
// asks (select.go, Sparrow-style): the best nodes that cover the need,
// then more, one node at a time, until the asked hold at least
// SpareFactor × the cards needed and SpareNodes nodes beyond those needed.
// A node is asked for at most the cards the job needs.
func TestSparesBeyondTheNeed(t *testing.T) {
	for _, tc := range []struct {
		perNode, need int
		factor        float64
		spareNodes    int
		needed, asks  int // nodes that cover the need; nodes asked
		why           string
	}{
		{1, 1, 1.5, 2, 1, 3, "2 spare cards are in before the 2 spare nodes"},
		{4, 1, 1.5, 2, 1, 3, "a node with 4 free cards still counts as one spare node"},
		{4, 2, 1.5, 2, 1, 3, "1 node covers 2 cards; 2 spare nodes"},
		{4, 8, 1.5, 2, 2, 4, "12 cards after 3 nodes, but 2 spare nodes make 4"},
		{4, 10, 1.5, 2, 3, 5, "3 nodes cover 10; 15 cards after 4; 2 spare nodes make 5"},
		{1, 8, 1.5, 2, 8, 12, "12 cards take 12 one-card nodes, 4 beyond the need"},
		{4, 8, 1, 0, 2, 2, "no spares"},
		{4, 8, 3, 0, 2, 6, "24 cards take 6 nodes"},
		{4, 8, 1, 5, 2, 7, "5 spare nodes"},
	} {
		name := fmt.Sprintf("%dper-node/need%d/factor%g/nodes%d", tc.perNode, tc.need, tc.factor, tc.spareNodes)
		t.Run(name, func(t *testing.T) {
			h := rankedMesh(t, 20, tc.perNode, func(c *market.Config) { c.SpareFactor, c.SpareNodes = tc.factor, tc.spareNodes })
			asks := firstAsks(t, h, "j1", tc.need)
			if len(asks) != tc.asks {
				t.Fatalf("asked %d nodes %v, want %d (%s)", len(asks), asks, tc.asks, tc.why)
			}
			cards := 0
			for i, a := range asks {
				if a.want != min(tc.perNode, tc.need) {
					t.Errorf("asked %s for %d cards, want %d", a.node, a.want, min(tc.perNode, tc.need))
				}
				cards += a.want
				if i < tc.needed && a.node != fmt.Sprintf("s%02d", i) {
					t.Errorf("ask %d went to %s: the best nodes, which cover the need, come first (%v)", i, a.node, asks)
				}
			}
			if min := int(math.Ceil(float64(tc.need) * tc.factor)); cards < min {
				t.Errorf("asked for %d cards in all, want at least %d", cards, min)
			}
		})
	}
}

// TestSparesAreDrawnPerJob checks that the spares are drawn at random,
// seeded by the job: jobs that see the same book ask the same best node
// but spread their spares, and one job asks the same nodes every time.
func TestSparesAreDrawnPerJob(t *testing.T) {
	h := rankedMesh(t, 20, 4, nil)
	pairs := map[string]bool{}
	var first []askSent
	for i := 0; i < 30; i++ { // submitted at one instant: every job sees the same book
		asks := firstAsks(t, h, fmt.Sprintf("j%02d", i), 1)
		if len(asks) != 3 || asks[0].node != "s00" {
			t.Fatalf("job j%02d asked %v, want s00 and 2 spares", i, asks)
		}
		spares := []string{asks[1].node, asks[2].node}
		slices.Sort(spares)
		pairs[fmt.Sprint(spares)] = true
		if i == 0 {
			first = asks
		}
	}
	if len(pairs) < 5 {
		t.Errorf("30 jobs drew only %d different spare pairs: %v", len(pairs), pairs)
	}
	again := firstAsks(t, rankedMesh(t, 20, 4, nil), "j00", 1)
	if !slices.Equal(again, first) {
		t.Errorf("job j00 asked %v in one mesh and %v in the same mesh built again", first, again)
	}
}
