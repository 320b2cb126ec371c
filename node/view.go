package node

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// view is what API goroutines read without asking the driver: the records
// of the jobs this node coordinates (a copy of each as the market last
// persisted it) or holds a replica of, and the IDs of jobs submitted
// through this node.
type view struct {
	mu        sync.RWMutex
	jobs      map[string]market.JobRecord
	submitted map[string]time.Time
}

func newView() *view {
	return &view{jobs: map[string]market.JobRecord{}, submitted: map[string]time.Time{}}
}

func (v *view) put(rec market.JobRecord) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.jobs[rec.ID]; ok && market.Outranks(old.Term, old.Coordinator, rec.Term, rec.Coordinator) {
		return
	}
	v.jobs[rec.ID] = rec
}

// putNewer stores rec if it is newer than the copy held: from a
// coordinator that outranks the held copy's (market.Outranks), or from the
// same coordinator and term with a higher version. It reports whether it
// stored it.
func (v *view) putNewer(rec market.JobRecord) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.jobs[rec.ID]; ok && !newer(rec, old) {
		return false
	}
	v.jobs[rec.ID] = rec
	return true
}

// coordinatedBy lists the records held whose coordinator is id.
func (v *view) coordinatedBy(id string) []market.JobRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []market.JobRecord
	for _, r := range v.jobs {
		if r.Coordinator == id {
			out = append(out, r)
		}
	}
	return out
}

func (v *view) job(id string) (market.JobRecord, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	rec, ok := v.jobs[id]
	return rec, ok
}

func (v *view) all() []market.JobRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]market.JobRecord, 0, len(v.jobs))
	for _, r := range v.jobs {
		out = append(out, r)
	}
	return out
}

func (v *view) addSubmitted(id string, at time.Time) {
	v.mu.Lock()
	v.submitted[id] = at
	v.mu.Unlock()
}

// remote lists the jobs submitted here that another node coordinates.
func (v *view) remote() []string {
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

// sortJobs orders records newest first, then by ID.
func sortJobs(recs []market.JobRecord) {
	slices.SortFunc(recs, func(a, b market.JobRecord) int {
		if c := b.SubmittedAt.Compare(a.SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// newer reports whether rec supersedes old, a record of the same job. A
// job that ended stays ended: a record of its end supersedes every record
// of it still going, and none of those supersedes it, whatever the terms
// (a coordinator that resumed a stale copy after a restart, or a successor
// that adopted a replica older than the end, holds a higher term than the
// coordinator that recorded the end: ordering by term alone would bring a
// finished job back and run it again). Between two records that both show
// the end, or both not, the coordinator that outranks wins, and at one
// coordinator and term the higher version.
func newer(rec, old market.JobRecord) bool {
	switch {
	case ended(old) && !ended(rec):
		return false
	case ended(rec) && !ended(old):
		return true
	}
	if rec.Term == old.Term && rec.Coordinator == old.Coordinator {
		return rec.Version > old.Version
	}
	return market.Outranks(rec.Term, rec.Coordinator, old.Term, old.Coordinator)
}

// ended reports whether a record shows the job's end (not merely this
// node's letting it go).
func ended(rec market.JobRecord) bool {
	return rec.State.Terminal() && rec.State != market.JobMoved
}
