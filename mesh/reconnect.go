package mesh

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Reconnecting after a partition. memberlist probes only the members it
// holds alive, and tells the dead about news only for a while after they
// die; when a partition heals and nothing new happens, the two sides may
// never hear from each other again, each holding the other dead. So, as
// serf does, the mesh regularly tries to join again one member it holds
// dead (never one that left): if it answers, a state exchange merges the
// two views, and the member refutes its death.

// reconnectWait is how long one reconnect attempt may take to reach the
// member before memberlist is asked to join it.
const reconnectWait = time.Second

// reconnectLoop tries a dead member every Config.ReconnectInterval
// (stretched by mesh size: one attempt per node every ReconnectInterval or
// every numAlive × 10 ms, whichever is longer, so a large mesh does not
// flood a dead address), until the mesh closes.
func (m *Mesh) reconnectLoop() {
	defer m.wg.Done()
	if m.cfg.ReconnectInterval <= 0 {
		return
	}
	for {
		wait := max(m.cfg.ReconnectInterval, time.Duration(m.table.numAlive())*10*time.Millisecond)
		t := time.NewTimer(jitter(wait))
		select {
		case <-m.done:
			t.Stop()
			return
		case <-t.C:
			m.reconnect()
		}
	}
}

// reconnect tries one member held dead (within Config.DeadRetention).
func (m *Mesh) reconnect() {
	id, ok := m.table.randomDead()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, reconnectWait)
	defer cancel()
	if m.tr.cfg.beforeDial != nil {
		if err := m.tr.cfg.beforeDial(ctx, id); err != nil {
			return
		}
	}
	// Reach it first with a bounded dial: memberlist's own join waits the
	// whole stream timeout for a member that is really gone.
	if _, err := m.h.Network().DialPeer(ctx, id); err != nil {
		return
	}
	if _, err := m.ml.Join([]string{id.String() + "/" + swimHostPort(id)}); err != nil {
		m.log.Debug("mesh: reconnect failed", "peer", id, "err", unwrapMultierror(err))
		return
	}
	m.log.Info("mesh: reconnected to a member held dead", "peer", id)
}

// randomDead picks a member held dead (not left), if any.
func (t *memberTable) randomDead() (peer.ID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var dead []peer.ID
	for name, e := range t.entries {
		if e.state == StateDead && name != t.self {
			dead = append(dead, e.id)
		}
	}
	if len(dead) == 0 {
		return "", false
	}
	return dead[rand.IntN(len(dead))], true
}
