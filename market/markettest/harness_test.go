package markettest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// mesh builds a coordinator with no cards and two suppliers and submits a
// one-card job, tracing every delivery.
func mesh(t *testing.T, opts Options) (*Harness, *[]string) {
	t.Helper()
	h := New(opts)
	var trace []string
	h.Trace = func(l string) { trace = append(trace, l) }
	h.MustAdd(market.DefaultConfig("coord"))
	for _, id := range []string{"a", "b"} {
		h.MustAddSupplier(id, "a100-80g:1")
	}
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	return h, &trace
}

// busyMesh is mesh with many jobs on one coordinator and many attempts on
// each supplier: what a tick sends for them must come in one order.
func busyMesh(t *testing.T, opts Options) (*Harness, *[]string) {
	t.Helper()
	h, trace := mesh(t, opts)
	for _, id := range []string{"c", "d"} {
		h.MustAddSupplier(id, "a100-80g:6")
	}
	for i := 2; i <= 12; i++ {
		if err := h.SubmitAt("coord", market.JobSpec{ID: fmt.Sprintf("j%d", i), Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	return h, trace
}

func TestHarnessIsDeterministic(t *testing.T) {
	opts := Options{Seed: 7, Jitter: 5 * time.Millisecond, Loss: 0.2, Duplicate: 0.2}
	for _, build := range []func(*testing.T, Options) (*Harness, *[]string){mesh, busyMesh} {
		for run := 0; run < 3; run++ { // map order differs from run to run
			h1, tr1 := build(t, opts)
			h1.RunFor(3 * time.Second)
			h2, tr2 := build(t, opts)
			h2.RunFor(3 * time.Second)
			if !slices.Equal(*tr1, *tr2) || len(*tr1) == 0 {
				i := 0
				for i < min(len(*tr1), len(*tr2)) && (*tr1)[i] == (*tr2)[i] {
					i++
				}
				t.Fatalf("two runs with one seed differ (%d and %d lines), first at line %d", len(*tr1), len(*tr2), i+1)
			}
		}
	}
	h1, tr1 := mesh(t, opts)
	h1.RunFor(3 * time.Second)
	opts.Seed = 8
	h3, tr3 := mesh(t, opts)
	h3.RunFor(3 * time.Second)
	if slices.Equal(*tr1, *tr3) {
		t.Fatal("another seed gave the very same run")
	}
}

func TestHarnessFaults(t *testing.T) {
	// Every message lost: nothing is ever delivered, the job cannot run.
	h, _ := mesh(t, Options{Loss: 1})
	h.RunFor(time.Second)
	if h.Delivered != 0 || h.Sent == 0 {
		t.Fatalf("with loss 1: sent %d, delivered %d", h.Sent, h.Delivered)
	}
	if r, _ := h.Job("j1"); r.State == market.JobRunning {
		t.Fatal("a job ran over a network that loses everything")
	}

	// A drop rule for one award: the coordinator falls back on its spare.
	h, trace := mesh(t, Options{})
	h.AddRule(&Rule{Match: func(m market.Message) bool { return m.Payload.Type() == "award" }, Drop: true, Count: 1})
	if !h.RunUntil(func() bool { r, _ := h.Job("j1"); return r.State == market.JobRunning }, 2*time.Second) {
		t.Fatal("the job did not run after one lost award")
	}
	drops := 0
	for _, l := range *trace {
		if strings.HasPrefix(l, "drop ") {
			drops++
		}
	}
	if drops != 1 {
		t.Fatalf("%d drops traced, want 1:\n%s", drops, strings.Join(*trace, "\n"))
	}

	// A cut node ticks but hears nothing: its runner fences itself.
	h, _ = mesh(t, Options{})
	h.RunFor(10 * time.Millisecond)
	r, _ := h.Job("j1")
	runner := r.Placements[0].Node
	h.SetCut(runner, true)
	h.RunFor(market.DefaultConfig("x").FenceAfter + 200*time.Millisecond)
	p := h.Peer(runner)
	if len(p.Running) != 0 || len(p.Stops) != 1 || p.Stops[0].Cause != market.CauseFenced {
		t.Fatalf("cut runner: %d still running, stops %+v", len(p.Running), p.Stops)
	}
}
