package market

import (
	"fmt"
	"strings"
)

// cardMisses counts, for one BidRequest, the free cards of a supplier that
// failed the job's filter, by the first check each failed.
type cardMisses map[Reason]int

// declineText says why a supplier cannot serve a bid request whose filter
// is f: it holds matched matching free cards, of which it may bid usable
// (as many of one model as it has, when the job's shares are of one
// model), and the request needs min.
// The words are about the job, not the supplier (the supplier's own limit
// is in them only where it is the reason), so that every supplier in the
// same situation declines with the same text and the coordinator can
// count them (a pending job's reason says "3 of 3 suppliers asked
// declined: ..."; see shortfall.go).
func declineText(f *Filter, matched, usable, min int, misses cardMisses) string {
	if usable < matched {
		return fmt.Sprintf("%d matching cards free, at most %d of one model; the job needs %d of one model on one node", matched, usable, min)
	}
	if matched > 0 {
		return fmt.Sprintf("%d matching cards free, the job needs %d on one node", matched, min)
	}
	// The check most free cards failed; ties go to the earlier check.
	top, n := reasonPassed, 0
	for _, r := range checkOrder() {
		if misses[r] > n {
			top, n = r, misses[r]
		}
	}
	switch top {
	case ReasonModel:
		return "no free card of the job's models (" + strings.Join(f.Models, ", ") + ")"
	case ReasonVendor:
		return "no free card of the job's vendors (" + joinVendors(f.Vendors) + ")"
	case ReasonImage:
		return "no free card of a vendor the job's images serve (" + joinVendors(f.ImageVendors) + ")"
	case ReasonMemory:
		return fmt.Sprintf("no free card with the job's %d MiB of memory", f.MinMemoryMiB)
	case ReasonCompute:
		return fmt.Sprintf("no free card with the job's %.2f compute units", f.MinComputeUnits)
	case ReasonPrice:
		return fmt.Sprintf("the free cards ask more than the job's %.2f CNY per card-hour", f.MaxPriceCNY)
	case ReasonSimulated:
		return "the free cards are " + SimulatedDetail
	case ReasonPreempt:
		return "the free cards run preemptible work, which a preemptible job may not preempt"
	}
	return "no free cards"
}

// checkOrder is the order the feasibility checks run in (matcher.check).
func checkOrder() [8]Reason {
	return [...]Reason{ReasonModel, ReasonVendor, ReasonImage, ReasonMemory, ReasonCompute, ReasonSimulated, ReasonPrice, ReasonPreempt}
}
