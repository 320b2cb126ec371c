package gossip

import (
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Ad is a decoded, checked capacity ad: what one node offers at one moment.
// Ads are values; the Book hands out copies.
type Ad struct {
	Peer      peer.ID   // the author, equal to the pubsub signer
	Seq       uint64    // strictly increasing per author; newest wins
	IssuedAt  time.Time // the author's clock, millisecond precision
	ExpiresAt time.Time // after this the ad is void
	Region    string
	// Cards holds one group per model, sorted by model key.
	Cards        []CardGroup
	Availability Availability
}

// CardGroup is the healthy cards of one model on one node, by state, and the
// price the node asks for one of them per hour.
type CardGroup struct {
	Model        string        // catalog key or derived "x-" key
	Vendor       device.Vendor // lower-case vendor name
	MemoryMiB    uint64        // smallest memory among the group's cards
	ComputeUnits float64       // dense BF16 TFLOPS / 312; 0 = unknown
	Free         int
	Reserved     int
	Busy         int
	PriceCNY     float64 // per card-hour
}

// Total is the number of cards in the group, whatever their state.
func (g CardGroup) Total() int { return g.Free + g.Reserved + g.Busy }

// Availability is how long and how reliably a node has been up, as it
// reports it.
type Availability struct {
	Uptime   time.Duration // length of the current session
	MTBF     time.Duration // mean time between failures; 0 = no history yet
	Sessions int           // sessions (starts) in the node's history
}

// TotalCards counts the ad's cards in every state.
func (a Ad) TotalCards() int {
	n := 0
	for _, g := range a.Cards {
		n += g.Total()
	}
	return n
}

// FreeCards counts the ad's free cards.
func (a Ad) FreeCards() int {
	n := 0
	for _, g := range a.Cards {
		n += g.Free
	}
	return n
}

// Models lists the ad's model keys in order.
func (a Ad) Models() []string {
	out := make([]string, len(a.Cards))
	for i, g := range a.Cards {
		out[i] = g.Model
	}
	return out
}

// Group returns the ad's group of the given model.
func (a Ad) Group(model string) (CardGroup, bool) {
	i, ok := slices.BinarySearchFunc(a.Cards, model, func(g CardGroup, m string) int {
		switch {
		case g.Model < m:
			return -1
		case g.Model > m:
			return 1
		}
		return 0
	})
	if !ok {
		return CardGroup{}, false
	}
	return a.Cards[i], true
}

// Expired reports whether the ad is void at now.
func (a Ad) Expired(now time.Time) bool { return !now.Before(a.ExpiresAt) }

// clone returns a copy of a that shares no memory with it.
func (a Ad) clone() Ad {
	a.Cards = slices.Clone(a.Cards)
	return a
}
