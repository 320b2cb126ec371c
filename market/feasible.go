package market

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/device"
)

// Reason names why a candidate (an offer in the book, a card in a bid, a
// node) did not win. The values are stable: `gpumesh job ID --explain` and
// API clients read them.
type Reason string

// The reasons a candidate loses, in the order the pipeline applies them.
const (
	ReasonModel      Reason = "model_not_allowed"   // model not in spec.models
	ReasonVendor     Reason = "vendor_not_allowed"  // vendor not in spec.vendors
	ReasonImage      Reason = "no_image_for_vendor" // spec.images names no image for the card's vendor
	ReasonMemory     Reason = "memory_too_small"    // below spec.min_memory_mib
	ReasonCompute    Reason = "compute_too_small"   // below spec.min_compute_units (or unknown)
	ReasonPrice      Reason = "price_above_max"     // asks more than spec.max_price_cny
	ReasonPreempt    Reason = "would_preempt"       // a preemptible job may not preempt
	ReasonNoFree     Reason = "no_free_cards"       // book: nothing free on the node
	ReasonExcluded   Reason = "node_has_share"      // node already runs a share that must be apart
	ReasonLayout     Reason = "layout_unsatisfied"  // too few feasible cards on the node for the layout
	ReasonLease      Reason = "lease_expired"       // the bid's reservation lapsed before clearing
	ReasonOutbid     Reason = "outbid"              // feasible, but cheaper candidates filled the job
	ReasonNotNeeded  Reason = "not_needed"          // the node won; the layout takes no more of its cards
	ReasonNotAsked   Reason = "not_asked"           // book: enough better candidates were asked
	ReasonDeclined   Reason = "declined"            // the supplier declined the bid request
	ReasonSilent     Reason = "no_reply"            // the supplier did not answer within the window
	ReasonAvoided    Reason = "avoided"             // node lost a share of this job; used only as a last resort
	ReasonRegion     Reason = "region_has_replica"  // a service's replica runs in the node's region; one elsewhere won
	ReasonSimulated  Reason = "simulated_cards"     // the cards are simulated and the job does not allow them
	ReasonDuplicate  Reason = "duplicate_card"      // book: a card of the node is claimed by another peer too
	ReasonUnverified Reason = "unverified"          // book: the node has not passed this coordinator's verification probe yet
	ReasonProbe      Reason = "probe_failed"        // book: the node's cards failed this coordinator's verification probe
	ReasonWon        Reason = "won"                 // not a loss: the candidate won
	ReasonRejected   Reason = "award_rejected"      // the supplier rejected the award
	ReasonTimedOut   Reason = "award_timed_out"     // the supplier did not answer the award
	reasonPassed     Reason = ""                    // passed every check
)

// Filter is the part of a job spec that decides whether one card may serve
// the job. It travels in BidRequests so suppliers offer only cards that
// qualify; the coordinator checks every bid card against it again.
type Filter struct {
	Models  []string        `json:"models,omitempty"`
	Vendors []device.Vendor `json:"vendors,omitempty"`
	// ImageVendors, when set, are the vendors the job's images serve
	// (JobSpec.Images names an image for each and none for every vendor):
	// a card of another vendor cannot run the job. Empty: any vendor.
	ImageVendors    []device.Vendor `json:"image_vendors,omitempty"`
	MinMemoryMiB    uint64          `json:"min_memory_mib,omitempty"`
	MinComputeUnits float64         `json:"min_compute_units,omitempty"`
	MaxPriceCNY     float64         `json:"max_price_cny"`
	// Preemptible: the job pays preemptible prices and may not preempt.
	Preemptible bool `json:"preemptible,omitempty"`
	// AllowSimulated admits simulated cards (JobSpec.AllowSimulated).
	AllowSimulated bool `json:"allow_simulated,omitempty"`
}

// FilterOf returns the filter of a spec.
func FilterOf(s *JobSpec) Filter {
	return Filter{
		Models:          s.Models,
		Vendors:         s.Vendors,
		ImageVendors:    imageVendors(s.Images),
		MinMemoryMiB:    s.MinMemoryMiB,
		MinComputeUnits: s.MinComputeUnits,
		MaxPriceCNY:     s.MaxPriceCNY,
		Preemptible:     s.KindOrDefault() == KindPreemptible,
		AllowSimulated:  s.AllowSimulated,
	}
}

func (f *Filter) validate() error {
	if len(f.Models) > 64 || len(f.Vendors) > 16 || len(f.ImageVendors) > MaxImages {
		return fmt.Errorf("filter: too many models or vendors")
	}
	if math.IsNaN(f.MaxPriceCNY) || f.MaxPriceCNY <= 0 || f.MaxPriceCNY > MaxPriceCap {
		return fmt.Errorf("filter: max price %v out of range", f.MaxPriceCNY)
	}
	if math.IsNaN(f.MinComputeUnits) || f.MinComputeUnits < 0 {
		return fmt.Errorf("filter: min compute units %v out of range", f.MinComputeUnits)
	}
	return nil
}

// matcher applies a Filter, caching the model decisions (patterns are
// matched once per model key, not once per card).
type matcher struct {
	f      Filter
	models map[string]bool
}

func newMatcher(f Filter) *matcher { return &matcher{f: f, models: map[string]bool{}} }

// modelAllowed reports whether the filter's models admit key.
func (m *matcher) modelAllowed(key string) bool {
	if len(m.f.Models) == 0 {
		return true
	}
	ok, seen := m.models[key]
	if !seen {
		for _, p := range m.f.Models {
			if p == key {
				ok = true
				break
			}
			if strings.ContainsAny(p, "*?[") {
				if hit, _ := path.Match(p, key); hit {
					ok = true
					break
				}
			}
		}
		m.models[key] = ok
	}
	return ok
}

// cardFacts is what the checks look at: one card, or one offer's cards.
type cardFacts struct {
	model     string
	vendor    device.Vendor
	memMiB    uint64
	cu        float64
	price     float64 // asked for this job, per card-hour
	preempts  bool
	simulated bool
}

// check runs the feasibility checks in order and returns the first reason
// the card fails, or reasonPassed.
func (m *matcher) check(c *cardFacts) Reason {
	switch {
	case !m.modelAllowed(c.model):
		return ReasonModel
	case len(m.f.Vendors) > 0 && !slices.Contains(m.f.Vendors, c.vendor):
		return ReasonVendor
	case len(m.f.ImageVendors) > 0 && !slices.Contains(m.f.ImageVendors, c.vendor):
		return ReasonImage
	case roundedMiB(c.memMiB) < m.f.MinMemoryMiB:
		return ReasonMemory
	case m.f.MinComputeUnits > 0 && c.cu < m.f.MinComputeUnits:
		return ReasonCompute
	case c.simulated && !m.f.AllowSimulated:
		return ReasonSimulated
	case c.price > m.f.MaxPriceCNY || !(c.price >= 0):
		return ReasonPrice
	case c.preempts && m.f.Preemptible:
		return ReasonPreempt
	}
	return reasonPassed
}

// detail says in words why c failed the check named r.
func (m *matcher) detail(r Reason, c *cardFacts) string {
	switch r {
	case ReasonModel:
		return fmt.Sprintf("model %s is not among %s", c.model, strings.Join(m.f.Models, ", "))
	case ReasonVendor:
		return fmt.Sprintf("vendor %s is not among %s", c.vendor, joinVendors(m.f.Vendors))
	case ReasonImage:
		return fmt.Sprintf("the job names no image for vendor %s (images for %s)", c.vendor, joinVendors(m.f.ImageVendors))
	case ReasonMemory:
		return fmt.Sprintf("%d GiB per card, job needs %d MiB", roundedMiB(c.memMiB)/1024, m.f.MinMemoryMiB)
	case ReasonCompute:
		if c.cu == 0 {
			return fmt.Sprintf("compute units unknown, job needs %.2f", m.f.MinComputeUnits)
		}
		return fmt.Sprintf("%.2f compute units per card, job needs %.2f", c.cu, m.f.MinComputeUnits)
	case ReasonPrice:
		return fmt.Sprintf("asks %.2f CNY per card-hour, job pays at most %.2f", c.price, m.f.MaxPriceCNY)
	case ReasonPreempt:
		return "the card runs preemptible work and this job is preemptible too"
	case ReasonSimulated:
		return SimulatedDetail
	}
	return string(r)
}

// SimulatedDetail says why simulated cards lost, in explanations and
// declines.
const SimulatedDetail = "simulated cards (gpumesh node --sim); the job does not allow simulated cards (gpumesh submit --allow-simulated)"

// usableCards counts the cards of a bid that pass the job's checks and
// may form one share: all of them when the job lets a share mix models
// (JobSpec.MixedModels), else those of its most numerous model.
func usableCards(m *matcher, cards []BidCard, mixed bool) int {
	var perModel map[string]int
	most, all := 0, 0
	for i := range cards {
		bc := &cards[i]
		f := cardFacts{model: bc.Model, vendor: bc.Vendor, memMiB: bc.MemoryMiB, cu: bc.ComputeUnits, price: bc.PriceCNY, preempts: bc.Preempts, simulated: bc.Simulated}
		if m.check(&f) != reasonPassed {
			continue
		}
		all++
		if mixed {
			continue
		}
		if perModel == nil {
			perModel = map[string]int{}
		}
		perModel[bc.Model]++
		most = max(most, perModel[bc.Model])
	}
	if mixed {
		return all
	}
	return most
}

// roundedMiB is a card's memory counted in whole GiB as it rounds, in MiB:
// a 24564 MiB RTX 4090 counts as 24 GiB = 24576 MiB.
func roundedMiB(mib uint64) uint64 { return (mib + 512) / 1024 * 1024 }
