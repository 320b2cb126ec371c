package jobstate

import (
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Tombstone is what a node keeps of a job whose record it dropped, a
// while after the job ended (View.Forget): that it ended, how, and under
// which coordinator, term and version. Measured on the records of a
// bench run: about 0.5 KB of heap and 0.4 KB on disk, against 4 KB and
// 2.8 KB for the record. A node keeps it for good: a stale copy of the job
// (a replica held by a node away since, a submission retried with the
// same ID) must find the end, or the job would run again.
type Tombstone struct {
	ID          string          `json:"id"`
	Name        string          `json:"name,omitempty"`
	Owner       string          `json:"owner,omitempty"`
	Cards       int             `json:"cards"`
	Coordinator string          `json:"coordinator"`
	State       market.JobState `json:"state"`
	Term        uint64          `json:"term"`
	Version     uint64          `json:"version"`
	SubmittedAt time.Time       `json:"submitted_at"`
	EndedAt     time.Time       `json:"ended_at"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	CostCNY     float64         `json:"cost_cny"`
	CardSeconds float64         `json:"card_seconds"`
	// DroppedAt is when this node dropped the record.
	DroppedAt time.Time `json:"dropped_at"`
}

// TombstoneOf is what is kept of rec, dropped at at.
func TombstoneOf(rec market.JobRecord, at time.Time) Tombstone {
	return Tombstone{ID: rec.ID, Name: rec.Spec.Name, Owner: rec.Spec.Owner, Cards: rec.Spec.Cards, Coordinator: rec.Coordinator, State: rec.State, Term: rec.Term,
		Version: rec.Version, SubmittedAt: rec.SubmittedAt, EndedAt: EndedAt(rec), ExitCode: rec.ExitCode,
		CostCNY: rec.CostCNY, CardSeconds: rec.CardSeconds, DroppedAt: at}
}

// DroppedReason is the reason a record rebuilt from a tombstone gives.
const DroppedReason = "ended; its record was dropped after the node's --keep-jobs, and only its end is kept"

// Record rebuilds the record of the job's end: every check that finds a
// job ended (Ended, Newer, a claim, a retried submission) finds it so.
func (t Tombstone) Record() market.JobRecord {
	return market.JobRecord{ID: t.ID, Spec: market.JobSpec{ID: t.ID, Name: t.Name, Owner: t.Owner, Cards: t.Cards}, Cards: t.Cards, Coordinator: t.Coordinator,
		State: t.State, Reason: DroppedReason, Term: t.Term, Version: t.Version, SubmittedAt: t.SubmittedAt,
		EndedAt: t.EndedAt, ExitCode: t.ExitCode, CostCNY: t.CostCNY, CardSeconds: t.CardSeconds, Placements: []market.Placement{}}
}

// EndedAt is when rec's job ended: its EndedAt, else (a job that ended
// before it ran, in a record without it) its SubmittedAt.
func EndedAt(rec market.JobRecord) time.Time {
	if rec.EndedAt.IsZero() {
		return rec.SubmittedAt
	}
	return rec.EndedAt
}
