package device

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// stubBackend is a Backend whose answers a test sets.
type stubBackend struct {
	name string
	mu   sync.Mutex
	list []Card
	err  error
}

func (s *stubBackend) Name() string { return s.name }

func (s *stubBackend) Cards(context.Context) ([]Card, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Card(nil), s.list...), s.err
}

func (s *stubBackend) Watch(context.Context, chan<- HealthEvent) error { return nil }

func (s *stubBackend) set(list []Card, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list, s.err = list, err
}

func recvManager(t *testing.T, m *Manager) HealthEvent {
	t.Helper()
	return recv(t, m.Events())
}

func TestManagerMergesBackends(t *testing.T) {
	sim := mustSim(t, "h100-sxm-80g:2,rtx4090-48g:1", "node")
	simCards, _ := sim.Cards(context.Background())
	failing := &stubBackend{name: "amd", err: errors.New("amd-smi static --json: exit status 1: error: driver not initialized")}
	absent := NewKunlunxin(&replay{t: t}, DefaultCatalog())
	// A second backend reporting a card the first already has: first wins.
	dup := &stubBackend{name: "dup", list: []Card{{ID: simCards[0].ID, Name: "impostor", MemoryMiB: 1, Health: Healthy()}}}
	m, err := Open(context.Background(), Config{Backends: []Backend{sim, failing, absent, dup}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cards := m.Cards()
	if len(cards) != 3 {
		t.Fatalf("inventory = %d cards, want 3", len(cards))
	}
	for i, c := range cards {
		if c != simCards[i] {
			t.Errorf("card %d = %+v, want %+v", i, c, simCards[i])
		}
	}
	want := []BackendStatus{
		{Backend: "sim", State: StatePresent, Cards: 3},
		{Backend: "amd", State: StateFailed, Reason: "amd-smi static --json: exit status 1: error: driver not initialized"},
		{Backend: "kunlunxin", State: StateAbsent, Reason: "xpu-smi not found"},
		{Backend: "dup", State: StatePresent, Cards: 0},
	}
	got := m.Statuses()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("status %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestManagerHealthEvents(t *testing.T) {
	sim := mustSim(t, "h100-sxm-80g:4", "node")
	m, err := Open(context.Background(), Config{Backends: []Backend{sim}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids := []string{}
	for _, c := range m.Cards() {
		ids = append(ids, c.ID)
	}

	if err := sim.SetHealth(ids[1], Unhealthy("injected fault")); err != nil {
		t.Fatal(err)
	}
	ev := recvManager(t, m)
	if ev.CardID != ids[1] || ev.Health.Healthy || ev.Health.Reason != "injected fault" || ev.Backend != "sim" {
		t.Fatalf("event = %+v", ev)
	}
	if c := findCard(m.Cards(), ids[1]); c.Health.Healthy {
		t.Errorf("card still healthy in inventory: %+v", c)
	}
	// The summaries that copy no card say the same as Cards.
	if n, models := m.Healthy(); n != 3 || len(models) != 1 || models[0] != "h100-sxm-80g" {
		t.Errorf("Healthy() = %d, %q; want 3 cards of h100-sxm-80g", n, models)
	}
	if model, ok := m.Model(ids[1]); !ok || model != "h100-sxm-80g" {
		t.Errorf("Model(%s) = %q, %v; want h100-sxm-80g of the unhealthy card too", ids[1], model, ok)
	}
	if model, ok := m.Model("no-such-card"); ok {
		t.Errorf("Model of a card that is not there = %q, true", model)
	}
	// The same health again is no change: no event. Then a removal, which
	// must be the next event out.
	if err := sim.SetHealth(ids[1], Unhealthy("injected fault")); err != nil {
		t.Fatal(err)
	}
	if err := sim.Remove(ids[2]); err != nil {
		t.Fatal(err)
	}
	if ev = recvManager(t, m); ev.CardID != ids[2] || !ev.Removed {
		t.Fatalf("event = %+v, want card 2 removed", ev)
	}
	if n := len(m.Cards()); n != 3 || findCard(m.Cards(), ids[2]).ID != "" {
		t.Errorf("removed card still listed (%d cards)", n)
	}
	if st := m.Statuses()[0]; st.Cards != 3 {
		t.Errorf("status after removal = %+v", st)
	}
	// Recovery.
	if err := sim.SetHealth(ids[1], Healthy()); err != nil {
		t.Fatal(err)
	}
	if ev = recvManager(t, m); ev.CardID != ids[1] || !ev.Health.Healthy {
		t.Fatalf("event = %+v, want card 1 healthy", ev)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-m.Events(); ok {
		t.Error("Events not closed by Close")
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Refresh turns what a backend lists into events: health it reports, and
// cards that vanished.
func TestManagerRefresh(t *testing.T) {
	card := func(id string, h Health) Card {
		return Card{ID: id, Name: "Ascend 910B3", Vendor: VendorHuawei, MemoryMiB: 65536, Health: h}
	}
	b := &stubBackend{name: "ascend", list: []Card{card("a", Healthy()), card("b", Healthy()), card("c", Healthy())}}
	m, err := Open(context.Background(), Config{Backends: []Backend{b}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	b.set([]Card{card("a", Healthy()), card("b", Unhealthy("npu-smi health Alarm")), card("d", Healthy())}, nil)
	if err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]HealthEvent{}
	for range 2 {
		ev := recvManager(t, m)
		got[ev.CardID] = ev
	}
	if ev := got["b"]; ev.Health.Reason != "npu-smi health Alarm" || ev.Removed {
		t.Errorf("b: %+v", ev)
	}
	if ev := got["c"]; !ev.Removed {
		t.Errorf("c: %+v, want removed", ev)
	}
	var ids []string
	for _, c := range m.Cards() {
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != "a,b,d" {
		t.Errorf("inventory after refresh = %v", ids)
	}

	// A backend that fails keeps its cards and says why.
	b.set(nil, errors.New("npu-smi info: exit status 2"))
	if err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(m.Cards()); n != 3 {
		t.Errorf("after a failed refresh %d cards, want the 3 from before", n)
	}
	if st := m.Statuses()[0]; st.State != StateFailed || st.Cards != 3 {
		t.Errorf("status = %+v", st)
	}
	// A refresh that outlives its context fails and changes nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Refresh(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Refresh(cancelled) = %v", err)
	}
}

// A reader that never reads must not stop the Manager: the inventory stays
// current and Close still returns.
func TestManagerUnreadEvents(t *testing.T) {
	sim := mustSim(t, "a100-80g:8", "n")
	m, err := Open(context.Background(), Config{Backends: []Backend{sim}})
	if err != nil {
		t.Fatal(err)
	}
	cards := m.Cards()
	for round := range 3 {
		for _, c := range cards {
			if err := sim.SetHealth(c.ID, Unhealthy("round %d", round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := findCard(m.Cards(), cards[7].ID)
		if c.Health.Reason == "round 2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inventory never caught up: %+v", c.Health)
		}
		time.Sleep(time.Millisecond) // polling a condition, not waiting for it
	}
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked")
	}
}

func TestDiscoverStartsNothing(t *testing.T) {
	sim := mustSim(t, "l40s-48g:2", "d")
	cards, statuses, err := Discover(context.Background(), Config{Backends: []Backend{sim}})
	if err != nil || len(cards) != 2 || statuses[0].State != StatePresent {
		t.Fatalf("Discover = %v, %v, %v", cards, statuses, err)
	}
	// goleak in TestMain checks that no goroutine was left behind.
}

func TestDefaultBackendsCoverEveryVendor(t *testing.T) {
	r := &replay{t: t}
	var names []string
	for _, b := range DefaultBackends(r, DefaultCatalog()) {
		names = append(names, b.Name())
	}
	if got := strings.Join(names, ","); got != "nvml,amd,hygon,mthreads,ascend,kunlunxin" {
		t.Errorf("default backends = %s", got)
	}
	// With no tools installed, every tool backend is absent and says which
	// tool it looked for.
	_, statuses, err := Discover(context.Background(), Config{Backends: DefaultBackends(r, DefaultCatalog())[1:]})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range statuses {
		if st.State != StateAbsent || !strings.Contains(st.Reason, "not found") {
			t.Errorf("status = %+v", st)
		}
	}
}

// findCard returns the card of cards with id (the zero Card if none).
func findCard(cards []Card, id string) Card {
	for _, c := range cards {
		if c.ID == id {
			return c
		}
	}
	return Card{}
}
