package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// What the mesh sells, asked of any node before submitting: every
// supplier's cards with their price per card-hour and per compute-unit
// hour, region and advertised MTBF, filtered and sorted as asked; and,
// once a node coordinated a job there, what it saw of the supplier.
func TestOffersListWhatTheMeshSells(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		switch i {
		case 1:
			c.Region, c.Prices = "cn-east", map[string]float64{"h100-sxm-80g": 20}
			c.Availability = market.Availability{MTBF: market.Duration(720 * time.Hour)}
		case 2:
			c.Region, c.Prices = "cn-south", map[string]float64{"rtx4090-48g": 3}
		}
	}), "", "h100-sxm-80g:2", "rtx4090-48g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	for _, n := range sm.nodes {
		sm.waitBook(n, 3)
	}
	ctx := context.Background()
	h100, cafe := sm.nodes[1].ID().String(), sm.nodes[2].ID().String()
	list, err := apiClient(t, sm.nodes[2], nil).Offers(ctx, api.OfferQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Offers) != 2 || list.Offers[0].Node != cafe || list.Offers[1].Node != h100 {
		t.Fatalf("offers %+v, want the 4090 then the H100 (cheapest first)", list.Offers)
	}
	c, h := list.Offers[0], list.Offers[1]
	if !c.Self || h.Self {
		t.Errorf("self marks: café %v, H100 %v; node 2 is the café", c.Self, h.Self)
	}
	if h.Model != "h100-sxm-80g" || h.Free != 2 || h.Total != 2 || h.PriceCNY != 20 || h.Region != "cn-east" ||
		h.MemoryMiB < 80000 || h.ComputeUnits <= 1 || h.Reliability.MTBFSeconds != (720*time.Hour).Seconds() {
		t.Errorf("H100 offer %+v", h)
	}
	if want := h.PriceCNY / h.ComputeUnits; h.PricePerCUCNY != want {
		t.Errorf("H100 per compute-unit hour %v, want %v", h.PricePerCUCNY, want)
	}
	if c.Model != "rtx4090-48g" || c.PriceCNY != 3 || c.Region != "cn-south" || c.Reliability.MTBFSeconds != 0 || c.Reliability.UptimeSeconds <= 0 {
		t.Errorf("café offer %+v", c)
	}
	// Filters and orders, as query parameters.
	for _, tc := range []struct {
		q    api.OfferQuery
		want []string
	}{
		{api.OfferQuery{Model: "4090"}, []string{cafe}},
		{api.OfferQuery{MinMemoryMiB: 60 << 10}, []string{h100}},
		{api.OfferQuery{Region: "cn-east"}, []string{h100}},
		{api.OfferQuery{MaxPriceCNY: 10}, []string{cafe}},
		{api.OfferQuery{Sort: api.SortReliability}, []string{h100, cafe}},
	} {
		got, err := apiClient(t, sm.nodes[1], nil).Offers(ctx, tc.q)
		if err != nil {
			t.Fatalf("%+v: %v", tc.q, err)
		}
		var ids []string
		for _, o := range got.Offers {
			ids = append(ids, o.Node)
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("%+v: offers of %v, want %v", tc.q, ids, tc.want)
		}
	}

	// A job on the H100s: the cards are busy, and the coordinator keeps a
	// track record of the supplier once the job ends.
	spec := market.JobSpec{AllowSimulated: true, ID: "offers-h100", Cards: 2, Models: []string{"h100-sxm-80g"}, MaxPriceCNY: 30, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, spec.ID, 20*time.Second, market.JobRunning)
	eventually(t, 10*time.Second, "the H100s show busy", func() bool {
		l, err := apiClient(t, coord, nil).Offers(ctx, api.OfferQuery{Model: "h100"})
		return err == nil && len(l.Offers) == 0 && l.BusyOffers == 1 && l.BusyCards == 2
	})
	if _, err := coord.Cancel(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	var last api.Offer
	eventually(t, 10*time.Second, "the H100s free again with the coordinator's record of their supplier", func() bool {
		l, err := apiClient(t, coord, nil).Offers(ctx, api.OfferQuery{Model: "h100"})
		if err != nil || len(l.Offers) != 1 {
			return false
		}
		last = l.Offers[0]
		s := last.Reliability.Seen
		return last.Free == 2 && s != nil && s.Ended == 1 && s.Lost == 0 && s.MTBFSeconds == 0
	})
	// Another node coordinated nothing there: it has no record. Its book
	// hears that the H100s are free again by gossip, a moment later.
	var other api.OfferList
	eventually(t, 10*time.Second, "another node's book shows the H100s free again", func() bool {
		l, err := apiClient(t, sm.nodes[2], nil).Offers(ctx, api.OfferQuery{Model: "h100"})
		other = l
		return err == nil && len(l.Offers) == 1 && l.Offers[0].Free == 2
	})
	if other.Offers[0].Reliability.Seen != nil {
		t.Errorf("a node that coordinated nothing on the H100s has a record of their supplier: %+v", other.Offers[0].Reliability.Seen)
	}
}
