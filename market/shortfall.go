package market

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A round that falls short leaves its job pending with a reason. The
// reason says what the suppliers asked answered, counted by cause, the
// most common first, so that the owner sees the cause that matters
// without --explain:
//
//	waiting for capacity: 3 of 3 suppliers asked declined: policy: a gang across nodes needs network host here (no private network: the node needs nft (package nftables)); this supplier allows at most egress (3)
//	waiting for capacity: 4 of 6 suppliers asked declined: the free cards ask more than the job's 10.00 CNY per card-hour (3), no free cards (1); 1 did not answer; bids offer 1 nodes with 8 feasible cards, the job needs 2
//
// Declines are counted by their text, which suppliers word about the job
// (decline.go), so suppliers in the same situation add up.

// Bounds of a shortfall reason: the causes named (the rest are counted),
// and the length of each cause's text.
const (
	shortfallCauses   = 2
	shortfallCauseLen = 200
)

// shortfall is the reason a job waits after round r fell short; short is
// what clearing said of the bids ("bids offer 0 feasible cards, the job
// needs 4").
func (c *coordinator) shortfall(j *job, r *round, short string) string {
	declines := map[string]int{} // decline text → suppliers
	unusable := map[string]int{} // why a bid was of no use → suppliers
	silent, asked, usable := 0, 0, 0
	for _, a := range r.asks {
		asked++
		switch {
		case a.declined != "":
			declines[causeText(a.declined)]++
		case !a.replied:
			silent++
		}
	}
	for i := range r.lots {
		lot := &r.lots[i]
		if r.askBy[lot.Node] == nil {
			asked++ // answered the broadcast
		}
		switch why := c.lotUse(j, r, i); why {
		case "":
			usable++
		default:
			unusable[why]++
		}
	}
	held := heldText(j.held, asked == 0)
	if len(declines) == 0 && len(unusable) == 0 && silent == 0 {
		if held != "" && asked == 0 {
			return "waiting for capacity: " + held
		}
		if held != "" {
			return "waiting for capacity: " + short + "; " + held
		}
		return "waiting for capacity: " + short
	}
	var parts []string
	if n := countAll(declines); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d suppliers asked declined: %s", n, asked, topCauses(declines)))
	}
	if n := countAll(unusable); n > 0 {
		parts = append(parts, fmt.Sprintf("%d bids could not be used: %s", n, topCauses(unusable)))
	}
	if silent > 0 {
		parts = append(parts, fmt.Sprintf("%d did not answer", silent))
	}
	if usable > 0 {
		parts = append(parts, short) // some bids helped, not enough
	}
	if held != "" {
		parts = append(parts, held)
	}
	return "waiting for capacity: " + strings.Join(parts, "; ")
}

// lotUse says why the i-th bid of round r could not serve the job, or ""
// when it could (some of its cards pass every check).
func (c *coordinator) lotUse(j *job, r *round, i int) string {
	lot, meta := &r.lots[i], &r.meta[i]
	switch {
	case lot.Expired:
		return "the reservation lapsed before the round cleared"
	case r.exclude[lot.Node]:
		return "the node already runs a share of this job"
	case meta.held != reasonPassed:
		return "the node is held back: " + meta.heldWhy
	case meta.feasible >= r.minCards():
		return ""
	case meta.feasible > 0:
		return fmt.Sprintf("fewer matching cards than the %d the job needs on one node", r.minCards())
	}
	for k := range lot.Cards {
		bc := &lot.Cards[k]
		f := cardFacts{model: bc.Model, vendor: bc.Vendor, memMiB: bc.MemoryMiB, cu: bc.ComputeUnits, price: bc.PriceCNY, preempts: bc.Preempts, simulated: bc.Simulated}
		if why := j.match.check(&f); why != reasonPassed {
			return "no card bid passes the job's checks: " + j.match.detail(why, &f)
		}
	}
	return "no card bid passes the job's checks"
}

// topCauses names the most common causes with their counts, most common
// first (ties by text), and counts the suppliers of the others.
func topCauses(causes map[string]int) string {
	keys := make([]string, 0, len(causes))
	for k := range causes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(causes[b], causes[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var parts []string
	rest := 0
	for i, k := range keys {
		if i < shortfallCauses {
			parts = append(parts, fmt.Sprintf("%s (%d)", k, causes[k]))
		} else {
			rest += causes[k]
		}
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("%d for other reasons (see --explain)", rest))
	}
	return strings.Join(parts, ", ")
}

// causeText is a supplier's reason fit for one line of a job's reason:
// one line of at most shortfallCauseLen bytes.
func causeText(s string) string { return oneLineCut(s, shortfallCauseLen) }

func countAll(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
