package mesh

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/peer"
)

// State is a member's state as this node sees it.
type State uint8

// Member states. Suspect is a hint from this node's own failed probe (see
// EventSuspect); memberlist's view of the member is still alive until it
// declares it dead.
const (
	StateAlive State = iota + 1
	StateSuspect
	StateDead
	StateLeft
)

// String returns "alive", "suspect", "dead" or "left".
func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText encodes the state as its String.
func (s State) MarshalText() ([]byte, error) {
	if s < StateAlive || s > StateLeft {
		return nil, fmt.Errorf("mesh: invalid state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// Member is a snapshot of one member of the mesh as this node sees it.
type Member struct {
	ID peer.ID
	// Name is ID.String(), memberlist's name of the member, kept with it:
	// HRW rankings hash it for every member, and encoding a peer ID is a
	// base58 conversion each time.
	Name string
	Self bool // this node
	// State and Since: the member's state and when this node saw it
	// change.
	State State
	Since time.Time
	// LastHeard is when this node last received a packet or stream from
	// the member (zero: never directly; news of it came by gossip).
	LastHeard time.Time
	// RTT is the round-trip time of this node's last successful probe of
	// the member (zero: none yet).
	RTT time.Duration
	// Meta is the member's own description of itself.
	Meta
}

// entry is the table's record of a member. meta is the byte slice
// memberlist holds: memberlist replaces it on update and never writes into
// it, so the table shares it rather than copy 512 bytes per member.
type entry struct {
	id        peer.ID
	ip        net.IP // its synthetic address, computed once
	state     State  // alive, dead or left: memberlist's view
	since     time.Time
	meta      []byte
	decoded   *Meta // lazily decoded meta
	suspectAt time.Time
	rtt       time.Duration
}

// memberTable is the membership view behind Members. memberlist's own
// Members cannot be read safely (it returns pointers into state it mutates
// under its lock), so the table is kept from the event callbacks, which run
// under that lock.
type memberTable struct {
	self      string
	retention time.Duration

	mu      sync.Mutex
	entries map[string]*entry // by node name (peer ID string)
	alive   int               // entries in state alive
}

func newMemberTable(self string, retention time.Duration) *memberTable {
	return &memberTable{self: self, retention: retention, entries: make(map[string]*entry)}
}

// validAlive reports whether memberlist may accept an alive message for n:
// its name is a peer ID, its address is that peer's synthetic address, and
// its metadata decodes. Known name and metadata take a fast path.
func (t *memberTable) validAlive(n *memberlist.Node) error {
	t.mu.Lock()
	e := t.entries[n.Name]
	known := e != nil && bytes.Equal(e.meta, n.Meta)
	var id peer.ID
	var ip net.IP
	if e != nil {
		id, ip = e.id, e.ip
	}
	t.mu.Unlock()
	if known {
		if n.Port != swimPort || !ip.Equal(n.Addr) {
			return fmt.Errorf("member %s claims address %v:%d, not its own", n.Name, n.Addr, n.Port)
		}
		return nil
	}
	if id == "" {
		var err error
		if id, err = peer.Decode(n.Name); err != nil {
			return fmt.Errorf("member name %q is not a peer ID", n.Name)
		}
	}
	if n.Port != swimPort || !swimIP(id).Equal(n.Addr) {
		return fmt.Errorf("member %s claims address %v:%d, not its own", n.Name, n.Addr, n.Port)
	}
	if _, err := decodeMeta(n.Meta); err != nil {
		return fmt.Errorf("member %s: %w", n.Name, err)
	}
	return nil
}

// leftLate turns a member seen dead into left when its announcement of
// leaving (an alive message with Meta.Leaving) arrives after the news of its
// end: memberlist ignores that alive message as stale, but still shows it
// to the alive delegate first. It reports whether the member turned left.
func (t *memberTable) leftLate(n *memberlist.Node, now time.Time) (peer.ID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[n.Name]
	if e == nil || e.state != StateDead || bytes.Equal(e.meta, n.Meta) {
		return "", false
	}
	meta, err := decodeMeta(n.Meta)
	if err != nil || !meta.Leaving {
		return "", false
	}
	e.state = StateLeft
	e.since = now
	e.meta = n.Meta
	e.decoded = &meta
	return e.id, true
}

// upsert records n as alive with its metadata. It returns the member's ID
// and whether it was alive before.
func (t *memberTable) upsert(n *memberlist.Node, now time.Time) (peer.ID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[n.Name]
	if e == nil {
		id, err := peer.Decode(n.Name)
		if err != nil {
			// validAlive let it through, so this cannot happen; keep
			// the table consistent anyway.
			return "", false
		}
		e = &entry{id: id, ip: swimIP(id)}
		t.entries[n.Name] = e
	}
	wasAlive := e.state == StateAlive
	if !wasAlive {
		e.state = StateAlive
		e.since = now
		t.alive++
	}
	if !bytes.Equal(e.meta, n.Meta) {
		e.meta = n.Meta
		e.decoded = nil
	}
	e.suspectAt = time.Time{}
	return e.id, wasAlive
}

// selfMetaIs reports whether the metadata memberlist holds for this node
// (recorded by its join and update callbacks) is b.
func (t *memberTable) selfMetaIs(b []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[t.self]
	return e != nil && bytes.Equal(e.meta, b)
}

// markGone records n as dead, or left if memberlist says so or the member
// announced it was leaving. It returns the state recorded.
func (t *memberTable) markGone(n *memberlist.Node, state State, now time.Time) (peer.ID, State, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[n.Name]
	if e == nil {
		return "", 0, false
	}
	if e.state == StateAlive {
		t.alive--
	}
	if state == StateDead {
		if e.decoded == nil {
			if meta, err := decodeMeta(e.meta); err == nil {
				e.decoded = &meta
			}
		}
		if e.decoded != nil && e.decoded.Leaving {
			state = StateLeft
		}
	}
	e.state = state
	e.since = now
	e.suspectAt = time.Time{}
	return e.id, state, true
}

// suspect records that this node's probe of name failed.
func (t *memberTable) suspect(name string, now time.Time) (peer.ID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[name]
	if e == nil || e.state != StateAlive {
		return "", false
	}
	e.suspectAt = now
	return e.id, true
}

// probed records a successful probe's round trip; it clears a suspicion.
func (t *memberTable) probed(name string, rtt time.Duration) {
	t.mu.Lock()
	if e := t.entries[name]; e != nil {
		e.rtt = rtt
		e.suspectAt = time.Time{}
	}
	t.mu.Unlock()
}

// isAlive tells whether the member is alive (or suspect) in the table.
func (t *memberTable) isAlive(id peer.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[id.String()]
	return e != nil && e.state == StateAlive
}

// randomAlive returns an alive member other than this node, chosen by map
// order (varied enough to spread resyncs).
func (t *memberTable) randomAlive() (peer.ID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	skip := rand.IntN(max(t.alive, 1))
	var pick peer.ID
	for name, e := range t.entries {
		if e.state != StateAlive || name == t.self {
			continue
		}
		pick = e.id
		if skip--; skip < 0 {
			break
		}
	}
	return pick, pick != ""
}

// numAlive counts alive and suspect members, this node included.
func (t *memberTable) numAlive() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.alive
}

func (t *memberTable) alivePeers() []peer.ID {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]peer.ID, 0, t.alive)
	for name, e := range t.entries {
		if e.state == StateAlive && name != t.self {
			out = append(out, e.id)
		}
	}
	return out
}

// snapshot returns the members sorted by ID, dropping dead and left ones
// older than the retention. heard gives the last time a member was heard
// from directly.
func (t *memberTable) snapshot(now time.Time, heard func(string) time.Time) []Member {
	t.mu.Lock()
	out := make([]Member, 0, len(t.entries))
	names := make([]string, 0, len(t.entries))
	suspects := make([]time.Time, 0, len(t.entries))
	for name, e := range t.entries {
		if e.state != StateAlive && t.retention > 0 && now.Sub(e.since) > t.retention {
			delete(t.entries, name)
			continue
		}
		out = append(out, t.memberLocked(name, e))
		names = append(names, name)
		suspects = append(suspects, e.suspectAt)
	}
	t.mu.Unlock()
	for i := range out {
		t.finish(&out[i], names[i], suspects[i], heard)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// member returns one member's snapshot.
func (t *memberTable) member(id peer.ID, heard func(string) time.Time) (Member, bool) {
	name := id.String()
	t.mu.Lock()
	e := t.entries[name]
	if e == nil {
		t.mu.Unlock()
		return Member{}, false
	}
	m := t.memberLocked(name, e)
	suspectAt := e.suspectAt
	t.mu.Unlock()
	t.finish(&m, name, suspectAt, heard)
	return m, true
}

func (t *memberTable) memberLocked(name string, e *entry) Member {
	if e.decoded == nil {
		meta, err := decodeMeta(e.meta)
		if err != nil {
			meta = Meta{} // validAlive admits only decodable metadata
		}
		e.decoded = &meta
	}
	return Member{
		ID:    e.id,
		Name:  name,
		Self:  name == t.self,
		State: e.state,
		Since: e.since,
		RTT:   e.rtt,
		Meta:  *e.decoded,
	}
}

// finish fills LastHeard and resolves a suspicion: it stands while nothing
// was heard from the member since.
func (t *memberTable) finish(m *Member, name string, suspectAt time.Time, heard func(string) time.Time) {
	if heard != nil && !m.Self {
		m.LastHeard = heard(name)
	}
	if m.State == StateAlive && !suspectAt.IsZero() && m.LastHeard.Before(suspectAt) {
		m.State = StateSuspect
		m.Since = suspectAt
	}
	m.Addrs = append(m.Addrs[:0:0], m.Addrs...)
	m.Models = append(m.Models[:0:0], m.Models...)
}
