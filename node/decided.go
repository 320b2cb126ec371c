package node

import (
	"sync"

	"github.com/gpumesh/gpumesh/market"
)

// decided holds the records of the jobs this node coordinates as its
// driver decided them, from the turn that decided each until the
// persister has written it and the driver put it in the view (effects).
// The view lags the market by that write; a replica from another
// coordinator of the same job (serveReplicate) must be judged against
// what this node has decided, not what it has written: an adoption at a
// higher term, decided but not yet on disk, still refuses the outranked
// sender, which otherwise would take the replica as held and act on it
// beside this node (two coordinators, one share run twice). Refusing on a
// decision that a crash then loses costs the sender only a retry.
type decided struct {
	mu sync.Mutex
	m  map[string]market.JobRecord
}

func newDecided() *decided { return &decided{m: map[string]market.JobRecord{}} }

// note records what the driver decided of a job: this node's own
// coordination, or (moved, or another's) that it no longer coordinates it.
// Driver only, in the turn that decided it.
func (d *decided) note(self string, rec market.JobRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rec.Coordinator == self && rec.State != market.JobMoved {
		d.m[rec.ID] = rec
	} else {
		delete(d.m, rec.ID)
	}
}

// written forgets rec's job once rec, or a later record of this node's,
// is on disk and in the view. Driver only.
func (d *decided) written(rec market.JobRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.m[rec.ID]; ok && cur.Term == rec.Term && cur.Version <= rec.Version {
		delete(d.m, rec.ID)
	}
}

// own returns this node's own record of job as decided and not yet
// written, if there is one.
func (d *decided) own(job string) (market.JobRecord, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, ok := d.m[job]
	return rec, ok
}

// ownRecord returns this node's newest record of a job it coordinates: as
// decided, or as written (the view).
func (n *Node) ownRecord(job string) (market.JobRecord, bool) {
	if rec, ok := n.decided.own(job); ok {
		return rec, true
	}
	rec, ok := n.view.job(job)
	return rec, ok && rec.Coordinator == n.id.String()
}
