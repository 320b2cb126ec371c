package market_test

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// simSupplier is a supplier with two simulated H100s that checks signed
// specs.
func simSupplier(t *testing.T) *market.Node {
	t.Helper()
	cfg := market.DefaultConfig("fake")
	cfg.Cards = markettest.MustCards("fake", "h100-sxm-80g:2")
	for i := range cfg.Cards {
		cfg.Cards[i].Backend = device.SimBackendName
	}
	cfg.Network, cfg.RequireSigned = testNetwork, true
	n, err := market.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	return n
}

func TestSimulatedCardsAreOfferedOnlyToJobsThatAllowThem(t *testing.T) {
	n := simSupplier(t)
	if ad := n.Ad(); len(ad.Offers) != 1 || !ad.Offers[0].Simulated {
		t.Fatalf("ad %+v: want one offer marked simulated", ad.Offers)
	}
	ask := func(allow bool, round uint64) market.Ready {
		t.Helper()
		req := &market.BidRequest{Job: "j1", Term: 1, Round: round, Want: 2, Min: 1,
			Filter: market.Filter{MaxPriceCNY: 40, AllowSimulated: allow}}
		if err := n.Step(market.MessageReceived{Now: t0, Message: market.Message{From: "coord", To: "fake", Payload: req}}); err != nil {
			t.Fatal(err)
		}
		return drain(n)
	}
	rd := ask(false, 1)
	if len(rd.Messages) != 1 {
		t.Fatalf("answer %+v, want one decline", rd.Messages)
	}
	d, ok := rd.Messages[0].Payload.(*market.Decline)
	if !ok || !strings.Contains(d.Reason, "simulated") {
		t.Fatalf("answer %+v, want a decline that says the cards are simulated", rd.Messages[0].Payload)
	}
	for _, c := range n.Cards() {
		if c.State != market.CardFree {
			t.Fatalf("card %s is %s after a decline", c.Card.ID, c.State)
		}
	}
	rd = ask(true, 2)
	bid, ok := rd.Messages[0].Payload.(*market.Bid)
	if !ok || len(bid.Cards) != 2 || !bid.Cards[0].Simulated {
		t.Fatalf("answer %+v, want a bid of 2 cards marked simulated", rd.Messages[0].Payload)
	}

	// The bid was asked as allowing simulated cards, but the owner's
	// signed spec does not allow them: the supplier judges the spec and
	// rejects the award, and runs nothing.
	signed := sign(t, ownerKey(t, 1), market.JobSpec{ID: "j1", Cards: 2, MaxPriceCNY: 40, Command: []string{"train"}})
	award := &market.Award{Job: "j1", Term: 1, Round: 2, Lease: bid.Lease, Share: 0, Epoch: 1, Cards: []string{bid.Cards[0].ID, bid.Cards[1].ID},
		PriceCNY: 22.5, Start: true, World: 2, Exec: market.ExecOf(&signed.Spec), Signed: &signed}
	err := n.Step(market.MessageReceived{Now: t0, Message: market.Message{From: "coord", To: "fake", Payload: award}})
	if err == nil {
		t.Fatal("an award of simulated cards for a job that does not allow them was taken")
	}
	rd = drain(n)
	if len(rd.Messages) != 1 {
		t.Fatalf("Step: %v; answer %+v, want one reject", err, rd.Messages)
	}
	if len(rd.Start) != 0 {
		t.Fatalf("started %+v", rd.Start)
	}
	rej, ok := rd.Messages[0].Payload.(*market.Reject)
	if !ok || !strings.Contains(rej.Reason, "simulated") {
		t.Fatalf("answer %+v, want a reject that says the cards are simulated", rd.Messages[0].Payload)
	}
}
