package gossip

import (
	"slices"
	"strings"
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
	// Simulated says the group's cards are simulated (gpumesh node --sim).
	Simulated bool
	// Evidence is the hardware its cards' backend reports, one entry per
	// card that has any, sorted by UUID then serial; at most Total().
	Evidence []CardEvidence
}

// CardEvidence is one card's hardware as its vendor's library or tool
// reports it (device.Evidence, with the card's UUID and memory). An entry
// names a UUID or a serial, or both.
type CardEvidence struct {
	UUID string
	device.Evidence
	MemoryMiB uint64
}

// Claims returns the hardware identities the evidence claims, as keys
// ("uuid:GPU-…", "serial:1654922004567"), without duplicates: two peers
// that claim one key claim one card.
func (a Ad) Claims() []string {
	var out []string
	for _, g := range a.Cards {
		for _, e := range g.Evidence {
			out = append(out, e.claims()...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// claims are the keys of one entry.
func (e CardEvidence) claims() []string {
	var out []string
	if e.UUID != "" {
		out = append(out, "uuid:"+strings.ToLower(e.UUID))
	}
	if e.Serial != "" {
		out = append(out, "serial:"+e.Serial)
	}
	return out
}

// CardClaims returns the claims a node's own ad makes for cards, as
// Ad.Claims does for a peer's.
func CardClaims(cards []device.Card) []string {
	var out []string
	for _, c := range cards {
		if e, ok := evidenceOf(c); ok && c.Health.Healthy {
			out = append(out, e.claims()...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
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

// SimulatedModels lists the model keys of the ad's simulated groups, in
// order; nil when none.
func (a Ad) SimulatedModels() []string {
	var out []string
	for _, g := range a.Cards {
		if g.Simulated {
			out = append(out, g.Model)
		}
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
	for i := range a.Cards {
		a.Cards[i].Evidence = slices.Clone(a.Cards[i].Evidence)
	}
	return a
}
