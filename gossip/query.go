package gossip

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Query selects card groups from the Book. The zero Query matches every
// group with at least one free card.
type Query struct {
	// Model is an exact model key ("h100-sxm-80g"), a prefix ending in '*'
	// ("h100-*" matches every H100 variant), or "" / "*" for any model.
	Model string
	// MinMemoryMiB and MinComputeUnits are per card; 0 means no minimum.
	MinMemoryMiB    uint64
	MinComputeUnits float64
	// MinFree is the number of free cards one peer must offer in the group;
	// 0 means 1.
	MinFree int
	// MaxPriceCNY is the highest acceptable price per card-hour; 0 means
	// no limit.
	MaxPriceCNY float64
}

// Validate reports a query that cannot mean anything: a '*' anywhere but at
// the end of Model, or a negative or NaN bound.
func (q Query) Validate() error {
	if i := strings.IndexByte(q.Model, '*'); i >= 0 && i != len(q.Model)-1 {
		return fmt.Errorf("gossip: query model %q: '*' may only end a prefix, as in \"h100-*\"", q.Model)
	}
	if q.MinFree < 0 {
		return fmt.Errorf("gossip: query min free %d: want >= 0", q.MinFree)
	}
	if !finiteIn(q.MinComputeUnits, 0, math.MaxFloat64) {
		return fmt.Errorf("gossip: query min compute units %v: want a number >= 0", q.MinComputeUnits)
	}
	if !finiteIn(q.MaxPriceCNY, 0, math.MaxFloat64) {
		return fmt.Errorf("gossip: query max price %v: want a number >= 0 (0 = no limit)", q.MaxPriceCNY)
	}
	return nil
}

func (q Query) matches(g CardGroup) bool {
	minFree := max(q.MinFree, 1)
	switch {
	case g.Free < minFree,
		g.MemoryMiB < q.MinMemoryMiB,
		g.ComputeUnits < q.MinComputeUnits,
		q.MaxPriceCNY > 0 && g.PriceCNY > q.MaxPriceCNY:
		return false
	}
	switch m := q.Model; {
	case m == "" || m == "*":
		return true
	case strings.HasSuffix(m, "*"):
		return strings.HasPrefix(g.Model, m[:len(m)-1])
	default:
		return g.Model == m
	}
}

// Offer is one peer's group of one model that matched a query: what the
// market reads to pick candidates.
type Offer struct {
	Peer         peer.ID
	Region       string
	Model        string
	Vendor       device.Vendor
	MemoryMiB    uint64
	ComputeUnits float64
	Free         int // free cards of this model at this peer
	PriceCNY     float64
	Availability Availability
	Seq          uint64    // of the ad the offer comes from
	ExpiresAt    time.Time // of that ad
}

// Query returns the groups that match q among the ads unexpired at now and
// not hidden, cheapest first (then by peer ID and model, so equal prices come in a
// stable order). It returns an error only for a query that fails Validate.
func (b *Book) Query(q Query, now time.Time) ([]Offer, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var out []Offer
	b.mu.RLock()
	for p, e := range b.peers {
		if !e.visible(now) {
			continue
		}
		for _, g := range e.ad.Cards {
			if !q.matches(g) {
				continue
			}
			out = append(out, Offer{
				Peer: p, Region: e.ad.Region,
				Model: g.Model, Vendor: g.Vendor, MemoryMiB: g.MemoryMiB, ComputeUnits: g.ComputeUnits,
				Free: g.Free, PriceCNY: g.PriceCNY,
				Availability: e.ad.Availability, Seq: e.ad.Seq, ExpiresAt: e.ad.ExpiresAt,
			})
		}
	}
	b.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, c := out[i], out[j]
		switch {
		case a.PriceCNY != c.PriceCNY:
			return a.PriceCNY < c.PriceCNY
		case a.Peer != c.Peer:
			return a.Peer < c.Peer
		}
		return a.Model < c.Model
	})
	return out, nil
}
