package node

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	for _, st := range n.mk.Cards() {
		if state, offered := gossipState(st.State); offered {
			s.Cards = append(s.Cards, gossip.SupplyCard{Card: st.Card, State: state})
		}
	}
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
	s := n.supply()
	if n.adv != nil && onlyReservations(n.publishedStates, s) {
		if n.settleAt.IsZero() {
			n.settleAt = time.Now().Add(n.reserveSettle)
		}
		return
	}
	n.publishNow(s)
}

// publishNow hands s to the advertiser at once.
func (n *Node) publishNow(s gossip.Supply) {
	n.settleAt = time.Time{}
	n.published = supplyKey(s)
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
	s := n.supply()
	if supplyKey(s) == n.published {
		n.settleAt = time.Time{}
		return
	}
	n.publishNow(s)
}

// onlyReservations reports whether s differs from the card states last
// published at most by cards turned from free to reserved or back.
func onlyReservations(published map[string]gossip.CardState, s gossip.Supply) bool {
	if published == nil || len(published) != len(s.Cards) {
		return false
	}
	for _, c := range s.Cards {
		was, ok := published[c.Card.ID]
		switch {
		case !ok:
			return false
		case was == c.State:
		case (was == gossip.CardFree || was == gossip.CardReserved) && (c.State == gossip.CardFree || c.State == gossip.CardReserved):
		default:
			return false
		}
	}
	return true
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
// reads the states alone (market.Node.EachCardState) rather than copying
// every card as supply does.
func (n *Node) supplyChanged() bool {
	var b strings.Builder
	b.Grow(len(n.published))
	n.mk.EachCardState(func(id string, st market.CardState) {
		if state, offered := gossipState(st); offered {
			writeCardKey(&b, id, state)
		}
	})
	return b.String() != n.published
}

// supplyKey is the state of every card of a supply, in one string.
func supplyKey(s gossip.Supply) string {
	var b strings.Builder
	for _, c := range s.Cards {
		writeCardKey(&b, c.Card.ID, c.State)
	}
	return b.String()
}

// writeCardKey is one card's part of a supply's key.
func writeCardKey(b *strings.Builder, id string, state gossip.CardState) {
	b.WriteString(id)
	b.WriteByte('=')
	b.WriteString(strconv.Itoa(int(state)))
	b.WriteByte(';')
}

// sameSummary reports whether a and b differ at most in their free-card
// count (Addrs and Leaving are the mesh's, not the node's).
func sameSummary(a, b mesh.Meta) bool {
	a.FreeCards, b.FreeCards = 0, 0
	a.Addrs, b.Addrs = nil, nil
	a.Leaving, b.Leaving = false, false
	return reflect.DeepEqual(a, b)
}

// metaOf is the short capacity summary memberlist carries.
func metaOf(region string, cards []device.Card, statuses []market.CardStatus, coordinator, standby bool) mesh.Meta {
	m := mesh.Meta{Region: region, Coordinator: coordinator, Standby: standby}
	for _, c := range cards {
		if !c.Health.Healthy {
			continue
		}
		m.Cards++
		if !slices.Contains(m.Models, c.Model) && len(m.Models) < mesh.MaxModels {
			m.Models = append(m.Models, c.Model)
		}
	}
	if statuses == nil {
		m.FreeCards = m.Cards
	}
	for _, st := range statuses {
		if st.State == market.CardFree {
			m.FreeCards++
		}
	}
	m.FreeCards = min(m.FreeCards, m.Cards)
	slices.Sort(m.Models)
	return m
}
