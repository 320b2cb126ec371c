package node

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
)

func TestOnlyReservations(t *testing.T) {
	supply := func(states ...gossip.CardState) gossip.Supply {
		var s gossip.Supply
		for i, st := range states {
			s.Cards = append(s.Cards, gossip.SupplyCard{Card: device.Card{ID: string(rune('a' + i))}, State: st})
		}
		return s
	}
	free, res, busy := gossip.CardFree, gossip.CardReserved, gossip.CardBusy
	published := statesOf(supply(free, free, busy))
	other := supply(free, free, busy)
	other.Cards[2].Card.ID = "z"
	for _, c := range []struct {
		name       string
		now        gossip.Supply
		only, same bool
	}{
		{"nothing changed", supply(free, free, busy), true, true},
		{"a card reserved for a bid", supply(res, free, busy), true, false},
		{"both reserved", supply(res, res, busy), true, false},
		{"a reserved card runs", supply(busy, free, busy), false, false},
		{"a busy card freed", supply(free, free, free), false, false},
		{"a card gone (unhealthy)", supply(free, free), false, false},
		{"a card added", supply(free, free, busy, free), false, false},
		{"a card replaced by another", other, false, false},
	} {
		if got := onlyReservations(published, supplyStates(c.now)); got != c.only {
			t.Errorf("%s: onlyReservations = %v, want %v", c.name, got, c.only)
		}
		if got := sameStates(published, supplyStates(c.now)); got != c.same {
			t.Errorf("%s: sameStates = %v, want %v", c.name, got, c.same)
		}
	}
	if onlyReservations(nil, supplyStates(supply(free))) {
		t.Error("nothing published yet: a first ad must not wait")
	}
	if sameStates(nil, supplyStates(supply(free))) || !sameStates(nil, supplyStates(supply())) {
		t.Error("nothing published yet is the same as no card, and only that")
	}
	back := statesOf(supply(res, free, busy))
	if !onlyReservations(back, supplyStates(supply(free, free, busy))) {
		t.Error("a released reservation is a reservation change")
	}
}

// A one-card placement costs its supplier one capacity ad (its card busy),
// not two (reserved for the bid, then busy): the reservation is settled by
// the award before it would be advertised.
func TestAPlacementCostsTheWinnerOneAd(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1")
	coord, sup := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(sup)
	sm.waitBook(coord, 1)
	published := func() uint64 {
		var total uint64
		for _, ts := range sup.GossipStats().Topics {
			total += ts.Published
		}
		return total
	}
	// An ad held back goes out within a settle period: the count is
	// steady once a whole period passed without one (what start-up and
	// neverCoordinate published). The test asserts that an ad does not
	// come, so it has to let those periods pass.
	window := sup.reserveSettle + 300*time.Millisecond
	steady := func() uint64 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := published()
			time.Sleep(window) // a whole settle period, watching for an ad
			if published() == n {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatal("the supplier's ads never settled")
			}
		}
	}
	before := steady()

	spec := market.JobSpec{AllowSimulated: true, ID: "one", Cards: 1, MaxPriceCNY: 30, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, "one", 10*time.Second, market.JobRunning)
	eventually(t, 5*time.Second, "the coordinator's book shows the card busy", func() bool {
		_, free := coord.BookCards()
		return free == 0
	})
	if got := steady() - before; got != 1 {
		t.Errorf("the supplier published %d ads for one placement, want 1", got)
	}
}

// Only the free count may be held back: every other field of the summary
// (a standby or coordinator flag, the cards, models, region) goes out at once.
func TestSameSummaryDiffersInAllButTheFreeCount(t *testing.T) {
	base := mesh.Meta{Region: "cn-east", Cards: 2, FreeCards: 2, Models: []string{"a100-80g"}}
	if !sameSummary(base, mesh.Meta{Region: "cn-east", Cards: 2, FreeCards: 0, Models: []string{"a100-80g"}}) {
		t.Error("a change of the free count alone is a change of the summary")
	}
	for name, change := range map[string]func(*mesh.Meta){
		"standby":     func(m *mesh.Meta) { m.Standby = true },
		"coordinator": func(m *mesh.Meta) { m.Coordinator = true },
		"cards":       func(m *mesh.Meta) { m.Cards = 1; m.FreeCards = 1 },
		"models":      func(m *mesh.Meta) { m.Models = []string{"h100-sxm-80g"} },
		"region":      func(m *mesh.Meta) { m.Region = "cn-north" },
	} {
		m := base
		change(&m)
		if sameSummary(base, m) {
			t.Errorf("a change of %s is taken for the same summary: it would be held back", name)
		}
	}
}

// supplyStates yields the ID and state of each card of s.
func supplyStates(s gossip.Supply) iter.Seq2[string, gossip.CardState] {
	return func(yield func(string, gossip.CardState) bool) {
		for _, c := range s.Cards {
			if !yield(c.Card.ID, c.State) {
				return
			}
		}
	}
}
