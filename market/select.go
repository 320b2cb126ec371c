package market

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
)

// ask is one node a round sent a BidRequest to.
type ask struct {
	node     string
	want     int
	score    float64 // the book's best score for the node (lower is better)
	replied  bool
	feasible int       // feasible cards in its bid (0 if it declined)
	declined string    // its Decline's reason
	sentAt   time.Time // when the request went out
}

// nodeOffer aggregates what one node offers a job in the book.
type nodeOffer struct {
	node   string
	region string
	model  string
	avail  int
	scores []scoredAvail // ascending
	best   float64
	avoid  bool
	tie    uint64
	kcost  float64 // slot layouts: the cost of the node's best PerSlot cards
}

type scoredAvail struct {
	score float64
	n     int
}

// selectCandidates picks the nodes to ask for need from the book, best
// effective price first, with spares: at least SpareFactor times the cards
// needed and SpareNodes nodes beyond those needed. Nodes in skip (asked
// already, or holding a share that must be apart) are passed over; nodes in
// avoid come last. enough reports whether the book's free cards can satisfy
// the need at all; when not, the round also broadcasts.
//
// The best nodes that cover the need are asked for sure; the spares are
// drawn at random (seeded by the job and draw) from the next ones, within
// the best offers holding four times the cards needed, so that coordinators
// with the same book do not all fall back on the same spares.
// For a service, the best node of each region that holds no replica yet
// comes first among those asked for sure (spread.go).
// With spread > 1 (an extension after the round fell short, which means
// other coordinators want the same cards) every candidate is drawn at
// random from the best spread times as many: jobs that all lost the same
// cheap nodes fan out over the next ones instead of colliding again.
func (c *coordinator) selectCandidates(j *job, need Need, skip map[string]bool, x *explainer, spread int, draw uint64) (asks []*ask, enough bool) {
	book := c.n.cfg.Book
	if book == nil {
		return nil, false
	}
	var nodes []*nodeOffer
	if need.Cards > 0 {
		nodes = c.walkBook(j, 4*need.Cards*spread, need.Cards, skip, x, true)
	} else {
		nodes = c.walkBook(j, need.Slots*need.PerSlot, 0, skip, x, false)
	}
	if !j.spec.MixedModels {
		nodes = oneModelPerNode(nodes, need)
	}
	want := need.Cards
	if need.Slots > 0 {
		k := need.PerSlot
		want = k
		nodes = slices.DeleteFunc(nodes, func(o *nodeOffer) bool {
			if o.avail >= k {
				o.kcost = kCheapest(o.scores, k)
				return false
			}
			if x != nil {
				x.add(ExplainEntry{Stage: "book", Node: o.node, Model: o.model, Cards: o.avail, Reason: ReasonLayout, Score: o.best,
					Detail: fmt.Sprintf("%d free matching cards, the layout needs %d on one node", o.avail, k)})
			}
			return true
		})
		for _, o := range nodes {
			o.best = o.kcost / float64(k)
		}
	}
	slices.SortFunc(nodes, func(a, b *nodeOffer) int {
		if a.avoid != b.avoid {
			if a.avoid {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.best, b.best); c != 0 {
			return c
		}
		return cmp.Compare(a.tie, b.tie)
	})
	if used := j.spreadRegions(); used != nil && need.Slots > 0 {
		// A service: the best node of each region without a replica is
		// asked for sure, so that clearing can spread (spread.go).
		picked, rest := spreadOver(len(nodes), need.Slots,
			func(i int) string { return nodes[i].region },
			func(i int) bool { return nodes[i].avoid }, used)
		spread := make([]*nodeOffer, 0, len(nodes))
		for _, i := range append(picked, rest...) {
			spread = append(spread, nodes[i])
		}
		nodes = spread
	}
	take := func(o *nodeOffer) int {
		if need.Slots > 0 {
			return want
		}
		return min(o.avail, want)
	}
	spareCards := int(math.Ceil(float64(need.total()) * c.n.cfg.SpareFactor))
	rng := rand.New(rand.NewPCG(j.seed, draw))
	if spread > 1 {
		nodes = c.sample(nodes, take, spareCards+c.n.cfg.SpareNodes*want, spread, rng)
	} else {
		cum, i := 0, 0
		for i < len(nodes) && cum < need.total() {
			cum += take(nodes[i])
			i++
		}
		rest := nodes[i:]
		if k := slices.IndexFunc(rest, func(o *nodeOffer) bool { return o.avoid }); k >= 0 {
			rest = rest[:k] // avoided nodes stay last
		}
		rng.Shuffle(len(rest), func(a, b int) { rest[a], rest[b] = rest[b], rest[a] })
	}
	cum, beyond := 0, 0
	for i, o := range nodes {
		if cum >= need.total() {
			if cum >= spareCards && beyond >= c.n.cfg.SpareNodes {
				if x != nil {
					for _, rest := range nodes[i:min(len(nodes), i+maxNotAsked)] {
						x.add(ExplainEntry{Stage: "book", Node: rest.node, Model: rest.model, Cards: rest.avail, Reason: ReasonNotAsked, Score: rest.best,
							Detail: "enough better candidates were asked"})
					}
				}
				break
			}
			beyond++
		}
		w := take(o)
		asks = append(asks, &ask{node: o.node, want: w, score: o.best})
		cum += w
	}
	return asks, cum >= need.total()
}

// sample keeps the best candidates that offer spread times round cards, in
// a random order.
func (c *coordinator) sample(nodes []*nodeOffer, take func(*nodeOffer) int, round, spread int, r *rand.Rand) []*nodeOffer {
	window, cum := 0, 0
	for window < len(nodes) && cum < spread*round {
		cum += take(nodes[window])
		window++
	}
	out := slices.Clone(nodes[:window])
	r.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// maxNotAsked bounds the book candidates an explanation lists as not asked:
// the next few are telling, the hundreds after them are not.
const maxNotAsked = 8

// kCheapest is the sum of the k lowest scores.
func kCheapest(s []scoredAvail, k int) float64 {
	sum := 0.0
	for _, sa := range s {
		n := min(sa.n, k)
		sum += float64(n) * sa.score
		k -= n
		if k == 0 {
			break
		}
	}
	return sum
}

// walkBook gathers the book's free, feasible offers per node. For LayoutAny
// (early true) it keeps only the best offers that add up to the cards
// wanted with spares (SpareFactor times them, and SpareNodes more), an
// offer counting for at most perNode cards, what its node would be asked
// for: a node with many free cards is one candidate among the spares, not
// several. It visits the models cheapest first and each model's offers in
// price order, and stops a model (or skips it) once no offer left in it
// can beat the worst kept (a score is never below the offer's floor price
// per compute unit). For slot layouts it reads every offer, since a node's
// cards may span models.
//
// The nodes come in the order byNode gives; the caller sorts them.
func (c *coordinator) walkBook(j *job, cards, perNode int, skip map[string]bool, x *explainer, early bool) []*nodeOffer {
	preemptible := j.spec.KindOrDefault() == KindPreemptible
	spareCards := int(math.Ceil(float64(cards)*c.n.cfg.SpareFactor)) + c.n.cfg.SpareNodes
	lists := c.modelsFor(j, x)
	slices.SortFunc(lists, func(a, b modelList) int { return cmp.Compare(a.bound, b.bound) })
	best := &c.best
	if best.items == nil {
		best.items = make([]scoredOffer, 0, 16)
	}
	best.items, best.cards = best.items[:0], 0
	for _, l := range lists {
		dear := 0
		for i := range l.offers {
			o := &l.offers[i]
			if early && best.full(spareCards) && o.floorPrice()/l.cu >= best.worst() {
				break
			}
			avail := o.Free
			price := o.PriceCNY
			if preemptible {
				price = o.PreemptiblePriceCNY
			} else {
				avail += o.Preemptible
			}
			if avail <= 0 {
				continue
			}
			r, detail, treatedCU := c.held(j, o)
			if r != reasonPassed {
				if len(skip) == 0 || !skip[o.Node] {
					c.noteHeld(j, l.offers[0].Model, o, r, detail, avail, x)
				}
				continue
			}
			cu := o.ComputeUnits
			if treatedCU > 0 {
				cu = treatedCU // its probe: the cards perform like another model
			}
			if price > j.spec.MaxPriceCNY {
				if len(skip) == 0 || !skip[o.Node] {
					dear += avail
				}
				continue
			}
			if early && best.full(spareCards) && price/l.cu > best.worst() {
				// An offer whose price per compute unit is above the worst
				// kept score scores worse still (survival ≤ 1): trim would
				// drop it at once. Passing it over saves the survival's exp
				// and the heap's work on most of a big model's offers.
				continue
			}
			if len(skip) > 0 && skip[o.Node] {
				continue
			}
			take := avail
			if perNode > 0 {
				take = min(avail, perNode)
			}
			best.push(scoredOffer{offer: o, avail: avail, take: take, score: j.scorer.score(price, j.scorer.survival(o.Node, o.Availability), cu)})
			if early {
				best.trim(spareCards)
			}
		}
		if dear > 0 && x != nil {
			x.add(ExplainEntry{Stage: "book", Node: "*", Model: l.offers[0].Model, Cards: dear, Reason: ReasonPrice,
				Detail: fmt.Sprintf("free cards of the model ask more than the job's %.2f CNY per card-hour", j.spec.MaxPriceCNY)})
		}
	}
	out := c.byNode(j, best.items)
	clear(best.items) // the scratch holds on to no book
	return out
}

// byNode sums the kept offers up per node, in the order each node's first
// offer was kept (that offer names the node's model); a node's scores come
// out ascending. Under the one-model rule (JobSpec.MixedModels false) it
// sums them per node and model instead: oneModelPerNode then keeps one
// model of each node.
func (c *coordinator) byNode(j *job, items []scoredOffer) []*nodeOffer {
	// One allocation for every node and one for every score; a node with
	// offers of several models grows its own scores.
	slab := make([]nodeOffer, 0, len(items))
	scores := make([]scoredAvail, len(items))
	out := make([]*nodeOffer, 0, len(items))
	type nodeModel struct{ node, model string }
	var index map[nodeModel]*nodeOffer // for many offers; a few are scanned
	if len(items) > 32 {
		index = make(map[nodeModel]*nodeOffer, len(items))
	}
	oneModel := !j.spec.MixedModels
	key := func(o *Offer) nodeModel {
		if oneModel {
			return nodeModel{o.Node, o.Model}
		}
		return nodeModel{node: o.Node}
	}
	for i := range items {
		so := &items[i]
		o := so.offer
		var no *nodeOffer
		if index != nil {
			no = index[key(o)]
		} else {
			for _, seen := range out {
				if seen.node == o.Node && (!oneModel || seen.model == o.Model) {
					no = seen
					break
				}
			}
		}
		if no == nil {
			slab = append(slab, nodeOffer{node: o.Node, region: o.Region, model: o.Model, best: so.score, avoid: j.avoid[o.Node], tie: tieKey(j.seed, o.Node, ""), scores: scores[i : i : i+1]})
			no = &slab[len(slab)-1]
			out = append(out, no)
			if index != nil {
				index[key(o)] = no
			}
		}
		no.avail += so.avail
		no.best = min(no.best, so.score)
		no.scores = append(no.scores, scoredAvail{so.score, so.avail})
	}
	for _, no := range out {
		if len(no.scores) > 1 {
			slices.SortFunc(no.scores, func(a, b scoredAvail) int { return cmp.Compare(a.score, b.score) })
		}
	}
	return out
}

// oneModelPerNode keeps one offer of each node (nodes holds one per node
// and model, byNode's order): for slot layouts the model whose PerSlot
// cheapest cards cost least among those with that many free (a node with
// none keeps its largest, for the explanation); for the any layout the
// model with the most free cards, up to the need, then the best score. The
// most cards, not the cheapest: the node is asked for that many, and bids
// the model that gives it the most (bidOneModel), so the asks add up to
// what the nodes can give, and a job the free cards can hold is placed
// (a node with 4 cheap H100s and 7 A100s is asked for its A100s by a job
// of 8 cards that the A100s and one more card can hold).
func oneModelPerNode(nodes []*nodeOffer, need Need) []*nodeOffer {
	out := nodes[:0:0]
	at := map[string]int{}
	perSlot := need.PerSlot
	better := func(a, b *nodeOffer) bool { // a over b
		if perSlot == 0 {
			an, bn := min(a.avail, need.Cards), min(b.avail, need.Cards)
			return an > bn || (an == bn && a.best < b.best)
		}
		aOK, bOK := a.avail >= perSlot, b.avail >= perSlot
		switch {
		case aOK != bOK:
			return aOK
		case !aOK:
			return a.avail > b.avail
		}
		return kCheapest(a.scores, perSlot) < kCheapest(b.scores, perSlot)
	}
	for _, o := range nodes {
		i, seen := at[o.node]
		switch {
		case !seen:
			at[o.node] = len(out)
			out = append(out, o)
		case better(o, out[i]):
			out[i] = o
		}
	}
	return out
}

// modelList is the book's offers of one model that passes the job's
// model-level checks (model, vendor, memory, compute).
type modelList struct {
	offers []Offer
	cu     float64 // the model's compute units, as scored
	bound  float64 // the head's floor price per compute unit
}

// modelsFor returns the book's models that pass the job's model-level
// checks; the others are explained (when x is set) and skipped.
//
// The slice is the coordinator's scratch: the next call reuses it.
func (c *coordinator) modelsFor(j *job, x *explainer) []modelList {
	models := c.n.cfg.Book.Models()
	if cap(c.lists) < len(models) {
		c.lists = make([]modelList, 0, len(models))
	}
	lists := c.lists[:0]
	for _, model := range models {
		offers := c.n.cfg.Book.Offers(model)
		if len(offers) == 0 {
			continue
		}
		head := &offers[0]
		facts := cardFacts{model: head.Model, vendor: head.Vendor, memMiB: head.MemoryMiB, cu: head.ComputeUnits}
		if r := j.match.check(&facts); r != reasonPassed {
			if x != nil {
				x.add(ExplainEntry{Stage: "book", Node: "*", Model: model, Cards: len(offers), Reason: r, Detail: j.match.detail(r, &facts) + " (every offer of the model)"})
			}
			continue
		}
		cu := j.scorer.cu(head.ComputeUnits)
		lists = append(lists, modelList{offers, cu, head.floorPrice() / cu})
	}
	c.lists = lists
	return lists
}

// scoredOffer is an offer with the job's score for it: avail cards free
// for the job, of which take count towards the heap's capacity.
type scoredOffer struct {
	offer       *Offer
	avail, take int
	score       float64
}

// offerHeap is a max-heap of offers by score (the worst on top) that keeps
// the best offers adding up to a capacity.
type offerHeap struct {
	items []scoredOffer
	cards int // the sum of the items' take
}

// full reports whether the heap holds at least want cards.
func (h *offerHeap) full(want int) bool { return len(h.items) > 0 && h.cards >= want }

func (h *offerHeap) worst() float64 { return h.items[0].score }

func (h *offerHeap) push(so scoredOffer) {
	h.items = append(h.items, so)
	h.cards += so.take
	for i := len(h.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if h.items[parent].score >= h.items[i].score {
			break
		}
		h.items[parent], h.items[i] = h.items[i], h.items[parent]
		i = parent
	}
}

// trim drops the worst offers while the rest still hold want cards.
func (h *offerHeap) trim(want int) {
	for len(h.items) > 1 && h.cards-h.items[0].take >= want {
		h.cards -= h.items[0].take
		last := len(h.items) - 1
		h.items[0] = h.items[last]
		h.items = h.items[:last]
		for i := 0; ; {
			l, r, top := 2*i+1, 2*i+2, i
			if l < last && h.items[l].score > h.items[top].score {
				top = l
			}
			if r < last && h.items[r].score > h.items[top].score {
				top = r
			}
			if top == i {
				break
			}
			h.items[i], h.items[top] = h.items[top], h.items[i]
			i = top
		}
	}
}

// neverSatisfiable reports, from the book's total (not only free) healthy
// cards within the job's filter and price, whether the mesh could never
// place the job as it stands, and says what is missing. A nil book knows
// nothing and never fails a job.
func (c *coordinator) neverSatisfiable(j *job) string {
	book := c.n.cfg.Book
	if book == nil {
		return ""
	}
	if cv, ok := book.(CompletenessView); ok && !cv.Complete() {
		return "" // the book may not have heard every supplier yet
	}
	preemptible := j.spec.KindOrDefault() == KindPreemptible
	need := j.initialNeed()
	perNode := map[string]int{}
	// Under the one-model rule a node gives the any layout only the cards
	// of one model: sure adds up each node's largest model (each node's
	// cards when the job mixes models).
	largest := map[string]int{}
	total, sure := 0, 0
	for _, l := range c.modelsFor(j, nil) {
		offers := l.offers
		for i := range offers {
			o := &offers[i]
			price := o.PriceCNY
			if preemptible {
				price = o.PreemptiblePriceCNY
			}
			if price > j.spec.MaxPriceCNY || o.Total <= 0 {
				continue
			}
			total += o.Total
			key := o.Node
			if !j.spec.MixedModels {
				key += "\x00" + o.Model // a share's cards are of one model
			}
			perNode[key] += o.Total
			if v := perNode[key]; v > largest[o.Node] {
				sure += v - largest[o.Node]
				largest[o.Node] = v
			}
			if need.Cards > 0 && sure >= need.Cards {
				return ""
			}
		}
	}
	what := describeFilter(&j.spec)
	if need.Cards > 0 && sure < total {
		return fmt.Sprintf("needs %s%s, the mesh has %d of one model per node (%d in all; a share's cards are of one model unless the job allows mixed models)", text.Count(need.Cards, "card"), what, sure, total)
	}
	if need.Cards > 0 {
		return fmt.Sprintf("needs %s%s, the mesh has %d", text.Count(need.Cards, "card"), what, total)
	}
	nodes := map[string]bool{}
	for key, n := range perNode {
		if n >= need.PerSlot {
			node, _, _ := strings.Cut(key, "\x00")
			nodes[node] = true
		}
	}
	if len(nodes) >= need.Slots {
		return ""
	}
	oneModel := ""
	if !j.spec.MixedModels && !(len(j.spec.Models) == 1 && !strings.ContainsAny(j.spec.Models[0], "*?[")) {
		oneModel = " of one model"
	}
	return fmt.Sprintf("needs %s with %s%s%s each, the mesh has %d", text.Count(need.Slots, "node"), text.Count(need.PerSlot, "card"), oneModel, what, len(nodes))
}

// describeFilter says in words which cards a spec takes: " of h100-*,
// a100-80g with at least 80 GiB at most 20.00 CNY per card-hour".
func describeFilter(s *JobSpec) string {
	var parts []string
	if len(s.Models) > 0 {
		parts = append(parts, "of "+strings.Join(s.Models, ", "))
	}
	if len(s.Vendors) > 0 {
		parts = append(parts, "by "+joinVendors(s.Vendors))
	}
	if iv := imageVendors(s.Images); len(iv) > 0 {
		parts = append(parts, "of a vendor its images serve ("+joinVendors(iv)+")")
	}
	if s.MinMemoryMiB > 0 {
		parts = append(parts, fmt.Sprintf("with at least %d MiB", s.MinMemoryMiB))
	}
	if s.MinComputeUnits > 0 {
		parts = append(parts, fmt.Sprintf("with at least %.2f compute units", s.MinComputeUnits))
	}
	parts = append(parts, fmt.Sprintf("at most %.2f CNY per card-hour", s.MaxPriceCNY))
	return " " + strings.Join(parts, " ")
}
