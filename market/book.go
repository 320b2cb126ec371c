package market

import (
	"cmp"
	"slices"

	"github.com/gpumesh/gpumesh/device"
)

// Availability is what a supplier advertises about how long it stays up.
type Availability struct {
	// MTBF is the supplier's mean time between departures (switch-offs,
	// crashes, café PCs taken back). Clearing weighs a supplier's price by
	// its probability of staying up for the job's expected duration,
	// exp(-duration/MTBF). 0 means unknown: the coordinator assumes
	// Config.UnknownMTBF.
	MTBF Duration `json:"mtbf,omitempty"`
}

// Offer is one line of the Book: what one node offers of one card model.
// Node fills it from the ads it hears; a supplier's own ad is Node.Ad.
type Offer struct {
	Node         string        `json:"node"`
	Region       string        `json:"region,omitempty"`
	Model        string        `json:"model"`
	Vendor       device.Vendor `json:"vendor"`
	MemoryMiB    uint64        `json:"memory_mib"`
	ComputeUnits float64       `json:"compute_units"` // 0 = unknown
	// Free is the number of healthy cards neither reserved nor running.
	Free int `json:"free"`
	// Preemptible is the number of cards running preemptible work and not
	// reserved: an on-demand job may take them.
	Preemptible int `json:"preemptible,omitempty"`
	// Total is the number of healthy cards of this model on the node,
	// whatever they are doing: what the mesh could offer a job that waits.
	Total int `json:"total"`
	// PriceCNY is the asking price per card-hour for on-demand jobs;
	// PreemptiblePriceCNY the (discounted) price for preemptible jobs.
	PriceCNY            float64      `json:"price_cny"`
	PreemptiblePriceCNY float64      `json:"preemptible_price_cny"`
	Availability        Availability `json:"availability"`
	// Simulated says the cards are simulated (`gpumesh node --sim`, marked
	// in the node's signed ad): only jobs that allow simulated cards are
	// offered them.
	Simulated bool `json:"simulated,omitempty"`
	// HeldBack, when not empty, says why the coordinator asks the node for
	// no bid at all: a card it claims is claimed by another peer too
	// (node fills it in from the ads' hardware evidence).
	HeldBack string `json:"held_back,omitempty"`
}

// floorPrice is the lower of the offer's two prices: the sort key of the
// book, and with the compute units a lower bound of any job's score.
func (o *Offer) floorPrice() float64 { return min(o.PriceCNY, o.PreemptiblePriceCNY) }

// Ad is a supplier's advertisement: all its offers, one per model, with a
// sequence number that rises on every change (gossip drops older ones).
type Ad struct {
	Node   string  `json:"node"`
	Seq    uint64  `json:"seq"`
	Offers []Offer `json:"offers"`
}

// BookView is the coordinator's read-only view of the mesh's capacity. It is
// called only from inside Step, from the one goroutine that drives the Node,
// and must not block. *Book implements it; node may adapt its own book.
type BookView interface {
	// Models returns the model keys that have at least one offer.
	Models() []string
	// Offers returns the offers of one model in ascending order of
	// min(PriceCNY, PreemptiblePriceCNY), then by node; every offer of a
	// model has the model's compute units. The caller does not keep or
	// modify the slice.
	Offers(model string) []Offer
}

var _ BookView = (*Book)(nil)

// CompletenessView is implemented by a BookView that knows whether it has
// heard from every live supplier. While Complete reports false, a job the
// book cannot satisfy waits in pending instead of failing fast: a node that
// has just joined has not yet heard the whole mesh. It is called from
// inside Step and must not block. A BookView without it counts as complete.
type CompletenessView interface {
	Complete() bool
}

// Book is an index of offers by model, kept sorted for candidate selection.
// It is not safe for concurrent use: the goroutine that drives the Node owns
// it and changes it between Steps.
type Book struct {
	byNode  map[string][]Offer
	byModel map[string]*modelOffers
	models  []string // sorted; nil when stale
}

type modelOffers struct {
	byNode map[string]Offer
	sorted []Offer        // nil when stale
	index  map[string]int // node → position in sorted
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{byNode: map[string][]Offer{}, byModel: map[string]*modelOffers{}}
}

// Put replaces everything the book holds for node with offers (an Ad's
// offers). Offers whose Node differs from node are ignored. An offer whose
// price is unchanged (the usual case: only free counts move) is updated in
// place without re-sorting its model.
func (b *Book) Put(node string, offers []Offer) {
	old := b.byNode[node]
	same := len(old) == len(offers)
	for i := 0; same && i < len(offers); i++ {
		same = offers[i].Node == node && offers[i].Model == old[i].Model && offers[i].floorPrice() == old[i].floorPrice()
	}
	if same {
		for _, o := range offers {
			mo := b.byModel[o.Model]
			mo.byNode[node] = o
			if i, ok := mo.index[node]; ok && mo.sorted != nil {
				mo.sorted[i] = o
			}
		}
		b.byNode[node] = append(old[:0:0], offers...)
		return
	}
	b.Remove(node)
	var kept []Offer
	for _, o := range offers {
		if o.Node != node {
			continue
		}
		kept = append(kept, o)
		mo := b.byModel[o.Model]
		if mo == nil {
			mo = &modelOffers{byNode: map[string]Offer{}}
			b.byModel[o.Model] = mo
			b.models = nil
		}
		mo.byNode[node] = o
		mo.sorted = nil
	}
	if len(kept) > 0 {
		b.byNode[node] = kept
	}
}

// Remove forgets node's offers.
func (b *Book) Remove(node string) {
	for _, o := range b.byNode[node] {
		mo := b.byModel[o.Model]
		delete(mo.byNode, node)
		mo.sorted = nil
		if len(mo.byNode) == 0 {
			delete(b.byModel, o.Model)
			b.models = nil
		}
	}
	delete(b.byNode, node)
}

// Node returns the offers the book holds for node.
func (b *Book) Node(node string) []Offer { return b.byNode[node] }

// Nodes returns the number of nodes with offers.
func (b *Book) Nodes() int { return len(b.byNode) }

// Models implements BookView.
func (b *Book) Models() []string {
	if b.models == nil {
		b.models = make([]string, 0, len(b.byModel))
		for m := range b.byModel {
			b.models = append(b.models, m)
		}
		slices.Sort(b.models)
	}
	return b.models
}

// Offers implements BookView.
func (b *Book) Offers(model string) []Offer {
	mo := b.byModel[model]
	if mo == nil {
		return nil
	}
	if mo.sorted == nil {
		mo.sorted = make([]Offer, 0, len(mo.byNode))
		for _, o := range mo.byNode {
			mo.sorted = append(mo.sorted, o)
		}
		slices.SortFunc(mo.sorted, func(x, y Offer) int {
			if c := cmp.Compare(x.floorPrice(), y.floorPrice()); c != 0 {
				return c
			}
			return cmp.Compare(x.Node, y.Node)
		})
		mo.index = make(map[string]int, len(mo.sorted))
		for i, o := range mo.sorted {
			mo.index[o.Node] = i
		}
	}
	return mo.sorted
}
