package device

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Config configures a Manager.
type Config struct {
	// Backends are merged in this order: when two report a card with the
	// same ID, the first keeps it. nil means DefaultBackends(ExecRunner{},
	// DefaultCatalog()); an empty, non-nil slice means none.
	Backends []Backend
	// Logger receives backend failures and dropped events. nil discards.
	Logger *slog.Logger
}

// Manager merges the cards of every backend into one inventory and their
// health watchers into one stream of events. It owns one goroutine per
// backend watcher and one that applies events; Close stops them and waits.
// All methods are safe for concurrent use.
type Manager struct {
	log      *slog.Logger
	backends []Backend

	cancel context.CancelFunc
	wg     sync.WaitGroup
	in     chan HealthEvent // from watchers to the event loop
	out    chan HealthEvent // to the reader of Events
	notify chan struct{}    // one token: pending grew
	once   sync.Once

	mu       sync.Mutex
	cards    []Card            // backend order, then as listed
	reported map[string]Health // health as the backend last listed it
	events   map[string]Health // sticky health from watch events
	statuses []BackendStatus
	pending  []HealthEvent
}

// Open discovers the cards of every backend (all at once; a slow vendor tool
// does not hold up the others) and starts watching their health. A backend
// that is absent or fails does not stop the others: its state is in
// Statuses. Open fails only when ctx ends before discovery does.
//
// Backends absent at Open are not watched; a later Refresh may still list
// their cards.
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	return open(ctx, cfg, true)
}

func open(ctx context.Context, cfg Config, watch bool) (*Manager, error) {
	backends := cfg.Backends
	if backends == nil {
		backends = DefaultBackends(ExecRunner{}, DefaultCatalog())
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Manager{
		log:      log,
		backends: backends,
		in:       make(chan HealthEvent),
		out:      make(chan HealthEvent),
		notify:   make(chan struct{}, 1),
		reported: map[string]Health{},
		events:   map[string]Health{},
	}
	if err := m.Refresh(ctx); err != nil {
		return nil, err
	}
	if !watch {
		return m, nil
	}
	wctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	for i, b := range backends {
		if m.statuses[i].State == StateAbsent {
			continue // nothing there to watch
		}
		m.wg.Add(1)
		go m.watch(wctx, b)
	}
	m.wg.Add(1)
	go m.loop(wctx)
	return m, nil
}

// Discover lists the cards of every backend of cfg once, merged as a
// Manager merges them, and starts nothing: for a command that prints the
// cards and exits.
func Discover(ctx context.Context, cfg Config) ([]Card, []BackendStatus, error) {
	m, err := open(ctx, cfg, false)
	if err != nil {
		return nil, nil, err
	}
	return m.Cards(), m.Statuses(), nil
}

// Cards returns the inventory: every card of every present backend, in
// backend order, each with its current health. A card a watch event made
// unhealthy stays unhealthy until an event says otherwise.
func (m *Manager) Cards() []Card {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Card, len(m.cards))
	for i, c := range m.cards {
		c.Health = m.healthLocked(c.ID)
		out[i] = c
	}
	return out
}

// Model returns the model of the card with the given ID, copying no card
// (Cards copies them all).
func (m *Manager) Model(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.cards {
		if m.cards[i].ID == id {
			return m.cards[i].Model, true
		}
	}
	return "", false
}

// Healthy counts the healthy cards and lists their models, each once, in
// card order, copying no card (Cards copies them all).
func (m *Manager) Healthy() (cards int, models []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.cards {
		c := &m.cards[i]
		if !m.healthLocked(c.ID).Healthy {
			continue
		}
		cards++
		if !slices.Contains(models, c.Model) {
			models = append(models, c.Model)
		}
	}
	return cards, models
}

// Statuses returns each backend's state after the last discovery, in
// backend order.
func (m *Manager) Statuses() []BackendStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]BackendStatus(nil), m.statuses...)
}

// Events returns the stream of health changes: a card turned unhealthy (or
// healthy again), or disappeared. Only changes are sent. Events wait for the
// reader, up to 1024 of them; beyond that the oldest are dropped (and
// logged), but Cards always holds the latest state. The channel is closed by
// Close.
func (m *Manager) Events() <-chan HealthEvent { return m.out }

// Close stops the watchers and waits for every goroutine of the Manager to
// return. It is safe to call more than once.
func (m *Manager) Close() error {
	m.once.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
		m.wg.Wait()
	})
	return nil
}

// Refresh lists every backend's cards again: fresh telemetry and free
// memory, new cards added, cards gone removed (with a Removed event), and a
// health change a backend reports in its listing sent as an event. A backend
// that fails keeps its previous cards. Refresh returns an error only when ctx
// ends first.
func (m *Manager) Refresh(ctx context.Context) error {
	type result struct {
		cards []Card
		err   error
	}
	results := make([]result, len(m.backends))
	var wg sync.WaitGroup
	for i, b := range m.backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cards, err := b.Cards(ctx)
			results[i] = result{cards, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("device discovery: %w", err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	old := map[string]Card{}
	for _, c := range m.cards {
		old[c.ID] = c
	}
	oldHealth := map[string]Health{}
	for id := range old {
		oldHealth[id] = m.healthLocked(id)
	}
	var cards []Card
	seen := map[string]bool{}
	statuses := make([]BackendStatus, len(m.backends))
	for i, b := range m.backends {
		st := BackendStatus{Backend: b.Name()}
		r := results[i]
		switch {
		case r.err == nil:
			st.State = StatePresent
		case errors.Is(r.err, ErrAbsent):
			st.State, st.Reason = StateAbsent, reason(r.err)
		default:
			st.State, st.Reason = StateFailed, reason(r.err)
			m.log.Warn("device backend failed", "backend", b.Name(), "err", r.err)
			r.cards = nil
			for _, c := range m.cards { // keep what it listed before
				if c.Backend == b.Name() {
					r.cards = append(r.cards, c)
				}
			}
		}
		for _, c := range r.cards {
			if c.Backend == "" {
				c.Backend = b.Name()
			}
			if c.ID == "" || seen[c.ID] {
				m.log.Warn("device card skipped: empty or duplicate id", "backend", b.Name(), "id", c.ID, "name", c.Name)
				continue
			}
			seen[c.ID] = true
			if r.err == nil {
				m.reported[c.ID] = c.Health
			}
			cards = append(cards, c)
			st.Cards++
		}
		statuses[i] = st
	}
	m.cards, m.statuses = cards, statuses
	for id, c := range old {
		if !seen[id] {
			delete(m.reported, id)
			delete(m.events, id)
			m.pushLocked(HealthEvent{CardID: id, Backend: c.Backend, Health: Unhealthy("no longer listed"), Removed: true})
			continue
		}
		if h := m.healthLocked(id); h != oldHealth[id] {
			m.pushLocked(HealthEvent{CardID: id, Backend: c.Backend, Health: h})
		}
	}
	return nil
}

func reason(err error) string {
	s := err.Error()
	if r, ok := strings.CutPrefix(s, ErrAbsent.Error()+": "); ok {
		return r
	}
	return s
}

// healthLocked is a card's effective health: what a watch event said, if it
// said the card is unhealthy, else what the backend last listed.
func (m *Manager) healthLocked(id string) Health {
	if h, ok := m.events[id]; ok && !h.Healthy {
		return h
	}
	if h, ok := m.reported[id]; ok {
		return h
	}
	return Healthy()
}

// watch runs one backend's watcher until ctx is done.
func (m *Manager) watch(ctx context.Context, b Backend) {
	defer m.wg.Done()
	if err := b.Watch(ctx, m.in); err != nil && ctx.Err() == nil {
		m.log.Warn("device health watch stopped", "backend", b.Name(), "err", err)
	}
}

// loop applies watch events to the inventory and hands changes to the
// reader of Events, never blocking a watcher for long.
func (m *Manager) loop(ctx context.Context) {
	defer m.wg.Done()
	defer close(m.out)
	for {
		var send chan<- HealthEvent
		var head HealthEvent
		m.mu.Lock()
		if len(m.pending) > 0 {
			send, head = m.out, m.pending[0]
		}
		m.mu.Unlock()
		select {
		case ev := <-m.in:
			m.apply(ev)
		case <-m.notify:
		case send <- head:
			m.mu.Lock()
			m.pending = m.pending[1:]
			m.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// apply records a watch event and queues it for the reader if it changes
// what Cards says.
func (m *Manager) apply(ev HealthEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	idx := -1
	for i, c := range m.cards {
		if c.ID == ev.CardID {
			idx = i
			break
		}
	}
	if idx < 0 {
		m.log.Debug("device event for an unknown card", "backend", ev.Backend, "card", ev.CardID)
		return
	}
	ev.Backend = m.cards[idx].Backend
	if ev.Removed {
		m.cards = append(m.cards[:idx:idx], m.cards[idx+1:]...)
		delete(m.reported, ev.CardID)
		delete(m.events, ev.CardID)
		for i := range m.statuses {
			if m.statuses[i].Backend == ev.Backend {
				m.statuses[i].Cards--
			}
		}
		m.pushLocked(ev)
		return
	}
	before := m.healthLocked(ev.CardID)
	if ev.Health.Healthy {
		delete(m.events, ev.CardID)
		m.reported[ev.CardID] = ev.Health
	} else {
		m.events[ev.CardID] = ev.Health
	}
	if after := m.healthLocked(ev.CardID); after != before {
		ev.Health = after
		m.pushLocked(ev)
	}
}

func (m *Manager) pushLocked(ev HealthEvent) {
	if len(m.pending) >= maxPendingEvents {
		dropped := m.pending[0]
		m.pending = m.pending[1:]
		m.log.Warn("device event dropped: nobody reads Events", "card", dropped.CardID)
	}
	m.pending = append(m.pending, ev)
	select {
	case m.notify <- struct{}{}:
	default:
	}
}
