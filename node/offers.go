package node

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

var _ api.OfferLister = (*Node)(nil)

// Offers implements api.OfferLister: every group of cards in the capacity
// ads this node's book holds (its own included), at the price each
// supplier asks, with what the supplier advertises of its uptime and, where
// this node coordinated attempts there, its track record.
func (n *Node) Offers(ctx context.Context) ([]api.Offer, error) {
	var seen []market.Seen
	if err := n.do(ctx, func() { seen = n.mk.Seen() }); err != nil {
		return nil, err
	}
	now := time.Now()
	book := n.gossip.Book()
	var ads []gossip.Ad
	for _, s := range book.Snapshot(now) {
		if ad, ok := book.Get(s.Peer, now); ok {
			ads = append(ads, ad)
		}
	}
	return offersFrom(ads, seen, n.self, now), nil
}

// offersFrom turns capacity ads into offers, one per card group, with the
// track records seen of their suppliers; self is this node's peer ID. A
// supplier's uptime is its session's length when it issued the ad plus the
// time since.
func offersFrom(ads []gossip.Ad, seen []market.Seen, self string, now time.Time) []api.Offer {
	bySupplier := make(map[string]*api.Seen, len(seen))
	for _, s := range seen {
		bySupplier[s.Node] = &api.Seen{Lost: s.Lost, Ended: s.Ended, MTBFSeconds: s.MTBF.Seconds(), LastLoss: s.LastLoss}
	}
	var out []api.Offer
	for _, ad := range ads {
		node := ad.Peer.String()
		rel := api.Reliability{
			MTBFSeconds:   ad.Availability.MTBF.Seconds(),
			UptimeSeconds: (ad.Availability.Uptime + max(0, now.Sub(ad.IssuedAt))).Seconds(),
			Seen:          bySupplier[node],
		}
		for _, g := range ad.Cards {
			o := api.Offer{
				Node: node, Self: node == self, Region: ad.Region,
				Model: g.Model, Vendor: string(g.Vendor), MemoryMiB: g.MemoryMiB, ComputeUnits: g.ComputeUnits,
				Free: g.Free, Total: g.Total(), PriceCNY: g.PriceCNY, Reliability: rel, Simulated: g.Simulated,
			}
			if g.ComputeUnits > 0 {
				o.PricePerCUCNY = g.PriceCNY / g.ComputeUnits
			}
			out = append(out, o)
		}
	}
	return out
}
