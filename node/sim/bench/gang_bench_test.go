//go:build unix

package bench

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim"
)

// gangSuppliers × gangPerNode cards is the mesh of issue 5's gang target,
// and the job asks for every one of its cards, gangPerNode per node.
const (
	gangSuppliers = 250
	gangPerNode   = 4
)

// gangSpec is the 1000-card gang job: gangPerNode cards on each of
// gangSuppliers nodes.
func gangSpec(id string) market.JobSpec {
	spec := sleepSpec(id, gangSuppliers*gangPerNode)
	spec.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: gangPerNode}
	return spec
}

// BenchmarkGang1000 places issue 5's gang job — 1000 cards, 4 per node, on
// a mesh of 250 suppliers × 4 cards: every card it has — and reports
// submit → every award accepted (the job running at its coordinator):
//
//   - virtual-ms and virtual-RTT: protocol time on the market's virtual
//     harness with 0.5 ms links, which does not depend on this machine;
//
//   - core-ms: the wall time the 250 market cores spend on it here, in one
//     process, their messages delivered in memory;
//
//   - with GPUMESH_BENCH_FULL=1, full-ms and full-cpu-s: real time and
//     process CPU on 250 full nodes (node.Start on mesh.SimNetwork: libp2p,
//     memberlist, gossipsub, the store, the executor) in this process, and
//     idle-cpu-s/s, what that mesh burns doing nothing. Every node shares
//     this machine's CPUs, so on a small machine full-ms measures the
//     machine as much as the protocol: compare full-cpu-s with the cores.
//
//     go test -run '^$' -bench Gang1000 -benchtime 5x ./node/sim/bench/
//     GPUMESH_BENCH_FULL=1 go test -run '^$' -bench Gang1000 -benchtime 3x -timeout 30m ./node/sim/bench/
func BenchmarkGang1000(b *testing.B) {
	b.Run("market-core", func(b *testing.B) {
		v, err := newVirtualMesh(gangSuppliers, gangPerNode, 1, virtualOptions{Latency: 500 * time.Microsecond})
		if err != nil {
			b.Fatal(err)
		}
		var virt, wall []time.Duration
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("gang-%d", i)
			began := time.Now()
			d, _, err := v.place(context.Background(), gangSpec(id), 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			virt, wall = append(virt, d), append(wall, time.Since(began))
			v.cancel(id)
		}
		lv, lw := sim.LatencyOf("", virt), sim.LatencyOf("", wall)
		b.ReportMetric(ms(lv.P50), "virtual-ms")
		b.ReportMetric(v.rtts(lv.P50), "virtual-RTT")
		b.ReportMetric(ms(lw.P50), "core-ms")
	})
	if os.Getenv("GPUMESH_BENCH_FULL") == "" {
		return
	}
	b.Run("full-nodes", func(b *testing.B) {
		nodes := gangSuppliers
		for nodes-sim.DefaultCoordinators(nodes) < gangSuppliers {
			nodes++
		}
		cfg := Config{Nodes: nodes, CardsPerNode: gangPerNode}.withDefaults()
		cfg.Dir = b.TempDir()
		var notes []string
		ctx := context.Background()
		m, err := startFullMesh(ctx, cfg, &notes, func(f func()) { f() })
		if err != nil {
			b.Fatal(err)
		}
		defer m.close()
		for _, n := range notes {
			b.Log(n)
		}
		b.Logf("%d full nodes formed in %v", nodes, m.formTook.Round(time.Millisecond))
		c0, w0 := cpuTime(), time.Now()
		time.Sleep(3 * time.Second) // the idle mesh's CPU over a few seconds
		idle := (cpuTime() - c0).Seconds() / time.Since(w0).Seconds()

		gw := m.c.Gateway()
		var lat, cpu []time.Duration
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("gang-full-%d", i)
			c0 := cpuTime()
			t0, err := m.submit(ctx, gw, gangSpec(id))
			if err != nil {
				b.Fatal(err)
			}
			at, err := m.waitRunning(ctx, id, 2*time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			lat, cpu = append(lat, at.Sub(t0)), append(cpu, cpuTime()-c0)
			b.Logf("placed in %v, %.1f CPU-s", at.Sub(t0).Round(time.Millisecond), (cpuTime() - c0).Seconds())
			if err := m.cancelAll(ctx, []string{id}); err != nil {
				b.Fatal(err)
			}
		}
		l, c := sim.LatencyOf("", lat), sim.LatencyOf("", cpu)
		b.ReportMetric(ms(l.P50), "full-ms")
		b.ReportMetric(c.P50.Seconds(), "full-cpu-s")
		b.ReportMetric(idle, "idle-cpu-s/s")
	})
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
