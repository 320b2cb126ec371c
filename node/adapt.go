package node

import (
	"context"
	"iter"
	"log/slog"
	"reflect"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
)

// Log levels used with slog.Logger.Log.
const (
	slogDebug = slog.LevelDebug
	slogInfo  = slog.LevelInfo
)

// preemptibleFactor is what coordinators assume a supplier charges for
// preemptible work, relative to its on-demand price, until ads carry it:
// the market's default (an RTX 4090-24G at 1.98 asks 1.19).
const preemptibleFactor = 0.6

// offersOf turns a peer's capacity ad into the market's book lines.
func offersOf(ad gossip.Ad, now time.Time) []market.Offer {
	if ad.Expired(now) {
		return nil
	}
	out := make([]market.Offer, 0, len(ad.Cards))
	for _, g := range ad.Cards {
		out = append(out, market.Offer{
			Node:                ad.Peer.String(),
			Region:              ad.Region,
			Model:               g.Model,
			Vendor:              g.Vendor,
			MemoryMiB:           g.MemoryMiB,
			ComputeUnits:        g.ComputeUnits,
			Free:                g.Free,
			Total:               g.Total(),
			PriceCNY:            g.PriceCNY,
			PreemptiblePriceCNY: g.PriceCNY * preemptibleFactor,
			Availability:        market.Availability{MTBF: market.Duration(ad.Availability.MTBF)},
			Simulated:           g.Simulated,
		})
	}
	return out
}

// supply is what the advertiser publishes: this node's cards and what the
// market has them doing.
func (n *Node) supply() gossip.Supply {
	s := gossip.Supply{
		Region: n.cfg.Region,
		Prices: n.cfg.Prices,
		Since:  n.started,
		MTBF:   time.Duration(n.cfg.Availability.MTBF),
	}
	s.Cards = make([]gossip.SupplyCard, 0, n.mk.NumCards())
	n.mk.EachCard(func(card *device.Card, st market.CardState) {
		if state, offered := gossipState(st); offered {
			s.Cards = append(s.Cards, gossip.SupplyCard{Card: *card, State: state})
		}
	})
	return s
}

// gossipState is how a card in market state st is advertised; unhealthy
// or gone cards are not offered.
func gossipState(st market.CardState) (gossip.CardState, bool) {
	switch st {
	case market.CardFree:
		return gossip.CardFree, true
	case market.CardReserved:
		return gossip.CardReserved, true
	case market.CardRunning:
		return gossip.CardBusy, true
	}
	return 0, false
}

// advertise publishes this node's changed capacity: to its own book at once,
// to the mesh through the advertiser (coalesced), and in its metadata.
func (n *Node) advertise(ad market.Ad) {
	n.book.Put(n.self, ad.Offers)
	n.publishSupply()
	n.updateMeta()
}

// publishSupply hands the advertiser this node's cards as the market has
// them now, unless the change since the last ad only reserves cards for a
// bid or releases such a reservation: that waits reserveSettle
// (settleSupply publishes it then, if it still stands). Most reservations
// end within it — an award makes the cards busy, a lost auction frees them
// — so a placement costs each winner one ad instead of two and a losing
// bidder none, and the ads of a large placement no longer go to every node
// while its bids are in flight; a reservation that lasts is still shown.
// (The membership metadata's short summary follows only the market's ad:
// updating it waits for memberlist's broadcast, too slow for the driver on
// every change of a card.) It remembers what it published, so that a change
// the market's ad does not show (reserved → running: neither is free) is
// still published (supplyChanged).
func (n *Node) publishSupply() {
	// Read from the market's states alone: most calls publish nothing,
	// and the supply copies every card.
	if n.adv != nil && onlyReservations(n.publishedStates, n.cardStates()) {
		if n.settleAt.IsZero() {
			n.settleAt = time.Now().Add(n.reserveSettle)
		}
		return
	}
	n.publishNow(n.supply())
}

// publishNow hands s to the advertiser at once.
func (n *Node) publishNow(s gossip.Supply) {
	n.settleAt = time.Time{}
	n.publishedStates = statesOf(s)
	if n.adv == nil {
		return // still starting: the advertiser starts from n.supply()
	}
	ctx, cancel := context.WithTimeout(n.ctx, time.Second)
	defer cancel()
	if err := n.adv.Update(ctx, s); err != nil && n.ctx.Err() == nil {
		n.log.Warn("cannot update the capacity ad", "err", err)
	}
}

// settleSupply publishes a reservation change publishSupply held back,
// once reserveSettle has passed; one that was undone meanwhile needs no ad.
// Driver only.
func (n *Node) settleSupply(now time.Time) {
	if n.settleAt.IsZero() || now.Before(n.settleAt) {
		return
	}
	if sameStates(n.publishedStates, n.cardStates()) {
		n.settleAt = time.Time{}
		return
	}
	n.publishNow(n.supply())
}

// onlyReservations reports whether cards (by ID, as advertised) differ
// from the card states last published at most by cards turned from free
// to reserved or back.
func onlyReservations(published map[string]gossip.CardState, cards iter.Seq2[string, gossip.CardState]) bool {
	if published == nil {
		return false
	}
	seen := 0
	for id, st := range cards {
		seen++
		was, ok := published[id]
		switch {
		case !ok:
			return false
		case was == st:
		case (was == gossip.CardFree || was == gossip.CardReserved) && (st == gossip.CardFree || st == gossip.CardReserved):
		default:
			return false
		}
	}
	return seen == len(published)
}

// sameStates reports whether cards (by ID, as advertised) are the card
// states last published; nothing published is as no card.
func sameStates(published map[string]gossip.CardState, cards iter.Seq2[string, gossip.CardState]) bool {
	seen := 0
	for id, st := range cards {
		seen++
		if was, ok := published[id]; !ok || was != st {
			return false
		}
	}
	return seen == len(published)
}

// cardStates yields the ID and advertised state of each card the market
// offers (gone and unhealthy ones are not), copying nothing: what the
// driver compares with the states last published on every turn. Driver
// only.
func (n *Node) cardStates() iter.Seq2[string, gossip.CardState] {
	return func(yield func(string, gossip.CardState) bool) {
		stopped := false
		n.mk.EachCardState(func(id string, st market.CardState) {
			if state, offered := gossipState(st); offered && !stopped {
				stopped = !yield(id, state)
			}
		})
	}
}

// statesOf is the state of every card of s by card ID.
func statesOf(s gossip.Supply) map[string]gossip.CardState {
	out := make(map[string]gossip.CardState, len(s.Cards))
	for _, c := range s.Cards {
		out[c.Card.ID] = c.State
	}
	return out
}

// supplyChanged reports whether the cards' states differ from what was
// last published. It runs on every driver turn that changed no ad, so it
// reads the states alone rather than copying every card as supply does.
func (n *Node) supplyChanged() bool { return !sameStates(n.publishedStates, n.cardStates()) }

// sameSummary reports whether a and b differ at most in their free-card
// count (Addrs and Leaving are the mesh's, not the node's).
func sameSummary(a, b mesh.Meta) bool {
	a.FreeCards, b.FreeCards = 0, 0
	a.Addrs, b.Addrs = nil, nil
	a.Leaving, b.Leaving = false, false
	return reflect.DeepEqual(a, b)
}

// metaOf is the short capacity summary memberlist carries: healthy cards
// of the given models (device.Manager.Healthy), free of them (free < 0:
// the market is not running yet, and every healthy card is).
func metaOf(region string, healthy int, models []string, free int, coordinator, standby bool) mesh.Meta {
	m := mesh.Meta{Region: region, Coordinator: coordinator, Standby: standby, Cards: healthy}
	m.Models = slices.Clone(models[:min(len(models), mesh.MaxModels)])
	slices.Sort(m.Models)
	if free < 0 {
		free = healthy
	}
	m.FreeCards = min(free, healthy)
	return m
}

// freeCards counts the cards the market has free, copying none. Driver
// only.
func (n *Node) freeCards() int {
	free := 0
	n.mk.EachCardState(func(_ string, st market.CardState) {
		if st == market.CardFree {
			free++
		}
	})
	return free
}
