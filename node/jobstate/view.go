package jobstate

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// View is what a node's API goroutines read without asking its driver: the
// records of the jobs the node coordinates (a copy of each as the market
// last persisted it) or holds a replica of, and the IDs of jobs submitted
// through the node.
type View struct {
	mu        sync.RWMutex
	jobs      map[string]market.JobRecord
	submitted map[string]time.Time
	// settling indexes the jobs whose records held show them still
	// needing a coordinator (Settling): what is audited and taken over
	// walks these, not every job the node ever held.
	settling map[string]bool
	// dropped holds the tombstones of the jobs whose records were
	// dropped (Forget).
	dropped map[string]Tombstone
}

// NewView returns an empty view.
func NewView() *View {
	return &View{jobs: map[string]market.JobRecord{}, submitted: map[string]time.Time{}, settling: map[string]bool{},
		dropped: map[string]Tombstone{}}
}

// Settling reports whether a job still needs a coordinator: it has not
// ended, or it ended (cancelled, say) while attempts were still stopping,
// whose ends must be heard and billed.
func Settling(rec market.JobRecord) bool {
	return rec.State != market.JobMoved && (!rec.State.Terminal() || len(rec.Live()) > 0)
}

// store keeps rec and its place in the settling index. v.mu is held.
func (v *View) store(rec market.JobRecord) {
	v.jobs[rec.ID] = rec
	if Settling(rec) {
		v.settling[rec.ID] = true
	} else {
		delete(v.settling, rec.ID)
	}
}

// Put stores rec unless the copy held is from a coordinator that
// outranks rec's (market.Outranks), or the job's record was dropped.
func (v *View) Put(rec market.JobRecord) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, gone := v.dropped[rec.ID]; gone {
		return
	}
	if old, ok := v.jobs[rec.ID]; ok && market.Outranks(old.Term, old.Coordinator, rec.Term, rec.Coordinator) {
		return
	}
	v.store(rec)
}

// PutNewer stores rec if it is newer than the copy held (Newer): from a
// coordinator that outranks the held copy's (market.Outranks), or from the
// same coordinator and term with a higher version. It reports whether it
// stored it.
func (v *View) PutNewer(rec market.JobRecord) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, gone := v.dropped[rec.ID]; gone {
		return false // the job ended: nothing is newer than its end
	}
	if old, ok := v.jobs[rec.ID]; ok && !Newer(rec, old) {
		return false
	}
	v.store(rec)
	return true
}

// SettlingCoordinatedBy lists the records held of jobs still needing a
// coordinator (Settling) whose coordinator is id.
func (v *View) SettlingCoordinatedBy(id string) []market.JobRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []market.JobRecord
	for job := range v.settling {
		if r := v.jobs[job]; r.Coordinator == id {
			out = append(out, r)
		}
	}
	return out
}

// Settling lists the records held of jobs still needing a coordinator
// (Settling), in no order.
func (v *View) Settling() []market.JobRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]market.JobRecord, 0, len(v.settling))
	for job := range v.settling {
		out = append(out, v.jobs[job])
	}
	return out
}

// Job returns the record held of job id; of a job whose record was
// dropped, the record of its end rebuilt from its tombstone.
func (v *View) Job(id string) (market.JobRecord, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if rec, ok := v.jobs[id]; ok {
		return rec, true
	}
	if t, ok := v.dropped[id]; ok {
		return t.Record(), true
	}
	return market.JobRecord{}, false
}

// Dropped returns the tombstone of job id, if its record was dropped.
func (v *View) Dropped(id string) (Tombstone, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.dropped[id]
	return t, ok
}

// PutTombstone keeps t, read back from disk, in place of any record held
// of its job.
func (v *View) PutTombstone(t Tombstone) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.jobs, t.ID)
	delete(v.settling, t.ID)
	v.dropped[t.ID] = t
}

// Expired lists the records held of jobs that ended before before, with
// nothing left live: those Forget would drop.
func (v *View) Expired(before time.Time) []market.JobRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []market.JobRecord
	for _, rec := range v.jobs {
		if expired(rec, before) {
			out = append(out, rec)
		}
	}
	return out
}

func expired(rec market.JobRecord, before time.Time) bool {
	return Ended(rec) && !Settling(rec) && EndedAt(rec).Before(before)
}

// Forget drops the record held of job id if it ended before before with
// nothing left live, and keeps its tombstone, dropped at at (returned),
// in its place. The job is no longer listed as submitted here either.
func (v *View) Forget(id string, before, at time.Time) (Tombstone, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	rec, ok := v.jobs[id]
	if !ok || !expired(rec, before) {
		return Tombstone{}, false
	}
	t := TombstoneOf(rec, at)
	delete(v.jobs, id)
	delete(v.settling, id)
	delete(v.submitted, id)
	v.dropped[id] = t
	return t, true
}

// SubmittedBefore lists the jobs submitted here before before whose
// records this node does not hold, sorted.
func (v *View) SubmittedBefore(before time.Time) []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for id, at := range v.submitted {
		if _, held := v.jobs[id]; !held && at.Before(before) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Unsubmit stops listing job id as submitted here.
func (v *View) Unsubmit(id string) {
	v.mu.Lock()
	delete(v.submitted, id)
	v.mu.Unlock()
}

// All lists every record held, in no order.
func (v *View) All() []market.JobRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]market.JobRecord, 0, len(v.jobs))
	for _, r := range v.jobs {
		out = append(out, r)
	}
	return out
}

// AddSubmitted notes that job id was submitted through this node at at.
func (v *View) AddSubmitted(id string, at time.Time) {
	v.mu.Lock()
	v.submitted[id] = at
	v.mu.Unlock()
}

// Remote lists the jobs submitted here that another node coordinates
// (their records are not held), sorted.
func (v *View) Remote() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for id := range v.submitted {
		if _, ok := v.jobs[id]; !ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// SortJobs orders records newest first, then by ID.
func SortJobs(recs []market.JobRecord) {
	slices.SortFunc(recs, func(a, b market.JobRecord) int {
		if c := b.SubmittedAt.Compare(a.SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Newer reports whether rec supersedes old, a record of the same job. A
// job that ended stays ended: a record of its end supersedes every record
// of it still going, and none of those supersedes it, whatever the terms
// (a coordinator that resumed a stale copy after a restart, or a successor
// that adopted a replica older than the end, holds a higher term than the
// coordinator that recorded the end: ordering by term alone would bring a
// finished job back and run it again). Between two records that both show
// the end, or both not, the coordinator that outranks wins, and at one
// coordinator and term the higher version.
func Newer(rec, old market.JobRecord) bool {
	switch {
	case Ended(old) && !Ended(rec):
		return false
	case Ended(rec) && !Ended(old):
		return true
	}
	if rec.Term == old.Term && rec.Coordinator == old.Coordinator {
		return rec.Version > old.Version
	}
	return market.Outranks(rec.Term, rec.Coordinator, old.Term, old.Coordinator)
}

// Ended reports whether a record shows the job's end (not merely its
// coordinator's letting it go: market.JobMoved).
func Ended(rec market.JobRecord) bool {
	return rec.State.Terminal() && rec.State != market.JobMoved
}
