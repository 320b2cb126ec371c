package market

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Explanation says how the latest placement round of a job went: which
// candidates were asked, which won, and why every other candidate lost.
// `gpumesh job ID --explain` prints it.
type Explanation struct {
	Round uint64 `json:"round"`
	// Need says what the round had to place ("8 cards", "2 nodes × 8 cards").
	Need string `json:"need"`
	// Asked is the number of nodes sent a BidRequest; Broadcast says whether
	// the request also went to every node.
	Asked     int  `json:"asked"`
	Broadcast bool `json:"broadcast,omitempty"`
	// Bids is the number of bids received.
	Bids int `json:"bids"`
	// ClearingPriceCU is the uniform clearing price in CNY per surviving
	// compute-unit hour (see the package README); 0 if the round did not clear.
	ClearingPriceCU float64 `json:"clearing_price_cu,omitempty"`
	// Outcome is "cleared" or why the round did not clear.
	Outcome string `json:"outcome"`
	// Entries lists candidates best first: winners, then the losers that
	// came closest, then those that failed a check. At most
	// Config.ExplainEntries are kept; Omitted counts the rest.
	Entries []ExplainEntry `json:"entries"`
	Omitted int            `json:"omitted,omitempty"`
	// Cards counts the candidate cards by reason (ReasonWon included); a
	// node that declined or did not reply counts the cards it was asked
	// for.
	Cards map[Reason]int `json:"cards"`
}

// ExplainEntry is one candidate: a node's offer in the book, or a group of
// cards in its bid that share an outcome.
type ExplainEntry struct {
	// Stage is "book" (candidate selection) or "bid" (clearing).
	Stage string `json:"stage"`
	Node  string `json:"node"`
	Model string `json:"model,omitempty"`
	// Cards is the number of cards the entry stands for: offered, bid, or,
	// for a node that declined or did not reply, asked of it.
	Cards  int    `json:"cards"`
	Reason Reason `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// Score is the best effective price of these cards, CNY per surviving
	// compute-unit hour; 0 when a check failed before ranking.
	Score float64 `json:"score,omitempty"`

	// Figures for a Detail written only if the entry is kept (most of a
	// big round's entries are dropped).
	pay, priceCU float64
	simulated    bool // a winner's cards are simulated
}

// detail writes the Detail of an entry that has none from its figures.
func (e *ExplainEntry) detail() {
	if e.Detail != "" {
		return
	}
	switch e.Reason {
	case ReasonWon:
		e.Detail = fmt.Sprintf("paid %.2f CNY per card-hour", e.pay)
		if e.simulated {
			e.Detail += "; simulated cards (gpumesh node --sim), as the job allows"
		}
	case ReasonOutbid:
		e.Detail = fmt.Sprintf("effective %.4f CNY per CU-hour; cleared at %.4f", e.Score, e.priceCU)
	case ReasonAvoided:
		e.Detail = "the node lost a share of this job; used only as a last resort"
	case ReasonNotNeeded:
		e.Detail = "the node won; the layout takes no more of its cards"
	}
}

// String renders the explanation for people, one candidate a line.
func (e *Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %d: %s; asked %s", e.Round, e.Need, text.Count(e.Asked, "node"))
	if e.Broadcast {
		b.WriteString(" and the broadcast topic")
	}
	fmt.Fprintf(&b, "; %s; %s", text.Count(e.Bids, "bid"), e.Outcome)
	if e.ClearingPriceCU > 0 {
		fmt.Fprintf(&b, " at %.4f CNY per CU-hour", e.ClearingPriceCU)
	}
	b.WriteByte('\n')
	for _, en := range e.Entries {
		fmt.Fprintf(&b, "  %-4s %-12s %-16s %3d  %-18s", en.Stage, en.Node, en.Model, en.Cards, en.Reason)
		if en.Score > 0 {
			fmt.Fprintf(&b, " %.4f", en.Score)
		}
		if en.Detail != "" {
			b.WriteString("  " + en.Detail)
		}
		b.WriteByte('\n')
	}
	if e.Omitted > 0 {
		fmt.Fprintf(&b, "  ... %d more\n", e.Omitted)
	}
	return b.String()
}

// explainer collects entries for one round and keeps the best few.
type explainer struct {
	entries []ExplainEntry
	cards   map[Reason]int
}

// newExplainer returns an explainer with room for n entries.
func newExplainer(n int) *explainer {
	return &explainer{entries: make([]ExplainEntry, 0, n), cards: make(map[Reason]int, 4)}
}

// reset empties x for reuse.
func (x *explainer) reset() {
	clear(x.entries[:cap(x.entries)]) // let go of the strings
	x.entries = x.entries[:0]
	clear(x.cards)
}

func (x *explainer) add(e ExplainEntry) {
	x.entries = append(x.entries, e)
	x.cards[e.Reason] += e.Cards
}

// replace drops node's bid-stage entries and adds e in their place: the
// node's outcome changed after clearing (its award failed, or it won as a
// spare).
func (x *explainer) replace(node string, e ExplainEntry) {
	x.entries = slices.DeleteFunc(x.entries, func(old ExplainEntry) bool {
		if old.Stage == "bid" && old.Node == node {
			x.cards[old.Reason] -= old.Cards
			return true
		}
		return false
	})
	x.add(e)
}

// rank orders reasons for display: winners, near misses, then checks.
func reasonRank(r Reason) int {
	switch r {
	case ReasonWon:
		return 0
	case ReasonOutbid, ReasonNotNeeded, ReasonAvoided, ReasonNotAsked, ReasonRegion:
		return 1
	case ReasonRejected, ReasonTimedOut, ReasonLease, ReasonDeclined, ReasonSilent:
		return 2
	}
	return 3
}

// finish sorts the entries and keeps at most limit of them in out.
func (x *explainer) finish(out *Explanation, limit int) {
	slices.SortStableFunc(x.entries, func(a, b ExplainEntry) int {
		if c := cmp.Compare(reasonRank(a.Reason), reasonRank(b.Reason)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Stage, b.Stage); c != 0 {
			return -c // "bid" before "book"
		}
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.Node, b.Node)
	})
	if limit >= 0 && len(x.entries) > limit {
		out.Omitted += len(x.entries) - limit
		x.entries = x.entries[:limit]
	}
	for i := range x.entries {
		x.entries[i].detail()
	}
	if out.Entries == nil && out.Cards == nil {
		// The usual case: out takes x's entries and counts, and x starts
		// afresh should it be used again.
		if len(x.entries) > 0 { // none stays nil
			out.Entries = slices.Clip(x.entries)
		}
		out.Cards = x.cards
		x.entries, x.cards = nil, map[Reason]int{}
		return
	}
	out.Entries = append(out.Entries, x.entries...)
	if out.Cards == nil {
		out.Cards = map[Reason]int{}
	}
	for r, n := range x.cards {
		out.Cards[r] += n
	}
}
