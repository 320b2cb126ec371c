package mesh

import (
	"math/rand/v2"
	"time"
)

// Metadata is announced once more a while after it changed. A change is one
// alive message that memberlist gossips, and nothing tells whether it
// reached anyone. A bench run of 40 node processes on 2 cores (`gpumesh
// bench --scenario burst`) ended with a node that saw itself coordinating
// and none of the 39 others seeing it so, 90 s after it raised its flag:
// news lost is carried only by the full state exchanges, one every 2
// minutes per node at 40 members. The second announcement, under a new
// incarnation, outranks whatever the members hold of this node. It waits a
// random part of the delay more, so that a mesh whose nodes all changed at
// once (their coordinator flags, 30 s after they started together) does not
// announce again all at once.

// reannounceAfter is how long after the last change of this node's
// metadata it is announced once more (and up to half of it more).
const reannounceAfter = 5 * time.Second

// noteChange tells reannounceLoop that the metadata was just announced.
func (m *Mesh) noteChange() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// reannounceLoop announces the metadata once more m.reannounceAfter (and a
// random part of it) after the last change; a change meanwhile starts the
// wait again. It stops before the mesh leaves (shutdown waits for it).
func (m *Mesh) reannounceLoop() {
	defer m.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-m.changed:
			m.updateMu.Lock()
			d := m.reannounceAfter
			m.updateMu.Unlock()
			t.Reset(d + rand.N(d/2+1))
		case <-t.C:
			m.updateMu.Lock()
			m.updateNodeLocked(announceWait)
			m.updateMu.Unlock()
		}
	}
}
