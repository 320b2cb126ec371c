package device

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"
)

func mustSim(t *testing.T, spec, seed string) *Sim {
	t.Helper()
	cat := DefaultCatalog()
	s, err := ParseSimSpec(spec, cat)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := NewSim(s, seed, cat)
	if err != nil {
		t.Fatal(err)
	}
	return sim
}

func TestSimCardsCarryCatalogFigures(t *testing.T) {
	sim := mustSim(t, "h100-sxm-80g:8,rtx4090-48g:2,mtt-s4000-48g:4", "node-a")
	cards, err := sim.Cards(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 14 {
		t.Fatalf("got %d cards, want 14", len(cards))
	}
	want := []struct {
		model  string
		vendor Vendor
		mem    uint64
		cu     float64
		index  int
	}{
		{"h100-sxm-80g", VendorNVIDIA, 81920, 3.17, 0},
		{"rtx4090-48g", VendorNVIDIA, 49152, 0.529, 8},
		{"mtt-s4000-48g", VendorMThreads, 49152, 0.321, 0},
	}
	for i, w := range []int{0, 8, 10} {
		c := cards[w]
		if c.Model != want[i].model || c.Vendor != want[i].vendor || c.MemoryMiB != want[i].mem ||
			c.MemoryFreeMiB != want[i].mem || c.ComputeUnits != want[i].cu || c.Index != want[i].index ||
			!c.Known || !c.Health.Healthy || c.Backend != "sim" {
			t.Errorf("card %d = %+v, want %+v", w, c, want[i])
		}
	}
	if cards[13].Index != 3 {
		t.Errorf("last Moore Threads card index = %d, want 3", cards[13].Index)
	}
	uuidRE := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	if !uuidRE.MatchString(cards[0].ID) || cards[0].UUID != cards[0].ID {
		t.Errorf("NVIDIA sim id %q is not a GPU-<uuid>", cards[0].ID)
	}
	if got := cards[10].ID; got[:9] != "mthreads-" {
		t.Errorf("Moore Threads sim id %q lacks its vendor prefix", got)
	}
	seenID, seenBus := map[string]bool{}, map[string]bool{}
	for _, c := range cards {
		if seenID[c.ID] || seenBus[c.PCIBusID] {
			t.Fatalf("duplicate id or bus id: %+v", c)
		}
		seenID[c.ID], seenBus[c.PCIBusID] = true, true
	}
}

func TestSimIDsAreDeterministicPerSeed(t *testing.T) {
	ids := func(seed string) []string {
		cards, _ := mustSim(t, "h100-sxm-80g:2,rtx4090-48g:1", seed).Cards(context.Background())
		out := make([]string, len(cards))
		for i, c := range cards {
			out[i] = c.ID
		}
		return out
	}
	a1, a2, b := ids("node-a"), ids("node-a"), ids("node-b")
	for i := range a1 {
		if a1[i] != a2[i] {
			t.Errorf("same seed, card %d: %s vs %s", i, a1[i], a2[i])
		}
		for j := range b {
			if a1[i] == b[j] {
				t.Errorf("seeds node-a and node-b share id %s", a1[i])
			}
		}
	}
}

// Every catalog model, simulated, reads back as itself through the catalog
// match a real backend uses: sim cards and real cards get the same keys.
func TestSimCardsResolveToTheirOwnModel(t *testing.T) {
	cat := DefaultCatalog()
	for _, m := range cat.Models() {
		sim, err := NewSim(SimSpec{{m.Key, 1}}, "x", cat)
		if err != nil {
			t.Fatal(err)
		}
		cards, _ := sim.Cards(context.Background())
		c := cards[0]
		c.Model = ""
		cat.Resolve(&c)
		if c.Model != m.Key {
			t.Errorf("sim %s (name %q, %d MiB) resolves to %s", m.Key, cards[0].Name, cards[0].MemoryMiB, c.Model)
		}
	}
}

func TestNewSimRejectsBadEntries(t *testing.T) {
	cat := DefaultCatalog()
	for _, spec := range []SimSpec{{{"bogus", 1}}, {{"a100-80g", 0}}, {{"a100-80g", 1000}, {"a100-80g", 25}}} {
		if _, err := NewSim(spec, "x", cat); err == nil {
			t.Errorf("NewSim(%v) accepted", spec)
		}
	}
}

func TestSimFaults(t *testing.T) {
	sim := mustSim(t, "h100-sxm-80g:3", "n")
	ctx := context.Background()
	cards, _ := sim.Cards(ctx)
	// Faults injected before anyone watches are delivered once watching starts.
	if err := sim.SetHealth(cards[1].ID, Unhealthy("injected")); err != nil {
		t.Fatal(err)
	}
	if err := sim.Remove(cards[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := sim.Remove("no-such-card"); !errors.Is(err, ErrUnknownCard) {
		t.Errorf("Remove(unknown) = %v, want ErrUnknownCard", err)
	}
	if err := sim.SetHealth("no-such-card", Healthy()); !errors.Is(err, ErrUnknownCard) {
		t.Errorf("SetHealth(unknown) = %v, want ErrUnknownCard", err)
	}
	now, _ := sim.Cards(ctx)
	if len(now) != 2 || now[1].Health.Healthy || now[1].Health.Reason != "injected" {
		t.Fatalf("after faults Cards = %+v", now)
	}

	wctx, cancel := context.WithCancel(ctx)
	events := make(chan HealthEvent)
	done := make(chan error, 1)
	go func() { done <- sim.Watch(wctx, events) }()
	ev := recv(t, events)
	if ev.CardID != cards[1].ID || ev.Health.Healthy || ev.Removed {
		t.Errorf("first event = %+v", ev)
	}
	ev = recv(t, events)
	if ev.CardID != cards[2].ID || !ev.Removed {
		t.Errorf("second event = %+v", ev)
	}
	// A fault injected while watching arrives too.
	if err := sim.SetHealth(cards[1].ID, Healthy()); err != nil {
		t.Fatal(err)
	}
	if ev = recv(t, events); ev.CardID != cards[1].ID || !ev.Health.Healthy {
		t.Errorf("recovery event = %+v", ev)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch returned %v after cancel", err)
	}
}

// recv waits for one event, failing the test after a generous deadline.
func recv(t *testing.T, ch <-chan HealthEvent) HealthEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return HealthEvent{}
}
