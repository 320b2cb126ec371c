package mesh

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// EventKind says what happened to a member.
type EventKind uint8

// Event kinds.
const (
	// EventJoin: the member became alive (first seen, or back after dead
	// or left).
	EventJoin EventKind = iota + 1
	// EventUpdate: an alive member changed its metadata.
	EventUpdate
	// EventSuspect: this node's own probe of the member went unanswered,
	// directly and indirectly. memberlist has no callback for suspicion, so
	// suspicions raised by other members are not reported; the member turns
	// dead or stays alive later. The mesh learns of its probe's failure from
	// memberlist's log line, which a test pins to the memberlist version.
	EventSuspect
	// EventDead: memberlist declared the member dead.
	EventDead
	// EventLeft: the member left gracefully.
	EventLeft
	// EventDisconnect: the last libp2p connection to a member closed. A
	// hint only: the connection manager also closes idle connections of
	// live members.
	EventDisconnect
)

// String returns the kind's name: "join", "update", "suspect", "dead",
// "left", "disconnect".
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventDead:
		return "dead"
	case EventLeft:
		return "left"
	case EventDisconnect:
		return "disconnect"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change of a member, as this node saw it. Member(Peer) gives
// the member's state and metadata now.
type Event struct {
	Kind EventKind
	Peer peer.ID
	Time time.Time
	// Missed counts the events this subscription dropped just before this
	// one because its buffer was full. A subscriber that sees Missed > 0
	// should resynchronize from Members.
	Missed uint64
}

// Subscription delivers member events on C, in the order they happened.
// Delivery never blocks the mesh: when C's buffer is full the event is
// dropped and counted in the next delivered event's Missed. C is closed by
// Close or when the mesh closes.
type Subscription struct {
	C <-chan Event

	ch     chan Event
	hub    *hub
	missed uint64 // guarded by hub.mu
}

// Close ends the subscription and closes C. It is safe to call more than
// once and concurrently with the mesh closing.
func (s *Subscription) Close() {
	s.hub.remove(s)
}

// hub fans events out to subscriptions. publish is called from memberlist
// and libp2p callbacks, so it only takes a short lock and never blocks.
type hub struct {
	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

func newHub() *hub { return &hub{subs: make(map[*Subscription]struct{})} }

func (h *hub) subscribe(buffer int) *Subscription {
	ch := make(chan Event, buffer)
	s := &Subscription{C: ch, ch: ch, hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *hub) publish(kind EventKind, id peer.ID, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- Event{Kind: kind, Peer: id, Time: now, Missed: s.missed}:
			s.missed = 0
		default:
			s.missed++
		}
	}
}

func (h *hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}

// close closes every subscription; later subscriptions start closed.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		close(s.ch)
	}
	clear(h.subs)
}
