package market_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// qualityInstance builds a random mesh of nodes suppliers (one model each,
// 1–8 cards, prices ±30% around the list, MTBF 1h–30d) and a random job,
// places the job through the harness and returns the placement's total
// cost (the sum of its cards' effective prices, as clearing minimizes) and
// the optimum over every free card of the mesh by the reference solver.
func qualityInstance(tb testing.TB, nodes int, seed uint64) (got, opt float64, spec market.JobSpec) {
	r := rand.New(rand.NewPCG(seed, 99))
	cat := device.DefaultCatalog()
	h := markettest.New(markettest.Options{Seed: seed})
	var lots []market.Lot
	mtbf := map[string]time.Duration{}
	cu := map[string]float64{}
	for i := 0; i < nodes; i++ {
		id := fmt.Sprintf("q%03d", i)
		model := simModels[r.IntN(len(simModels))]
		m, _ := cat.Lookup(model)
		cfg := market.DefaultConfig(id)
		cfg.Catalog = cat
		n := 1 + r.IntN(8)
		cards, err := markettest.CatalogCards(cat, id, fmt.Sprintf("%s:%d", model, n))
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Cards = cards
		price := math.Round(m.DefaultPriceCNY()*(0.7+0.6*r.Float64())*100) / 100
		cfg.Prices.PerModel = map[string]float64{model: price}
		mtbf[id] = time.Duration(1+r.IntN(720)) * time.Hour
		cfg.Availability.MTBF = market.Duration(mtbf[id])
		cu[id] = m.ComputeUnits
		h.MustAdd(cfg)
		lot := market.Lot{Node: id, Availability: cfg.Availability}
		for _, c := range cards {
			lot.Cards = append(lot.Cards, market.BidCard{ID: c.ID, Model: model, Vendor: c.Vendor, MemoryMiB: c.MemoryMiB, ComputeUnits: c.ComputeUnits, PriceCNY: price})
		}
		lots = append(lots, lot)
	}
	spec = market.JobSpec{ID: fmt.Sprintf("q%d", seed), MaxPriceCNY: 40, Command: []string{"train"},
		ExpectedDuration: market.Duration(time.Duration(1+r.IntN(48)) * time.Hour)}
	need := market.Need{}
	switch r.IntN(3) {
	case 0:
		spec.Cards = 1 + r.IntN(64)
		need.Cards = spec.Cards
	case 1:
		k := []int{2, 4, 8}[r.IntN(3)]
		spec.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: k}
		spec.Cards = k * (1 + r.IntN(6))
		need.Slots, need.PerSlot = spec.Cards/k, k
	case 2:
		spec.Layout.Mode = market.LayoutOneNode
		spec.Cards = 1 + r.IntN(8)
		need.Slots, need.PerSlot = 1, spec.Cards
	}
	cfg := market.DefaultConfig("x")
	opt, ok := market.ReferenceCost(lots, need, market.FilterOf(&spec), spec.ExpectedDuration.Std(), cfg.UnknownMTBF, cfg.UnknownComputeUnits)
	if !ok {
		return 0, 0, spec // the mesh cannot hold it: not an instance
	}
	if _, err := h.Submit(spec); err != nil {
		tb.Fatal(err)
	}
	if !h.RunUntil(func() bool { r, _ := h.Job(spec.ID); return r.State == market.JobRunning }, 10*time.Second) {
		r, _ := h.Job(spec.ID)
		tb.Fatalf("seed %d: job %+v not running: %s %s", seed, spec, r.State, r.Reason)
	}
	rec, _ := h.Job(spec.ID)
	for _, p := range rec.Placements {
		if p.State != market.PlacementRunning {
			continue
		}
		surv := math.Exp(-spec.ExpectedDuration.Std().Hours() / mtbf[p.Node].Hours())
		got += float64(len(p.Cards)) * p.BidCNY / (surv * cu[p.Node])
	}
	return got, opt, spec
}

// TestPlacementQuality places random jobs on random 200-node meshes and
// checks that the auction's placement costs at most 1% more than the
// optimum over the whole mesh (the coordinator asks only a few candidates).
func TestPlacementQuality(t *testing.T) {
	n := 30
	if testing.Short() {
		n = 8
	}
	worst := 0.0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		got, opt, spec := qualityInstance(t, 200, seed)
		if opt == 0 {
			continue
		}
		gap := got/opt - 1
		worst = math.Max(worst, gap)
		if gap > 0.01 {
			t.Errorf("seed %d: %d cards %s: cost %.4f, optimum %.4f (+%.2f%%)", seed, spec.Cards, spec.LayoutMode(), got, opt, 100*gap)
		}
	}
	t.Logf("worst gap over %d instances: %.3f%%", n, 100*worst)
}

// BenchmarkPlacementQuality reports the mean and worst cost gap to the
// optimum over random 200-node instances (target: within 1%).
func BenchmarkPlacementQuality(b *testing.B) {
	sum, worst, count := 0.0, 0.0, 0
	for i := 0; i < b.N; i++ {
		for seed := uint64(1); seed <= 100; seed++ {
			got, opt, _ := qualityInstance(b, 200, seed+uint64(i)*1000)
			if opt == 0 {
				continue
			}
			gap := got/opt - 1
			sum += gap
			worst = math.Max(worst, gap)
			count++
		}
	}
	b.ReportMetric(100*sum/float64(count), "mean-gap-%")
	b.ReportMetric(100*worst, "worst-gap-%")
	b.ReportMetric(float64(count)/float64(b.N), "instances")
}
