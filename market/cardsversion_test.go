package market_test

import (
	"slices"
	"testing"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// EachCard and NumCards say what Cards says, and CardsVersion changes when
// the cards do and only then: a node's claims are kept by it.
func TestEachCardAndCardsVersionFollowTheCards(t *testing.T) {
	n := newNode(t, "a", "a100-80g:3")
	drain(n)
	check := func(when string) {
		t.Helper()
		var each []market.CardStatus
		n.EachCard(func(c *device.Card, st market.CardState) {
			each = append(each, market.CardStatus{Card: *c, State: st})
		})
		all := n.Cards()
		if n.NumCards() != len(all) || len(each) != len(all) {
			t.Fatalf("%s: NumCards %d, EachCard %d cards, Cards %d", when, n.NumCards(), len(each), len(all))
		}
		for i := range all {
			if each[i].Card.ID != all[i].Card.ID || each[i].Card.Health != all[i].Card.Health || each[i].State != all[i].State {
				t.Errorf("%s: card %d: EachCard %s %v %v, Cards %s %v %v", when, i, each[i].Card.ID, each[i].Card.Health.Healthy,
					each[i].State, all[i].Card.ID, all[i].Card.Health.Healthy, all[i].State)
			}
		}
	}
	check("at start")
	v0 := n.CardsVersion()
	// A job's reservation and run change states, not cards.
	if err := n.Step(market.JobSubmitted{Now: t0, Spec: market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 100, Command: []string{"x"}}}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	if v := n.CardsVersion(); v != v0 {
		t.Errorf("a submission changed the cards' version %d → %d", v0, v)
	}
	cards := slices.Clone(n.Cards())
	sick := make([]device.Card, 0, len(cards))
	for _, st := range cards {
		sick = append(sick, st.Card)
	}
	sick[1].Health = device.Unhealthy("injected")
	sick = sick[:2] // the third card is gone
	if err := n.Step(market.CardsChanged{Now: t0, Cards: sick}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	if v := n.CardsVersion(); v == v0 {
		t.Error("a card turned unhealthy and one gone, and the cards' version did not change")
	}
	check("after the change")
	var states []market.CardState
	n.EachCard(func(_ *device.Card, st market.CardState) { states = append(states, st) })
	if len(states) < 2 || states[1] != market.CardUnhealthy {
		t.Errorf("states after the change = %v, want the second card unhealthy", states)
	}
}
