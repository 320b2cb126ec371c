package node

import (
	"context"
	"log/slog"
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
		var state gossip.CardState
		switch st.State {
		case market.CardFree:
			state = gossip.CardFree
		case market.CardReserved:
			state = gossip.CardReserved
		case market.CardRunning:
			state = gossip.CardBusy
		default:
			continue // unhealthy or gone: not offered
		}
		s.Cards = append(s.Cards, gossip.SupplyCard{Card: st.Card, State: state})
	}
	return s
}

// advertise publishes this node's changed capacity: to its own book at once,
// to the mesh through the advertiser (coalesced), and in its metadata.
func (n *Node) advertise(ad market.Ad) {
	n.book.Put(n.id.String(), ad.Offers)
	n.publishSupply()
	n.updateMeta()
}

// publishSupply hands the advertiser this node's cards as the market has
// them now. (The membership metadata's short summary follows only the
// market's ad: updating it waits for memberlist's broadcast, too slow for
// the driver on every change of a card.) It remembers what it published, so
// that a change the market's ad does not show (reserved → running: neither
// is free) is still published (supplyChanged).
func (n *Node) publishSupply() {
	s := n.supply()
	n.published = supplyKey(s)
	if n.adv == nil {
		return // still starting: the advertiser starts from n.supply()
	}
	ctx, cancel := context.WithTimeout(n.ctx, time.Second)
	defer cancel()
	if err := n.adv.Update(ctx, s); err != nil && n.ctx.Err() == nil {
		n.log.Warn("cannot update the capacity ad", "err", err)
	}
}

// supplyChanged reports whether the cards' states differ from what was
// last published.
func (n *Node) supplyChanged() bool { return supplyKey(n.supply()) != n.published }

// supplyKey is the state of every card of a supply, in one string.
func supplyKey(s gossip.Supply) string {
	var b strings.Builder
	for _, c := range s.Cards {
		b.WriteString(c.Card.ID)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(int(c.State)))
		b.WriteByte(';')
	}
	return b.String()
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
