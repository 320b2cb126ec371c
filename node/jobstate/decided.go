package jobstate

import (
	"sync"

	"github.com/gpumesh/gpumesh/market"
)

// Decided holds the records of the jobs a node coordinates as its driver
// decided them, from the turn that decided each until the node's persister
// has written it and the driver put it in the View. The view lags the
// market by that write; a replica from another coordinator of the same job
// (the node's serveReplicate) must be judged against what the node has
// decided, not what it has written: an adoption at a higher term, decided
// but not yet on disk, still refuses the outranked sender, which otherwise
// would take the replica as held and act on it beside this node (two
// coordinators, one share run twice). Refusing on a decision that a crash
// then loses costs the sender only a retry.
type Decided struct {
	mu sync.Mutex
	m  map[string]market.JobRecord
}

// NewDecided returns an empty Decided.
func NewDecided() *Decided { return &Decided{m: map[string]market.JobRecord{}} }

// Note records what the driver decided of a job: the node's own
// coordination (self is the node's peer ID), or (moved, or another's) that
// it no longer coordinates it. Driver only, in the turn that decided it.
func (d *Decided) Note(self string, rec market.JobRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rec.Coordinator == self && rec.State != market.JobMoved {
		d.m[rec.ID] = rec
	} else {
		delete(d.m, rec.ID)
	}
}

// Written forgets rec's job once rec, or a later record of the node's,
// is on disk and in the view. Driver only.
func (d *Decided) Written(rec market.JobRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.m[rec.ID]; ok && cur.Term == rec.Term && cur.Version <= rec.Version {
		delete(d.m, rec.ID)
	}
}

// Own returns the node's own record of job as decided and not yet
// written, if there is one.
func (d *Decided) Own(job string) (market.JobRecord, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, ok := d.m[job]
	return rec, ok
}
