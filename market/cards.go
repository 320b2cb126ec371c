package market

import (
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// What a supplier tells others about its cards: the capacity ad, and the
// status of each card for inspection.

// ad summarizes the cards per model for the capacity ad, by model.
func (s *supplier) ad() []Offer {
	if s.leaving {
		return nil // a draining node offers nothing
	}
	out := []Offer{} // not nil: an empty ad says so
	for _, c := range s.cards {
		if !c.offerable() {
			continue
		}
		i := 0 // a node has a model or two: a scan beats a map
		for i < len(out) && out[i].Model != c.card.Model {
			i++
		}
		if i == len(out) {
			out = append(out, Offer{Node: s.n.cfg.ID, Region: s.n.cfg.Region, Model: c.card.Model, Vendor: c.card.Vendor,
				MemoryMiB: c.card.MemoryMiB, ComputeUnits: c.card.ComputeUnits,
				PriceCNY: s.price(&c.card, false), PreemptiblePriceCNY: s.price(&c.card, true),
				Availability: s.n.cfg.Availability})
		}
		o := &out[i]
		o.Total++
		// A model's group is simulated if any of its cards is: a node
		// never passes simulated cards off as real ones.
		o.Simulated = o.Simulated || c.card.Simulated()
		switch {
		case c.lease != nil || c.draining != nil:
		case c.run == nil:
			o.Free++
		case c.run.kind == KindPreemptible && c.run.stopCause == "" && c.run.end == nil:
			o.Preemptible++
		}
	}
	slices.SortFunc(out, func(a, b Offer) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// CardState is what a card is doing.
type CardState string

// The card states.
const (
	CardFree      CardState = "free"
	CardReserved  CardState = "reserved"
	CardRunning   CardState = "running"
	CardUnhealthy CardState = "unhealthy"
	CardGone      CardState = "gone" // disappeared; work on it is being stopped
)

// CardStatus is one of this node's cards and what it is doing.
type CardStatus struct {
	Card  device.Card `json:"card"`
	State CardState   `json:"state"`
	// Job, Share and Epoch name the attempt on a running card.
	Job   string `json:"job,omitempty"`
	Share int    `json:"share,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
	// Lease and LeaseJob name the reservation on a reserved card (a running
	// preemptible card may be reserved too); Until is when it lapses.
	Lease    string    `json:"lease,omitempty"`
	LeaseJob string    `json:"lease_job,omitempty"`
	Until    time.Time `json:"until,omitzero"`
}

func (s *supplier) status() []CardStatus {
	out := make([]CardStatus, 0, len(s.cards))
	for _, c := range s.cards {
		st := CardStatus{Card: c.card, State: c.state()}
		if c.lease != nil {
			st.Lease, st.LeaseJob, st.Until = c.lease.id, c.lease.job, c.lease.until
		}
		if a := c.run; a != nil {
			st.Job, st.Share, st.Epoch = a.rec.Job, a.rec.Share, a.rec.Epoch
		}
		out = append(out, st)
	}
	return out
}

// state is what the card is doing, as CardStatus.State says it.
func (c *cardState) state() CardState {
	switch {
	case !c.present:
		return CardGone
	case !c.card.Health.Healthy:
		return CardUnhealthy
	case c.run != nil:
		return CardRunning
	case c.lease != nil:
		return CardReserved
	}
	return CardFree
}
