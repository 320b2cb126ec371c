package market_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// A supplier that cannot serve a bid request says why in words about the
// job, the same words on every supplier in the same situation, so that a
// pending job's reason can count them.
func TestSupplierDeclinesNameTheJobsUnmetCheck(t *testing.T) {
	cases := []struct {
		name   string
		cards  string
		prices map[string]float64
		filter market.Filter
		min    int
		want   string
	}{
		{"price", "a100-80g:2", map[string]float64{"a100-80g": 30}, market.Filter{MaxPriceCNY: 25}, 1,
			"the free cards ask more than the job's 25.00 CNY per card-hour"},
		{"model", "a100-80g:2", nil, market.Filter{Models: []string{"h100-*", "h200-*"}, MaxPriceCNY: 50}, 1,
			"no free card of the job's models (h100-*, h200-*)"},
		{"vendor", "a100-80g:2", nil, market.Filter{Vendors: []device.Vendor{device.VendorAMD}, MaxPriceCNY: 50}, 1,
			"no free card of the job's vendors (amd)"},
		{"no image for the vendor", "a100-80g:2", nil, market.Filter{ImageVendors: []device.Vendor{device.VendorMThreads, device.VendorAMD}, MaxPriceCNY: 50}, 1,
			"no free card of a vendor the job's images serve (mthreads, amd)"},
		{"memory", "rtx4090-24g:2", nil, market.Filter{MinMemoryMiB: 48 * 1024, MaxPriceCNY: 50}, 1,
			"no free card with the job's 49152 MiB of memory"},
		{"compute", "rtx4090-24g:2", nil, market.Filter{MinComputeUnits: 1, MaxPriceCNY: 50}, 1,
			"no free card with the job's 1.00 compute units"},
		// Two of three cards fail on price, one on model: the price is named.
		{"most cards' check", "a100-80g:2,rtx4090-24g:1", map[string]float64{"a100-80g": 30}, market.Filter{Models: []string{"a100-*"}, MaxPriceCNY: 25}, 1,
			"the free cards ask more than the job's 25.00 CNY per card-hour"},
		{"too few for the layout", "a100-80g:2", nil, market.Filter{MaxPriceCNY: 50}, 4,
			"2 matching cards free, the job needs 4 on one node"},
		{"nothing at all", "", nil, market.Filter{MaxPriceCNY: 50}, 1, "no free cards"},
		{"not enough of one model", "a100-80g:2,rtx4090-24g:2", nil, market.Filter{MaxPriceCNY: 50}, 4,
			"4 matching cards free, at most 2 of one model; the job needs 4 of one model on one node"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := market.DefaultConfig("s")
			if c.cards != "" {
				cfg.Cards = markettest.MustCards("s", c.cards)
			}
			cfg.Prices.PerModel = c.prices
			sup, err := market.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			drain(sup)
			req := &market.BidRequest{Job: "j1", Term: 1, Round: 1, Filter: c.filter, Want: max(c.min, 1), Min: c.min}
			if err := sup.Step(market.MessageReceived{Now: t0, Message: market.Message{From: "c", To: "s", Payload: req}}); err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, m := range drain(sup).Messages {
				switch p := m.Payload.(type) {
				case *market.Decline:
					got = p.Reason
				case *market.Bid:
					t.Fatalf("bid %+v, want a decline", p)
				}
			}
			if got != c.want {
				t.Errorf("decline %q, want %q", got, c.want)
			}
			for _, cs := range sup.Cards() {
				if cs.State != market.CardFree {
					t.Errorf("card %s is %s after a decline", cs.Card.ID, cs.State)
				}
			}
		})
	}
}

// A supplier bids cards of one model unless the job mixes models: the
// model that gives the most of what was asked.
func TestSupplierBidsOneModel(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		cfg := market.DefaultConfig("s")
		cfg.Cards = markettest.MustCards("s", "a100-80g:2,rtx4090-24g:1")
		sup, err := market.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		drain(sup)
		req := &market.BidRequest{Job: "j1", Term: 1, Round: 1, Filter: market.Filter{MaxPriceCNY: 50}, Want: 2, Min: 1, MixedModels: mixed}
		if err := sup.Step(market.MessageReceived{Now: t0, Message: market.Message{From: "c", To: "s", Payload: req}}); err != nil {
			t.Fatal(err)
		}
		var models []string
		for _, m := range drain(sup).Messages {
			if b, ok := m.Payload.(*market.Bid); ok {
				for _, c := range b.Cards {
					models = append(models, c.Model)
				}
			}
		}
		slices.Sort(models)
		want := "a100-80g a100-80g" // two of one model beat one
		if mixed {
			want = "a100-80g rtx4090-24g" // the cheapest per compute unit first
		}
		if got := strings.Join(models, " "); got != want {
			t.Errorf("mixed=%v: bid %q, want %q", mixed, got, want)
		}
	}
}
