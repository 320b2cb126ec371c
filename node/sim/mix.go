package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// Tier is a kind of supplier: how many cards it has, which, at what price,
// and how reliably it stays up.
type Tier string

// The tiers of the product brief.
const (
	// TierIDC is a data-center server: 8 cards, list price, rarely down.
	TierIDC Tier = "idc"
	// TierCafe is an internet café PC: 1–2 consumer cards, cheaper, taken
	// back by gamers every few hours.
	TierCafe Tier = "cafe"
	// TierHome is a home PC: 1 card, cheapest, switched off often.
	TierHome Tier = "home"
)

// ModelWeight is a card model and its share within a tier.
type ModelWeight struct {
	Model  string
	Weight float64
}

// TierProfile describes the suppliers of one tier.
type TierProfile struct {
	Tier Tier
	// Share is the fraction of the mesh's nodes in this tier.
	Share float64
	// MinCards and MaxCards bound the cards of one node (all of one model).
	MinCards, MaxCards int
	// Models are the tier's card models and their shares.
	Models []ModelWeight
	// PriceFactor multiplies the catalog's price per card-hour
	// (device.Model.DefaultPriceCNY).
	PriceFactor float64
	// Churn is how the tier's nodes come and go, in the life of a real
	// supplier; simulations divide it by their time scale. A zero MTBF
	// never leaves.
	Churn workload.Churn
	// Coordinates says whether the tier's nodes coordinate jobs. Nodes
	// that come and go do not: job records stay on steady machines.
	Coordinates bool
}

// DefaultMix is the supply of the product brief: half the nodes are IDC
// servers of 8 cards (H100, H200, A100, A800, H20, L40S, Moore Threads
// S4000, Hygon BW1000, Kunlunxin P800), a quarter café PCs with one or two
// RTX 4090 (24G or 48G) or 5090, a quarter home PCs with one. Prices: the
// catalog's, ×0.8 in cafés, ×0.65 at home. Churn: IDC servers stay up for
// LANL's median of 11.7 days and are repaired in 58 min; café PCs for 4 h
// (4–7 up-sessions a day, as AWS spot V100s in "Can't Be Late", NSDI'24)
// with 30 min away; home PCs for 1 h with 10 min away (Overnet peers,
// IPTPS'03, were mostly off). Sources: shared/data/traces/README.md.
//
// With 300 nodes the IDC cards of at least 80 GiB (TrainingClass) number
// over 1000.
func DefaultMix() []TierProfile {
	return []TierProfile{
		{Tier: TierIDC, Share: 0.5, MinCards: 8, MaxCards: 8, PriceFactor: 1,
			Models: []ModelWeight{
				{"h100-sxm-80g", 24}, {"h200-141g", 12}, {"a100-80g", 18}, {"a800-80g", 14}, {"h20-96g", 14},
				{"kunlun-p800-96g", 4}, {"l40s-48g", 6}, {"mtt-s4000-48g", 4}, {"hygon-bw1000-64g", 4},
			},
			Churn:       workload.Churn{MTBF: time.Duration(11.7 * 24 * float64(time.Hour)), MTTR: 58 * time.Minute},
			Coordinates: true},
		{Tier: TierCafe, Share: 0.25, MinCards: 1, MaxCards: 2, PriceFactor: 0.8,
			Models: []ModelWeight{{"rtx4090-24g", 40}, {"rtx4090-48g", 25}, {"rtx5090-32g", 35}},
			Churn:  workload.Churn{MTBF: 4 * time.Hour, MTTR: 30 * time.Minute}},
		{Tier: TierHome, Share: 0.25, MinCards: 1, MaxCards: 1, PriceFactor: 0.65,
			Models: []ModelWeight{{"rtx4090-24g", 60}, {"rtx5090-32g", 25}, {"rtx4090-48g", 15}},
			Churn:  workload.Churn{MTBF: time.Hour, MTTR: 10 * time.Minute}},
	}
}

// TrainingClass is the filter of the demo's training jobs: cards of at
// least 80 GiB.
var TrainingClass = struct{ MinMemoryMiB uint64 }{MinMemoryMiB: 80 << 10}

// Supplier is the plan of one simulated supplier.
type Supplier struct {
	// Name is the supplier's label ("idc-3", "cafe-12"), also its region
	// and the seed of its card IDs.
	Name  string
	Tier  Tier
	Model string // catalog key of its cards
	Cards int
	// PriceCNY is its price per card-hour.
	PriceCNY float64
	// Churn is its tier's churn, in life time.
	Churn       workload.Churn
	Coordinates bool
}

// SimSpec is the supplier's cards as a device.SimSpec (empty for a node
// without cards).
func (s Supplier) SimSpec() device.SimSpec {
	if s.Cards == 0 {
		return nil
	}
	return device.SimSpec{{Key: s.Model, Count: s.Cards}}
}

// TierControl is the tier of a coordinator without cards: a steady machine
// an operator runs to hold job records (gpumesh node on a box with no GPU).
const TierControl Tier = "control"

// WithControllers returns plan with k coordinators without cards in front
// (named ctl-1…ctl-k) and every other supplier not coordinating. A
// coordinator without cards never waits on its own capacity ads, so it
// keeps answering its jobs' runners however busy the suppliers are.
func WithControllers(plan []Supplier, k int) []Supplier {
	out := make([]Supplier, 0, len(plan)+k)
	for i := range k {
		out = append(out, Supplier{Name: fmt.Sprintf("ctl-%d", i+1), Tier: TierControl, Coordinates: true})
	}
	for _, s := range plan {
		s.Coordinates = false
		out = append(out, s)
	}
	return out
}

// PlanSuppliers lays out n suppliers over the tiers of mix: each tier gets
// its share of the nodes (largest remainder), each model its share of the
// tier's nodes likewise, and seed shuffles which node gets what and draws
// the card counts. The same arguments always give the same plan.
func PlanSuppliers(n int, mix []TierProfile, seed uint64) ([]Supplier, error) {
	if n < 1 {
		return nil, fmt.Errorf("sim: %d suppliers: want at least 1", n)
	}
	if err := checkMix(mix); err != nil {
		return nil, err
	}
	cat := device.DefaultCatalog()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	tierShares := make([]float64, len(mix))
	for i, t := range mix {
		tierShares[i] = t.Share
	}
	var out []Supplier
	for ti, count := range apportion(n, tierShares) {
		t := mix[ti]
		weights := make([]float64, len(t.Models))
		for i, m := range t.Models {
			weights[i] = m.Weight
		}
		var models []string
		for mi, k := range apportion(count, weights) {
			for range k {
				models = append(models, t.Models[mi].Model)
			}
		}
		r.Shuffle(len(models), func(i, j int) { models[i], models[j] = models[j], models[i] })
		for i, key := range models {
			m, _ := cat.Lookup(key)
			out = append(out, Supplier{
				Name:        fmt.Sprintf("%s-%d", t.Tier, i+1),
				Tier:        t.Tier,
				Model:       key,
				Cards:       t.MinCards + r.IntN(t.MaxCards-t.MinCards+1),
				PriceCNY:    math.Round(m.DefaultPriceCNY()*t.PriceFactor*100) / 100,
				Churn:       t.Churn,
				Coordinates: t.Coordinates,
			})
		}
	}
	// Coordinators first (the first node is the mesh's bootstrap peer and
	// gateway: a steady one), the rest in an order drawn from the seed.
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	slices.SortStableFunc(out, func(a, b Supplier) int {
		switch {
		case a.Coordinates && !b.Coordinates:
			return -1
		case !a.Coordinates && b.Coordinates:
			return 1
		}
		return 0
	})
	if len(out) > 0 && !out[0].Coordinates {
		return nil, fmt.Errorf("sim: a mesh of %d nodes with this mix has no coordinator: raise the share of a tier that coordinates", n)
	}
	return out, nil
}

func checkMix(mix []TierProfile) error {
	if len(mix) == 0 {
		return fmt.Errorf("sim: empty supplier mix")
	}
	cat := device.DefaultCatalog()
	for _, t := range mix {
		if !(t.Share > 0) || t.MinCards < 1 || t.MaxCards < t.MinCards || t.MaxCards > market.MaxCardsPerNode || len(t.Models) == 0 || !(t.PriceFactor > 0) {
			return fmt.Errorf("sim: tier %s: want a positive share and price factor, 1 ≤ min cards ≤ max cards ≤ %d, and models", t.Tier, market.MaxCardsPerNode)
		}
		for _, m := range t.Models {
			if _, ok := cat.Lookup(m.Model); !ok || !(m.Weight > 0) {
				return fmt.Errorf("sim: tier %s: model %q: want a catalog key with a positive weight", t.Tier, m.Model)
			}
		}
	}
	return nil
}

// apportion splits n into parts proportional to weights by the largest
// remainder method: the parts sum to n and each is within 1 of its exact
// share.
func apportion(n int, weights []float64) []int {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	out := make([]int, len(weights))
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	left := n
	for i, w := range weights {
		exact := float64(n) * w / total
		out[i] = int(exact)
		left -= out[i]
		rems = append(rems, rem{i, exact - float64(out[i])})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; k < left; k++ {
		out[rems[k%len(rems)].i]++
	}
	return out
}

// Describe summarizes a plan: nodes and cards per tier, cards per model.
func Describe(plan []Supplier) string {
	nodes := map[Tier]int{}
	cards := map[Tier]int{}
	models := map[string]int{}
	total := 0
	for _, s := range plan {
		nodes[s.Tier]++
		cards[s.Tier] += s.Cards
		models[s.Model] += s.Cards
		total += s.Cards
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s:", text.Count(len(plan), "node"), text.Count(total, "card"))
	for _, t := range []Tier{TierControl, TierIDC, TierCafe, TierHome} {
		if nodes[t] > 0 {
			fmt.Fprintf(&b, " %d %s (%s)", nodes[t], t, text.Count(cards[t], "card"))
		}
	}
	return b.String()
}

// LimitCoordinators keeps the first k coordinating suppliers of plan as
// coordinators and makes the others plain suppliers (a mesh needs a few
// steady coordinators, not every steady node; fewer also means fewer
// connections in a simulation, see Cluster).
func LimitCoordinators(plan []Supplier, k int) []Supplier {
	out := slices.Clone(plan)
	for i := range out {
		if out[i].Coordinates {
			if k > 0 {
				k--
			} else {
				out[i].Coordinates = false
			}
		}
	}
	return out
}

// DefaultCoordinators is how many coordinators a simulated mesh of n
// nodes keeps: a tenth of the nodes, at least 3 and at most 8.
func DefaultCoordinators(n int) int { return min(max(n/10, 3), 8) }
