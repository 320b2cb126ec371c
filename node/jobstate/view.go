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
	// settling indexes the jobs of jobs whose records held show them still
	// needing a coordinator (Settling): what is audited and taken over
	// walks these, not every job the node ever held.
	settling map[string]bool
}

// NewView returns an empty view.
func NewView() *View {
	return &View{jobs: map[string]market.JobRecord{}, submitted: map[string]time.Time{}, settling: map[string]bool{}}
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
// outranks rec's (market.Outranks).
func (v *View) Put(rec market.JobRecord) {
	v.mu.Lock()
	defer v.mu.Unlock()
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

// Job returns the record held of job id.
func (v *View) Job(id string) (market.JobRecord, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	rec, ok := v.jobs[id]
	return rec, ok
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
