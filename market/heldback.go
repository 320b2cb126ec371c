package market

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Offers a coordinator passes over whatever their price: simulated cards
// for a job that does not allow them, and nodes held back (a card claimed
// by two peers, a node that has not passed, or failed, this coordinator's
// verification probe). Candidate selection skips them before scoring; the
// round remembers what it skipped, so that a job nothing else can take
// waits in pending saying why (shortfall.go), and --explain lists them.

// heldOffers counts, per reason, the free cards of each node a round
// passed over.
type heldOffers map[Reason]map[string]int

// note records that node's avail free cards were passed over for r.
func (h heldOffers) note(r Reason, node string, avail int) {
	m := h[r]
	if m == nil {
		m = map[string]int{}
		h[r] = m
	}
	m[node] = max(m[node], avail)
}

// held says why the job may not ask o's node to bid o's cards, or
// reasonPassed. detail is for --explain. cu, when above 0, is the compute
// units o's cards are treated as (their verification probe showed them
// performing like another model).
func (c *coordinator) held(j *job, o *Offer) (r Reason, detail string, cu float64) {
	switch {
	case o.HeldBack != "":
		return ReasonDuplicate, o.HeldBack, 0
	case o.Simulated && !j.spec.AllowSimulated:
		return ReasonSimulated, SimulatedDetail, 0
	}
	r, detail, v := c.verifyHold(j, o)
	if r != reasonPassed {
		return r, detail, 0
	}
	if v != nil {
		f := cardFacts{model: o.Model, vendor: o.Vendor, memMiB: o.MemoryMiB, simulated: o.Simulated}
		if r, detail := c.performsHold(j, f, v); r != reasonPassed {
			return r, detail, 0
		}
		return reasonPassed, "", max(v.ComputeUnits, 1e-3)
	}
	return reasonPassed, "", 0
}

// heldText says, for a pending job's reason, what its latest round passed
// over, the reasons in a fixed order: "only simulated cards could take it:
// 8 free on 1 supplier; the job does not allow simulated cards (gpumesh
// submit --allow-simulated)". only says nothing else was asked.
func heldText(h heldOffers, only bool) string {
	var parts []string
	for _, r := range []Reason{ReasonSimulated, ReasonDuplicate, ReasonUnverified, ReasonProbe} {
		nodes := h[r]
		if len(nodes) == 0 {
			continue
		}
		cards := 0
		for _, n := range nodes {
			cards += n
		}
		where := fmt.Sprintf("%d free on %s", cards, text.Count(len(nodes), "supplier"))
		switch r {
		case ReasonSimulated:
			lead := "simulated cards were not asked"
			if only {
				lead = "only simulated cards could take it"
			}
			parts = append(parts, fmt.Sprintf("%s: %s; the job does not allow simulated cards (gpumesh submit --allow-simulated)", lead, where))
		case ReasonDuplicate:
			parts = append(parts, fmt.Sprintf("suppliers held back, a card they claim is claimed by another peer too: %s (%s)", where, shortNodes(nodes)))
		case ReasonUnverified:
			parts = append(parts, fmt.Sprintf("suppliers waiting for this coordinator's verification probe: %s", where))
		case ReasonProbe:
			parts = append(parts, fmt.Sprintf("suppliers whose cards failed this coordinator's verification probe: %s", where))
		}
	}
	return strings.Join(parts, "; ")
}

// shortNodes names up to three nodes, shortened, in order.
func shortNodes(nodes map[string]int) string {
	ids := make([]string, 0, len(nodes))
	for n := range nodes {
		ids = append(ids, n)
	}
	slices.Sort(ids)
	var out []string
	for i, id := range ids {
		if i == 3 {
			out = append(out, fmt.Sprintf("%d more", len(ids)-3))
			break
		}
		out = append(out, shortID(id))
	}
	return strings.Join(out, ", ")
}

// shortID shortens a peer ID as the CLI prints it: "12*Qx3kLm".
func shortID(id string) string {
	if len(id) <= 10 {
		return id
	}
	return id[:2] + "*" + id[len(id)-6:]
}

// noteHeld records an offer passed over for r in the job's round and, when
// x is set, explains it: one entry per node, except for simulated cards,
// which add up per model.
func (c *coordinator) noteHeld(j *job, model string, o *Offer, r Reason, detail string, avail int, x *explainer) {
	if j.held == nil {
		j.held = heldOffers{}
	}
	j.held.note(r, o.Node, avail)
	if x == nil {
		return
	}
	if r == ReasonSimulated {
		for i := range x.entries {
			if e := &x.entries[i]; e.Stage == "book" && e.Node == "*" && e.Model == model && e.Reason == r {
				e.Cards += avail
				x.cards[r] += avail
				return
			}
		}
		x.add(ExplainEntry{Stage: "book", Node: "*", Model: model, Cards: avail, Reason: r, Detail: detail})
		return
	}
	x.add(ExplainEntry{Stage: "book", Node: o.Node, Model: model, Cards: avail, Reason: r, Detail: detail})
}

// heldLot is why a bid's node may not win.
type heldLot struct {
	reason Reason
	detail string
}

// nodeView is a BookView that lists one node's offers; *Book is one.
type nodeView interface {
	Node(node string) []Offer
}

// nodeHeld says why node may not win whatever it bids (a bid that came by
// the broadcast topic): its offers are held back in the book, or its
// verification is not done; reasonPassed otherwise.
func (c *coordinator) nodeHeld(node string) (Reason, string) {
	if nv, ok := c.n.cfg.Book.(nodeView); ok {
		for _, o := range nv.Node(node) {
			if o.HeldBack != "" {
				return ReasonDuplicate, o.HeldBack
			}
		}
	}
	return c.verifyNodeHold(node)
}
