package market

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// benchLots builds nodes lots of perNode cards over the first models
// catalogued models with known compute, prices spread ±50% around each
// model's default, and varied availability.
func benchLots(nodes, perNode, models int) []Lot {
	cat := device.DefaultCatalog()
	var pool []BidCard
	for _, m := range cat.Models() {
		if len(pool) == models {
			break
		}
		pool = append(pool, BidCard{Model: m.Key, Vendor: m.Vendor, MemoryMiB: m.MemoryGiB * 1024, ComputeUnits: m.ComputeUnits, PriceCNY: m.DefaultPriceCNY()})
	}
	r := rand.New(rand.NewPCG(7, 7))
	lots := make([]Lot, nodes)
	for i := range lots {
		lot := Lot{Node: fmt.Sprintf("node%04d", i), Availability: Availability{MTBF: Duration(time.Duration(1+r.IntN(1000)) * time.Hour)}}
		base := pool[r.IntN(len(pool))]
		for c := 0; c < perNode; c++ {
			card := base
			card.ID = fmt.Sprintf("%s-g%d", lot.Node, c)
			card.PriceCNY = math.Round(base.PriceCNY*(0.5+r.Float64())*100) / 100
			lot.Cards = append(lot.Cards, card)
		}
		lots[i] = lot
	}
	return lots
}

func benchInput(lots []Lot, need Need) clearInput {
	return clearInput{lots: lots, need: need, match: newMatcher(Filter{MaxPriceCNY: 1000}),
		scorer: &scorer{duration: 8 * time.Hour, unknownMTBF: 6 * time.Hour, unknownCU: 0.1}, seed: 42, maxPrice: 1000}
}

// BenchmarkClear clears a 1000-card job against 4000 candidate cards of 20
// models (target: under 5 ms per clear), with the explanation recorded as a
// real round does, and reports the naive reference (dynamic programming
// over nodes) on the same instance for comparison. Only the clears are
// timed (ns/op); the reference runs once per case, with the timer stopped.
func BenchmarkClear(b *testing.B) {
	for _, bc := range []struct {
		name string
		lots []Lot
		need Need
	}{
		{"any/1000of4000", benchLots(1000, 4, 20), Need{Cards: 1000}},
		{"gang8/1000of4000", benchLots(500, 8, 20), Need{Slots: 125, PerSlot: 8}},
	} {
		var ref time.Duration // the reference's time, measured once per case
		b.Run(bc.name, func(b *testing.B) {
			start := time.Now()
			for i := 0; i < b.N; i++ {
				in := benchInput(bc.lots, bc.need)
				in.explain = newExplainer(0)
				if res := clearBids(in); !res.ok {
					b.Fatal(res.short)
				}
			}
			perClear := time.Since(start) / time.Duration(b.N)
			b.StopTimer() // the reference is not what ns/op measures
			if ref == 0 {
				rp := refParams{filter: Filter{MaxPriceCNY: 1000}, duration: 8 * time.Hour, unknownMTBF: 6 * time.Hour, unknownCU: 0.1}
				t0 := time.Now()
				if _, ok := dpOptimum(bc.lots, bc.need, &rp); !ok {
					b.Fatal("reference found no solution")
				}
				ref = time.Since(t0)
			}
			b.StartTimer()
			b.ReportMetric(float64(perClear.Microseconds())/1000, "ms/clear")
			b.ReportMetric(float64(ref.Microseconds())/1000, "ms/reference")
			b.ReportMetric(float64(ref)/float64(perClear), "x-faster")
		})
	}
}
