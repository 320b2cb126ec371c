package mesh

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Benchmarks of the in-memory mesh. They print their figures with
// b.ReportMetric, each profile next to memberlist's LAN profile as the
// baseline measured in the same run. Run one iteration each:
//
//	go test -run '^$' -bench 'Mesh' -benchtime 1x ./mesh/
//
// GPUMESH_BENCH_NODES sets the size of the convergence mesh (default 1000)
// and GPUMESH_BENCH_KILLS the crashes timed per profile (default 10). The
// figures depend on the cores available: every simulated node shares them,
// and a probe's round trip includes the process's scheduling delay.

func benchEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchProfiles are the profile measured and its baseline.
func benchProfiles() []Profile { return []Profile{FastProfile(), LANProfile()} }

// fastMult3 is FastProfile with the suspicion multiplier it had before
// (3: one confirmation expected), the baseline crash detection compares
// with.
func fastMult3() Profile {
	p := FastProfile()
	p.Name, p.SuspicionMult = "fast-mult3", 3
	return p
}

// BenchmarkMeshConverge builds a mesh of GPUMESH_BENCH_NODES nodes, every
// one joining one of three bootstrap peers at once (up to 4 × GOMAXPROCS
// joins in flight), and reports:
//
//   - s/converge: from the first join until every node sees every other
//     alive (goal < 10 s at 1000 nodes);
//   - idle-B/s/node: membership bytes each node sends per second once
//     converged: probe packets measured over 20 s, plus the state exchanges
//     at the profile's (size-stretched) interval, their size measured;
//   - heap-MB/node and stack-MB/node after convergence, goroutines/node.
func BenchmarkMeshConverge(b *testing.B) {
	n := benchEnvInt("GPUMESH_BENCH_NODES", 1000)
	for _, p := range benchProfiles() {
		b.Run(fmt.Sprintf("%s/nodes=%d", p.Name, n), func(b *testing.B) {
			joinParallelism = 4 * runtime.GOMAXPROCS(0)
			defer func() { joinParallelism = 8 }()
			for b.Loop() {
				sm := buildSimMesh(b, n, p, 2*time.Minute)
				b.ReportMetric(sm.converge.Seconds(), "s/converge")

				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapAlloc)/float64(n)/(1<<20), "heap-MB/node")
				b.ReportMetric(float64(ms.StackInuse)/float64(n)/(1<<20), "stack-MB/node")
				b.ReportMetric(float64(runtime.NumGoroutine())/float64(n), "goroutines/node")

				idle := measureIdle(sm.nodes, p, 20*time.Second)
				b.ReportMetric(idle.packetRate, "probe-B/s/node")
				b.ReportMetric(idle.exchangeBytes, "B/exchange")
				b.ReportMetric(idle.total, "idle-B/s/node")
				sm.sim.Close()
			}
		})
	}
}

// idleTraffic is what a converged, quiet mesh sends per node.
type idleTraffic struct {
	packetRate    float64 // packet bytes sent per second per node
	exchangeBytes float64 // bytes of one state exchange, both ways
	total         float64 // packetRate plus exchanges at their interval
}

// measureIdle samples the packet traffic of nodes over window and sizes one
// state exchange. Each node starts one exchange per stretched push/pull
// interval and answers one on average: it sends about one exchange's bytes
// per interval.
func measureIdle(nodes []*Mesh, p Profile, window time.Duration) idleTraffic {
	n := len(nodes)
	before := totalStats(nodes)
	start := time.Now()
	time.Sleep(window) // the measurement window: traffic accrues in counters
	after := totalStats(nodes)
	secs := time.Since(start).Seconds()
	var t idleTraffic
	t.packetRate = float64(after.BytesSent-before.BytesSent) / secs / float64(n)
	// A state exchange of n members: have one node push/pull with another
	// and count the stream bytes (both ends count both directions).
	s0 := nodes[0].Stats().StreamBytes + nodes[1].Stats().StreamBytes
	if _, err := nodes[0].ml.Join([]string{nodes[1].ID().String() + "/" + swimHostPort(nodes[1].ID())}); err == nil {
		s1 := nodes[0].Stats().StreamBytes + nodes[1].Stats().StreamBytes
		t.exchangeBytes = float64(s1-s0) / 2
	}
	interval := pushPullInterval(p.PushPullInterval, n)
	if interval > 0 {
		t.total = t.packetRate + t.exchangeBytes/interval.Seconds()
	} else {
		t.total = t.packetRate
	}
	return t
}

// pushPullInterval is memberlist's stretch of the state exchange interval
// with the member count: ×(1 + ⌈log2(n) − log2(32)⌉) above 32 members.
func pushPullInterval(base time.Duration, n int) time.Duration {
	if n <= 32 {
		return base
	}
	mult := 1
	for size := 32; size < n; size *= 2 {
		mult++
	}
	return time.Duration(mult) * base
}

// BenchmarkCrashDetection kills nodes of a converged 100-node mesh one at a
// time (GPUMESH_BENCH_KILLS of them) and reports the median and 90th
// percentile of the time until every survivor sees the killed node dead
// (the fast profile's goal was a median under 2 s; with its suspicion
// multiplier of 5 it is about 2.8 s, see FastProfile), with memberlist's
// LAN profile and the fast profile's earlier multiplier as baselines.
func BenchmarkCrashDetection(b *testing.B) {
	const n = 100
	kills := benchEnvInt("GPUMESH_BENCH_KILLS", 10)
	for _, p := range append(benchProfiles(), fastMult3()) {
		b.Run(fmt.Sprintf("%s/nodes=%d", p.Name, n), func(b *testing.B) {
			for b.Loop() {
				sm := buildSimMesh(b, n, p, 5*time.Minute)
				alive := slices.Clone(sm.nodes)
				var times []time.Duration
				for range kills {
					i := rand.IntN(len(alive))
					victim := alive[i]
					alive = slices.Delete(alive, i, i+1)
					d, err := timeToDead(sm.sim, victim, alive, time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					times = append(times, d)
				}
				slices.Sort(times)
				b.ReportMetric(times[len(times)/2].Seconds(), "s/detect-median")
				b.ReportMetric(times[len(times)*9/10].Seconds(), "s/detect-p90")
				b.Logf("%s: detection times %v", p.Name, times)
				sm.sim.Close()
			}
		})
	}
}

// timeToDead crashes victim and returns the time until every node of
// survivors sees it dead.
func timeToDead(sim *SimNetwork, victim *Mesh, survivors []*Mesh, timeout time.Duration) (time.Duration, error) {
	id := victim.ID()
	start := time.Now()
	if err := sim.Crash(id); err != nil {
		return 0, err
	}
	pending := slices.Clone(survivors)
	for len(pending) > 0 {
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("crash of %s not seen dead by %d nodes after %v", id, len(pending), timeout)
		}
		pending = slices.DeleteFunc(pending, func(m *Mesh) bool { return stateOf(m, id) == StateDead })
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	return time.Since(start), nil
}
