package mesh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
)

// TestMain fails the run if goroutines outlive the tests (leaktest).
func TestMain(m *testing.M) { leaktest.VerifyMain(m) }

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronization
	}
}

// stateOf returns how m sees id ("" if unknown).
func stateOf(m *Mesh, id peer.ID) State {
	mem, ok := m.Member(id)
	if !ok {
		return 0
	}
	return mem.State
}

// allSee tells whether every node sees every other in state want.
func allSee(nodes []*Mesh, want State) bool {
	for _, a := range nodes {
		for _, b := range nodes {
			if stateOf(a, b.ID()) != want {
				return false
			}
		}
	}
	return true
}

// simCluster starts n simulated nodes and joins each to the first.
func simCluster(t testing.TB, sim *SimNetwork, n int, cfg func(i int) Config) []*Mesh {
	t.Helper()
	nodes := make([]*Mesh, n)
	for i := range nodes {
		c := Config{}
		if cfg != nil {
			c = cfg(i)
		}
		m, err := sim.AddNode(c)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		nodes[i] = m
	}
	ctx := context.Background()
	for i := 1; i < n; i++ {
		if _, err := nodes[i].Join(ctx, nodes[0].Addrs()...); err != nil {
			t.Fatalf("node %d join: %v", i, err)
		}
	}
	return nodes
}

func describe(nodes []*Mesh) string {
	s := ""
	for _, a := range nodes {
		s += fmt.Sprintf("%s:", a.ID().ShortString())
		for _, mem := range a.Members() {
			s += fmt.Sprintf(" %s=%s", mem.ID.ShortString(), mem.State)
		}
		s += "\n"
	}
	return s
}

// testLogger returns a logger whose records are printed only if the test
// fails.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("logs:\n%s", buf.String())
			mu.Unlock()
		}
	})
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: level}))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
