package markettest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Failover in virtual time: a runner crashes (it goes down: no ticks, no
// messages) at a random moment of its renewal cycle, and the share runs
// again on another node. The figures are virtual time, so they do not
// depend on how busy the machine is, and in round trips of the set link
// latency for the part after detection.

// failoverRun is one measured failover.
type failoverRun struct {
	total   time.Duration // crash → the share's process started elsewhere
	replace time.Duration // the coordinator declared it lost → started elsewhere
}

// failover builds a coordinator without cards and ten one-card runners
// with one-way latency lat, runs a one-card job, crashes its runner at a
// random moment (seeded) and measures. With hint, the coordinator is told
// at once that the runner is gone (a dropped connection, as libp2p
// reports it); without, it finds out from the silence of the lease.
func failover(t testing.TB, seed uint64, lat time.Duration, hint bool) failoverRun {
	t.Helper()
	h := New(Options{Seed: seed, Latency: lat})
	h.MustAdd(market.DefaultConfig("coord"))
	for i := range 10 {
		id := fmt.Sprintf("r%02d", i)
		h.MustAddSupplier(id, "a100-80g:1")
	}
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	running := func() (market.Placement, bool) {
		r, _ := h.Job("j1")
		for _, p := range r.Live() {
			if p.State == market.PlacementRunning {
				return p, true
			}
		}
		return market.Placement{}, false
	}
	if !h.RunUntil(func() bool { _, ok := running(); return ok }, 10*time.Second) {
		t.Fatal("the job never ran")
	}
	// Run on for a random part of a few renewal cycles, so the crash falls
	// anywhere in the cycle.
	rng := rand.New(rand.NewPCG(seed, 1))
	h.RunFor(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
	old, _ := running()
	crash := h.Now
	h.SetDown(old.Node, true)
	if hint {
		if err := h.PeerLost("coord", old.Node); err != nil {
			t.Fatal(err)
		}
	}
	var startedAt time.Time
	moved := h.RunUntil(func() bool {
		for _, p := range h.Peers() {
			if p.ID == old.Node {
				continue
			}
			for k, proc := range p.Running {
				if k.Job == "j1" && k.Epoch > old.Epoch {
					startedAt = proc.Started
					return true
				}
			}
		}
		return false
	}, 30*time.Second)
	if !moved {
		t.Fatalf("seed %d: the share did not run again within 30 s of virtual time", seed)
	}
	r, _ := h.Job("j1")
	var lostAt time.Time
	for _, p := range r.Placements {
		if p.Share == old.Share && p.Epoch == old.Epoch {
			lostAt = p.EndedAt
		}
	}
	if lostAt.IsZero() {
		t.Fatalf("seed %d: the lost placement has no end: %+v", seed, r.Placements)
	}
	return failoverRun{total: startedAt.Sub(crash), replace: startedAt.Sub(lostAt)}
}

// TestFailoverInVirtualTime checks the protocol's budget at several link
// latencies: detection takes at most LostAfter (HintGrace with a hint)
// after the last renewal arrived, which is one latency after the crash at
// most, and a tick; placing again takes an auction, a BidRequest and its
// Bid then an Award that starts the process: 3 one-way latencies and a few
// ticks.
func TestFailoverInVirtualTime(t *testing.T) {
	cfg := market.DefaultConfig("x")
	const tick = 10 * time.Millisecond
	for _, lat := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		for _, hint := range []bool{false, true} {
			detect := cfg.LostAfter
			if hint {
				detect = cfg.HintGrace
			}
			var worst failoverRun
			for seed := range uint64(20) {
				r := failover(t, seed, lat, hint)
				worst.total = max(worst.total, r.total)
				worst.replace = max(worst.replace, r.replace)
			}
			t.Logf("latency %v, hint %v: worst of 20: %v after the crash, %v (%.1f round trips) after detection",
				lat, hint, worst.total, worst.replace, float64(worst.replace)/float64(2*lat))
			if limit := 3*lat + 3*tick; worst.replace > limit {
				t.Errorf("latency %v, hint %v: placed again %v after detection, want within %v (3 one-way latencies and 3 ticks)", lat, hint, worst.replace, limit)
			}
			if limit := detect + lat + tick + 3*lat + 3*tick; worst.total > limit {
				t.Errorf("latency %v, hint %v: running again %v after the crash, want within %v", lat, hint, worst.total, limit)
			}
		}
	}
}

// BenchmarkFailoverVirtual reports, in virtual time, crash → running again
// (median and worst over b.N seeded crashes) and the part after detection
// in round trips, at a 10 ms one-way latency, with and without the
// disconnect hint.
//
//	go test ./market/markettest/ -run '^$' -bench FailoverVirtual -benchtime 100x
func BenchmarkFailoverVirtual(b *testing.B) {
	const lat = 10 * time.Millisecond
	for _, hint := range []bool{false, true} {
		b.Run(fmt.Sprintf("hint=%v", hint), func(b *testing.B) {
			var total, rtts []float64
			for i := range b.N {
				r := failover(b, uint64(i), lat, hint)
				total = append(total, float64(r.total.Microseconds())/1000)
				rtts = append(rtts, float64(r.replace)/float64(2*lat))
			}
			slices.Sort(total)
			slices.Sort(rtts)
			b.ReportMetric(total[len(total)/2], "virtual-ms-p50")
			b.ReportMetric(total[len(total)-1], "virtual-ms-max")
			b.ReportMetric(rtts[len(rtts)/2], "round-trips-p50")
			b.ReportMetric(rtts[len(rtts)-1], "round-trips-max")
		})
	}
}
