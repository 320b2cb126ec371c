package mesh

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate adapts memberlist's callbacks to the member table and the event
// hub. Like serf's event delegate, every method is a few lines that never
// block: memberlist calls most of them with its node lock held.
type delegate struct {
	table *memberTable
	hub   *hub
	meta  *atomic.Pointer[[]byte] // this node's encoded Meta
	now   func() time.Time
}

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.PingDelegate     = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

// NodeMeta returns this node's metadata; it always fits MaxMetaSize.
func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.meta.Load()
	if len(b) > limit {
		return nil // encodeMeta keeps it within MaxMetaSize, memberlist's limit
	}
	return b
}

// NotifyMsg ignores user messages: the mesh sends none.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts has nothing to add to memberlist's gossip.
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState adds nothing to state exchanges.
func (d *delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState ignores the (empty) user state of a state exchange.
func (d *delegate) MergeRemoteState([]byte, bool) {}

// NotifyAlive rejects an alive message whose name is not a peer ID, whose
// address is not that peer's synthetic address, or whose metadata does not
// decode: nothing else changes.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if err := d.table.validAlive(n); err != nil {
		return err
	}
	now := d.now()
	if id, ok := d.table.leftLate(n, now); ok {
		d.hub.publish(EventLeft, id, now)
	}
	return nil
}

// NotifyJoin records a member that became alive.
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	now := d.now()
	if id, _ := d.table.upsert(n, now); id != "" {
		d.hub.publish(EventJoin, id, now)
	}
}

// NotifyUpdate records an alive member's new metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	now := d.now()
	if id, _ := d.table.upsert(n, now); id != "" {
		d.hub.publish(EventUpdate, id, now)
	}
}

// NotifyLeave records a member that memberlist declared dead or that left.
// memberlist does not tell which (the Node it passes never carries the
// state), so a member that announced Meta.Leaving is taken as left.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	now := d.now()
	state := StateDead
	if n.State == memberlist.StateLeft {
		state = StateLeft
	}
	if id, state, ok := d.table.markGone(n, state, now); ok {
		kind := EventDead
		if state == StateLeft {
			kind = EventLeft
		}
		d.hub.publish(kind, id, now)
	}
}

// suspect records that this node's own probe of the member failed.
func (d *delegate) suspect(name string) {
	now := d.now()
	if id, ok := d.table.suspect(name, now); ok {
		d.hub.publish(EventSuspect, id, now)
	}
}

// AckPayload sends nothing with probe acks.
func (d *delegate) AckPayload() []byte { return nil }

// NotifyPingComplete records the round trip of a successful probe.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, _ []byte) {
	d.table.probed(other.Name, rtt)
}

// NotifyConflict cannot happen between honest members (a member's address is
// a function of its name); the conflicting claim has been ignored by
// memberlist.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {}
