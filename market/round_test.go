package market_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// firstAward submits spec to coord and runs the mesh until coord sends its
// first award. It returns how long after the submit that was, the node
// awarded, and the nodes the first round asked.
func firstAward(t *testing.T, h *markettest.Harness, spec market.JobSpec) (after time.Duration, to string, asked []string) {
	t.Helper()
	start := h.Now
	h.OnReady = func(p *markettest.Peer, rd market.Ready) {
		if p.ID != "coord" {
			return
		}
		for _, m := range rd.Messages {
			switch m.Payload.(type) {
			case *market.BidRequest:
				asked = append(asked, m.To)
			case *market.Award:
				if to == "" {
					after, to = h.Now.Sub(start), m.To
				}
			}
		}
	}
	defer func() { h.OnReady = nil }()
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	if !h.RunUntil(func() bool { return to != "" }, time.Second) {
		t.Fatalf("no award a second after the submit; asked %v", asked)
	}
	return after, to, asked
}

// TestBiddingClosesEarly checks the bid window's early close: a round
// awards as soon as the candidates that replied, taken in the book's order
// up to the first still silent, cover the need; otherwise it waits for
// the whole window (Config.BidWindow, 150ms). Messages take 1ms each way,
// so a round whose best candidate bids at once awards 2ms after the
// submit.
func TestBiddingClosesEarly(t *testing.T) {
	window := market.DefaultConfig("x").BidWindow
	spec := market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, ExpectedDuration: market.Duration(2 * time.Hour), Command: []string{"x"}}
	for _, tc := range []struct {
		name  string
		cfg   func(*market.Config)
		rule  *markettest.Rule
		after time.Duration // when the award goes out
		best  bool          // it goes to s00, the best in the book; else to the best other asked node
	}{
		{name: "the best bids", after: 2 * time.Millisecond, best: true},
		{name: "the spares are silent", rule: &markettest.Rule{Match: func(m market.Message) bool {
			// s00 has bid after 2ms: it covers the need, and the silent
			// spares ranked worse, so they could not improve on it.
			_, req := m.Payload.(*market.BidRequest)
			return req && m.To != "s00"
		}, Drop: true}, after: 2 * time.Millisecond, best: true},
		{name: "the best declines", cfg: func(c *market.Config) {
			if c.ID == "s00" { // s00 runs jobs of at most an hour; the book cannot know that
				c.Policy.MaxDuration = time.Hour
			}
		}, after: 2 * time.Millisecond},
		{name: "the best is silent", rule: &markettest.Rule{Match: func(m market.Message) bool {
			// The spares' bids are in after 2ms, but s00 ranked better
			// and might still bid: the round waits for its window.
			_, req := m.Payload.(*market.BidRequest)
			return req && m.To == "s00"
		}, Drop: true}, after: window},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := rankedMesh(t, 5, 1, tc.cfg)
			if tc.rule != nil {
				h.AddRule(tc.rule)
			}
			after, to, asked := firstAward(t, h, spec)
			if after != tc.after {
				t.Errorf("awarded %v after the submit, want %v (asked %v)", after, tc.after, asked)
			}
			if len(asked) != 3 || asked[0] != "s00" {
				t.Fatalf("asked %v, want s00 and 2 spares", asked)
			}
			want := "s00"
			if !tc.best {
				want = slices.Min(asked[1:]) // names rank as prices do
			}
			if to != want {
				t.Errorf("awarded to %s, want %s (asked %v)", to, want, asked)
			}
		})
	}
}

// TestBroadcastRoundWaitsForItsWindow checks that a round that had to
// broadcast (no book) never closes early: anyone may still bid.
func TestBroadcastRoundWaitsForItsWindow(t *testing.T) {
	h := markettest.New(markettest.Options{NoBook: true})
	h.MustAdd(market.DefaultConfig("coord"))
	for _, id := range []string{"a", "b"} {
		c := market.DefaultConfig(id)
		c.Cards = markettest.MustCards(id, "a100-80g:1")
		h.MustAdd(c)
	}
	after, _, asked := firstAward(t, h, market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, Command: []string{"x"}})
	if window := market.DefaultConfig("x").BidWindow; after != window {
		t.Errorf("a broadcast round awarded %v after the submit, want its window %v (asked %v)", after, window, asked)
	}
	if !slices.Equal(asked, []string{market.Broadcast}) {
		t.Errorf("asked %q, want only the broadcast", asked)
	}
}

// TestExplainCountsDeclinesAndSilence checks the explanation of a round in
// which two asked suppliers decline and the third never answers: each
// decliner is "declined" and counts the cards asked of it (the summary
// said "declined 0"), and only the silent one is "no_reply".
func TestExplainCountsDeclinesAndSilence(t *testing.T) {
	h := rankedMesh(t, 3, 1, func(c *market.Config) {
		if c.ID == "s00" || c.ID == "s01" { // they run jobs of an hour at most
			c.Policy.MaxDuration = time.Hour
		}
	})
	h.AddRule(&markettest.Rule{Match: func(m market.Message) bool {
		_, bid := m.Payload.(*market.Bid)
		return bid && m.From == "s02" // asked, but its bid never arrives
	}, Drop: true})
	spec := market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 40, ExpectedDuration: market.Duration(2 * time.Hour), Command: []string{"x"}}
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	var x *market.Explanation
	if !h.RunUntil(func() bool {
		rec, _ := h.Peer("coord").Node.Job("j1")
		x = rec.Explanation
		return x != nil
	}, time.Second) {
		t.Fatal("no explanation a second after the submit")
	}
	got := map[string]market.Reason{}
	for _, e := range x.Entries {
		if e.Stage == "bid" {
			got[e.Node] = e.Reason
			if e.Cards != 1 {
				t.Errorf("%s's %s entry counts %d cards, want the 1 asked of it", e.Node, e.Reason, e.Cards)
			}
		}
	}
	want := map[string]market.Reason{"s00": market.ReasonDeclined, "s01": market.ReasonDeclined, "s02": market.ReasonSilent}
	if len(got) != len(want) || got["s00"] != want["s00"] || got["s01"] != want["s01"] || got["s02"] != want["s02"] {
		t.Errorf("bid-stage outcomes %v, want %v", got, want)
	}
	if x.Cards[market.ReasonDeclined] != 2 || x.Cards[market.ReasonSilent] != 1 || x.Asked != 3 || x.Bids != 0 {
		t.Errorf("asked %d, %d bids, cards by outcome %v; want 3 asked, 0 bids, declined 2, no_reply 1\n%s", x.Asked, x.Bids, x.Cards, x)
	}
}
