package device

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
)

// SimBackendName is the Name of a Sim backend and the Backend of its cards.
const SimBackendName = "sim"

// maxPendingEvents bounds the health events a Sim or a Manager holds for a
// reader that does not read; the oldest are dropped first.
const maxPendingEvents = 1024

// Sim is a simulated backend: the cards of a SimSpec with their catalog
// figures, and faults injected by tests and demos. It is safe for concurrent
// use.
//
// Each card's UUID is derived from the seed, the card's position and its
// model key, so the same spec and seed give the same IDs in every run, and
// many simulated nodes in one process (each with its own seed) never share an
// ID. NVIDIA cards get "GPU-<uuid>" like real ones; others "<vendor>-<uuid>".
type Sim struct {
	mu      sync.Mutex
	cards   []Card
	pending []HealthEvent
	notify  chan struct{} // one token: pending has events
}

var _ Backend = (*Sim)(nil)

// NewSim returns a backend holding the cards of spec, all healthy. Memory is
// the catalog's memory_gib × 1024 MiB, all of it free; Index counts the cards
// of each vendor from 0 in spec order, as the vendor's runtime would.
func NewSim(spec SimSpec, seed string, cat *Catalog) (*Sim, error) {
	s := &Sim{notify: make(chan struct{}, 1)}
	perVendor := map[Vendor]int{}
	pos := 0
	for _, e := range spec {
		m, ok := cat.Lookup(e.Key)
		if !ok {
			return nil, &SpecError{Token: e.Key, Reason: fmt.Sprintf("unknown model %q", e.Key), Closest: cat.Closest(e.Key, 3)}
		}
		if e.Count < 1 || e.Count > MaxSimCards {
			return nil, &SpecError{Token: fmt.Sprintf("%s:%d", e.Key, e.Count), Reason: fmt.Sprintf("count must be 1..%d", MaxSimCards)}
		}
		for range e.Count {
			if pos >= MaxSimCards {
				return nil, &SpecError{Token: e.Key, Reason: fmt.Sprintf("more than %d cards in total", MaxSimCards)}
			}
			uuid := simUUID(seed, pos, m.Key)
			if m.Vendor == VendorNVIDIA {
				uuid = "GPU-" + uuid
			} else {
				uuid = string(m.Vendor) + "-" + uuid
			}
			mem := m.MemoryGiB * 1024
			s.cards = append(s.cards, Card{
				ID:            uuid,
				Vendor:        m.Vendor,
				Model:         m.Key,
				Name:          m.NamePattern,
				Known:         true,
				UUID:          uuid,
				Index:         perVendor[m.Vendor],
				PCIBusID:      fmt.Sprintf("%04x:%02x:00.0", pos/256, pos%256),
				Backend:       SimBackendName,
				MemoryMiB:     mem,
				MemoryFreeMiB: mem,
				ComputeUnits:  m.ComputeUnits,
				BandwidthGBs:  m.BandwidthGBs,
				Health:        Healthy(),
			})
			perVendor[m.Vendor]++
			pos++
		}
	}
	return s, nil
}

// simUUID formats the first 16 bytes of SHA-256(seed, pos, key) as a UUID.
func simUUID(seed string, pos int, key string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("gpumesh-sim\x00%s\x00%d\x00%s", seed, pos, key)))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Name implements Backend.
func (s *Sim) Name() string { return SimBackendName }

// Cards implements Backend: the cards not removed, with their current health.
func (s *Sim) Cards(ctx context.Context) ([]Card, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Card(nil), s.cards...), nil
}

// Watch implements Backend: it delivers the faults injected with SetHealth
// and Remove, in order, including those injected before Watch was called.
func (s *Sim) Watch(ctx context.Context, events chan<- HealthEvent) error {
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		for i, ev := range batch {
			select {
			case events <- ev:
			case <-ctx.Done():
				s.requeue(batch[i:])
				return nil
			}
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil
		}
	}
}

// requeue puts undelivered events back in front of any newer ones.
func (s *Sim) requeue(evs []HealthEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(append([]HealthEvent(nil), evs...), s.pending...)
}

// SetHealth injects a fault (or a recovery): the card with the given ID takes
// health h, and a watcher hears of it. It returns ErrUnknownCard for an ID
// the backend does not hold.
func (s *Sim) SetHealth(id string, h Health) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.cards {
		if s.cards[i].ID == id {
			s.cards[i].Health = h
			s.pushLocked(HealthEvent{CardID: id, Backend: SimBackendName, Health: h})
			return nil
		}
	}
	return fmt.Errorf("sim: %w %q", ErrUnknownCard, id)
}

// Remove injects a disappearance: the card leaves Cards, and a watcher hears
// of it as a Removed event. It returns ErrUnknownCard for an ID the backend
// does not hold.
func (s *Sim) Remove(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.cards {
		if s.cards[i].ID == id {
			s.cards = append(s.cards[:i:i], s.cards[i+1:]...)
			s.pushLocked(HealthEvent{CardID: id, Backend: SimBackendName, Health: Unhealthy("removed"), Removed: true})
			return nil
		}
	}
	return fmt.Errorf("sim: %w %q", ErrUnknownCard, id)
}

func (s *Sim) pushLocked(ev HealthEvent) {
	if len(s.pending) >= maxPendingEvents {
		s.pending = s.pending[1:]
	}
	s.pending = append(s.pending, ev)
	select {
	case s.notify <- struct{}{}:
	default:
	}
}
