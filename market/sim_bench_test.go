package market_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// simModels are the supply of the simulated meshes: a spread of catalogued
// models so that jobs compete on price and compute.
var simModels = []string{"rtx4090-24g", "rtx4090-48g", "a100-80g", "a100-40g", "h100-sxm-80g", "h200-141g", "l40s-48g", "ascend-910b-64g"}

// buildMesh adds n suppliers of cardsPer cards each (one model per node,
// random MTBF and a price within ±20% of the model's default) to h.
func buildMesh(h *markettest.Harness, n, cardsPer int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	cat := device.DefaultCatalog()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("s%04d", i)
		cfg := market.DefaultConfig(id)
		cfg.Catalog = cat
		model := simModels[r.IntN(len(simModels))]
		cards, err := markettest.CatalogCards(cat, id, fmt.Sprintf("%s:%d", model, cardsPer))
		if err != nil {
			panic(err)
		}
		cfg.Cards = cards
		cfg.Availability.MTBF = market.Duration(time.Duration(1+r.IntN(720)) * time.Hour)
		base := map[string]float64{"rtx4090-24g": 1.98, "rtx4090-48g": 3.02, "a100-80g": 11.4, "a100-40g": 4.1, "h100-sxm-80g": 22.5, "h200-141g": 35, "l40s-48g": 13.22, "ascend-910b-64g": 10.23}[model]
		cfg.Prices.PerModel = map[string]float64{model: float64(int(base*(0.8+0.4*r.Float64())*100)) / 100}
		h.MustAdd(cfg)
	}
}

// simulate places jobs single-card jobs on a mesh of suppliers, submitted
// to their HRW coordinators evenly over the arrival window (0: all at
// once), and returns the wall time until every job ran, the virtual time
// each job took from submit to running, and the messages sent.
func simulate(tb testing.TB, suppliers, cardsPer, jobs int, arrival time.Duration, noBook bool) (wall, cpu time.Duration, virtual []time.Duration, msgs int) {
	h := markettest.New(markettest.Options{Seed: 1, TickEvery: 20 * time.Millisecond, NoBook: noBook})
	buildMesh(h, suppliers, cardsPer, 2)
	submitted := map[string]time.Time{}
	h.OnReady = func(p *markettest.Peer, rd market.Ready) {
		for _, n := range rd.Notifications {
			if n.To == market.JobRunning {
				if at, ok := submitted[n.Job]; ok {
					virtual = append(virtual, h.Now.Sub(at))
					delete(submitted, n.Job)
				}
			}
		}
	}
	runtime.GC() // the mesh's setup garbage is not the simulation's
	start, cpu0 := time.Now(), cpuTime()
	t0 := h.Now
	for i := 0; i < jobs; i++ {
		if at := t0.Add(arrival * time.Duration(i) / time.Duration(jobs)); at.After(h.Now) {
			h.RunFor(at.Sub(h.Now))
		}
		spec := market.JobSpec{ID: fmt.Sprintf("job%05d", i), Cards: 1, MaxPriceCNY: 40, Command: []string{"run"}}
		submitted[spec.ID] = h.Now
		if _, err := h.Submit(spec); err != nil {
			tb.Fatal(err)
		}
	}
	if !h.RunUntil(func() bool { return len(submitted) == 0 }, time.Minute) {
		tb.Fatalf("%d of %d jobs not running after a minute of virtual time", len(submitted), jobs)
	}
	wall, cpu = time.Since(start), cpuTime()-cpu0
	if len(h.Violations) > 0 {
		tb.Fatalf("violations: %v", h.Violations[0])
	}
	return wall, cpu, virtual, h.Sent
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkSimulation places 1000 single-card jobs on 1000 suppliers (4
// cards each) through the harness: suppliers and coordinators exchanging
// messages in one process. It reports jobs placed per wall-clock second
// (goal: over 10,000), the virtual submit→running latency, and messages per
// job, and jobs per CPU-second of the whole process (GC included), which a
// busy shared machine distorts less than wall time. The jobs arrive over
// 100ms of virtual time (10,000 jobs/s), or all at once (a burst: every
// coordinator wants the same cheapest cards at the same instant). The
// broadcast baseline (no book: every request to every node, the naive
// design) runs 100 jobs on the same mesh for comparison.
//
// What is timed is the protocol: the harness runs no invariant audit here
// (no AfterStep hook; only its check that a started execution's cards are
// free, about 1% of the CPU). In a profile the market core (Step, Ready,
// Advance, the book) takes about 70% of the main goroutine, routing each
// submit to its HRW coordinator 9%, and the harness's queue and records
// the rest; the GC adds about a quarter on top.
func BenchmarkSimulation(b *testing.B) {
	for _, bc := range []struct {
		name    string
		jobs    int
		arrival time.Duration
		noBook  bool
	}{
		{"book/1000jobs-over-100ms", 1000, 100 * time.Millisecond, false},
		{"book/1000jobs-burst", 1000, 0, false},
		{"broadcast/100jobs-over-10ms", 100, 10 * time.Millisecond, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var wall, cpu time.Duration
			var virtual []time.Duration
			msgs := 0
			for i := 0; i < b.N; i++ {
				w, c, v, m := simulate(b, 1000, 4, bc.jobs, bc.arrival, bc.noBook)
				wall += w
				cpu += c
				virtual = append(virtual, v...)
				msgs += m
			}
			b.ReportMetric(float64(bc.jobs*b.N)/wall.Seconds(), "jobs/s")
			if cpu > 0 {
				b.ReportMetric(float64(bc.jobs*b.N)/cpu.Seconds(), "jobs/cpu-s")
			}
			b.ReportMetric(float64(percentile(virtual, 0.5).Microseconds())/1000, "virt-p50-ms")
			b.ReportMetric(float64(percentile(virtual, 0.99).Microseconds())/1000, "virt-p99-ms")
			b.ReportMetric(float64(msgs)/float64(bc.jobs*b.N), "msgs/job")
		})
	}
}
