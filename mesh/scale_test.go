package mesh

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

// scaleEnabled reports whether long runs are asked for: GPUMESH_SCALE=1.
func scaleEnabled() bool { return os.Getenv("GPUMESH_SCALE") == "1" }

// simMesh is a simulated mesh of n nodes, joined and converged.
type simMesh struct {
	sim      *SimNetwork
	nodes    []*Mesh
	converge time.Duration // from the first join to every node seeing all alive
}

// sampleMeta is a realistic node summary: LAN and public addresses come from
// the host; this adds the rest.
func sampleMeta(i int) Meta {
	return Meta{Region: []string{"cn-east", "cn-north", "cn-south"}[i%3], Cards: 8, FreeCards: i % 9 % 8, Models: []string{"rtx4090-48g"}}
}

// buildSimMesh starts n nodes, then joins each to one of the first three
// (the bootstrap peers every node is given), joinParallelism at a time, and waits
// until every node sees n alive members.
func buildSimMesh(tb testing.TB, n int, profile Profile, timeout time.Duration) *simMesh {
	tb.Helper()
	sim := NewSimNetwork(SimOptions{Logger: scaleLogger})
	tb.Cleanup(func() { sim.Close() })
	nodes := make([]*Mesh, n)
	for i := range nodes {
		m, err := sim.AddNode(Config{Profile: profile, Meta: sampleMeta(i)})
		if err != nil {
			tb.Fatalf("node %d: %v", i, err)
		}
		nodes[i] = m
	}
	seeds := min(3, n)
	start := time.Now()
	// The seeds first, then everyone else at once (bounded parallelism).
	for i := 1; i < seeds; i++ {
		if _, err := nodes[i].Join(context.Background(), nodes[0].Addrs()...); err != nil {
			tb.Fatalf("seed %d join: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, joinParallelism)
	errs := make(chan error, n)
	for i := seeds; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(m *Mesh) {
			defer wg.Done()
			defer func() { <-sem }()
			// Like a node given its bootstrap peers: one picked at random
			// first, the others next, the whole tried again with backoff
			// while the seeds are too busy to answer.
			var addrs []ma.Multiaddr
			first := rand.IntN(seeds)
			for k := range seeds {
				addrs = append(addrs, nodes[(first+k)%seeds].Addrs()...)
			}
			var err error
			for attempt, backoff := 0, time.Second; attempt < 4; attempt, backoff = attempt+1, 2*backoff {
				if _, err = m.Join(context.Background(), addrs...); err == nil {
					return
				}
				time.Sleep(backoff) // backoff between join attempts, as the node does
			}
			errs <- err
		}(nodes[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("join: %v", err)
	}
	joined := time.Since(start)
	lastLog := time.Now()
	deadline := time.Now().Add(timeout)
	for {
		done := true
		for _, m := range nodes {
			if m.NumAlive() != n {
				done = false
				break
			}
		}
		if done {
			break
		}
		if time.Since(lastLog) > 5*time.Second && testing.Verbose() {
			lastLog = time.Now()
			low, sum := n, 0
			for _, m := range nodes {
				low = min(low, m.NumAlive())
				sum += m.NumAlive()
			}
			tb.Logf("%v after start (joins took %v): lowest view %d, mean %.1f", time.Since(start).Round(time.Second), joined.Round(time.Millisecond), low, float64(sum)/float64(n))
		}
		if time.Now().After(deadline) {
			low, sum := n, 0
			for _, m := range nodes {
				low = min(low, m.NumAlive())
				sum += m.NumAlive()
			}
			tb.Fatalf("%d nodes not converged after %v: lowest view %d, mean %.1f; traffic %+v", n, timeout, low, float64(sum)/float64(n), totalStats(nodes))
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	return &simMesh{sim: sim, nodes: nodes, converge: time.Since(start)}
}

// heapPerNode measures live heap after a GC, per node.
func heapPerNode(n int) (heapMB float64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / float64(n) / (1 << 20), runtime.NumGoroutine()
}

// A 200-node in-memory mesh converges. The default run (under -race on two
// shared cores) uses 50 nodes; GPUMESH_SCALE=1 runs 200.
//
// It runs memberlist's LAN timing: when hundreds of nodes share two cores,
// a probe's round trip is the process's scheduling delay, and the fast
// profile's 100 ms probe timeout turns a busy moment into false suspicions
// (see BenchmarkMeshConverge for the fast profile on a larger machine).
func TestSimMeshConverges(t *testing.T) {
	n := 50
	if scaleEnabled() {
		n = 200
	}
	sm := buildSimMesh(t, n, LANProfile(), 3*time.Minute)
	heap, gr := heapPerNode(n)
	t.Logf("%d nodes converged in %v; heap %.2f MB/node, %d goroutines (%.1f/node)", n, sm.converge, heap, gr, float64(gr)/float64(n))
}

// joinParallelism bounds the joins in flight while a simulated mesh forms.
var joinParallelism = 8

// scaleLogger is the logger of scale runs (discard; set for debugging).
var scaleLogger *slog.Logger

// totalStats sums the transport counters of nodes.
func totalStats(nodes []*Mesh) Stats {
	var t Stats
	for _, m := range nodes {
		s := m.Stats()
		t.PacketsSent += s.PacketsSent
		t.PacketsReceived += s.PacketsReceived
		t.BytesSent += s.BytesSent
		t.BytesReceived += s.BytesReceived
		t.StreamBytes += s.StreamBytes
		t.SendDrops += s.SendDrops
		t.ReceiveDrops += s.ReceiveDrops
		t.Malformed += s.Malformed
		t.PacketStreams += s.PacketStreams
		t.Streams += s.Streams
		t.DialFailures += s.DialFailures
	}
	return t
}
