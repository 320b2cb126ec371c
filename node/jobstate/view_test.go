package jobstate

import (
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Which of two records of one job a node keeps: an end beats every record
// of the job still going, whatever the terms (a successor that adopted a
// stale replica, or a restarted coordinator that resumed its own old
// record, holds a higher term than the coordinator that recorded the end);
// otherwise the coordinator that outranks, then the version.
func TestNewerKeepsAnEndedJobEnded(t *testing.T) {
	rec := func(state market.JobState, term uint64, coord string, version uint64) market.JobRecord {
		return market.JobRecord{ID: "j1", State: state, Term: term, Coordinator: coord, Version: version}
	}
	for _, c := range []struct {
		name     string
		rec, old market.JobRecord
		want     bool
	}{
		{"an end at term 1 beats a stale copy running at term 4", rec(market.JobSucceeded, 1, "p", 113), rec(market.JobRunning, 4, "q", 2), true},
		{"a copy running at term 4 does not replace the end at term 1", rec(market.JobRunning, 4, "q", 2), rec(market.JobSucceeded, 1, "p", 113), false},
		{"a cancel beats a running copy of the same coordinator's older version", rec(market.JobCancelled, 2, "p", 5), rec(market.JobRunning, 2, "p", 9), true},
		{"a record of the job moving on is no end", rec(market.JobMoved, 5, "q", 1), rec(market.JobRunning, 2, "p", 9), true},
		{"the ended record is not replaced by a move", rec(market.JobMoved, 5, "q", 1), rec(market.JobFailed, 2, "p", 9), false},
		{"a higher term wins between two records still going", rec(market.JobRunning, 3, "a", 1), rec(market.JobRunning, 2, "z", 50), true},
		{"the greater peer ID wins at one term", rec(market.JobRunning, 2, "z", 1), rec(market.JobRunning, 2, "a", 50), true},
		{"the higher version wins at one coordinator and term", rec(market.JobRunning, 2, "a", 7), rec(market.JobRunning, 2, "a", 6), true},
		{"the same version is not newer", rec(market.JobRunning, 2, "a", 7), rec(market.JobRunning, 2, "a", 7), false},
		{"between two ends the coordinator that outranks wins", rec(market.JobSucceeded, 3, "a", 1), rec(market.JobSucceeded, 2, "z", 50), true},
		{"a live record of the same coordinator and term does not undo its end", rec(market.JobRunning, 2, "a", 9), rec(market.JobCancelled, 2, "a", 8), false},
		{"a lower version at one coordinator and term is not newer", rec(market.JobRunning, 2, "a", 6), rec(market.JobRunning, 2, "a", 7), false},
		{"the same coordinator at a higher term wins whatever the version", rec(market.JobRunning, 3, "a", 1), rec(market.JobRunning, 2, "a", 50), true},
		{"a lower term loses whatever the version", rec(market.JobRunning, 1, "z", 99), rec(market.JobRunning, 2, "a", 1), false},
		{"between two ends at one coordinator and term the higher version wins", rec(market.JobFailed, 2, "a", 8), rec(market.JobCancelled, 2, "a", 7), true},
	} {
		if got := Newer(c.rec, c.old); got != c.want {
			t.Errorf("%s: Newer = %v, want %v", c.name, got, c.want)
		}
	}
}

// Only a record of the job's end is an end: not a live state, and not a
// node's letting the job go to another coordinator (JobMoved).
func TestEnded(t *testing.T) {
	for _, c := range []struct {
		state market.JobState
		want  bool
	}{
		{market.JobPending, false},
		{market.JobBidding, false},
		{market.JobPlacing, false},
		{market.JobRunning, false},
		{market.JobRerouting, false},
		{market.JobSucceeded, true},
		{market.JobFailed, true},
		{market.JobCancelled, true},
		{market.JobMoved, false},
	} {
		if got := Ended(market.JobRecord{ID: "j1", State: c.state}); got != c.want {
			t.Errorf("Ended(%s) = %v, want %v", c.state, got, c.want)
		}
	}
}

// Put keeps the copy of a coordinator that outranks the one offered, and
// otherwise takes the new copy, whatever its version (the driver puts
// what it wrote); PutNewer takes only a newer copy (Newer) and says so.
func TestViewPut(t *testing.T) {
	v := NewView()
	v.Put(market.JobRecord{ID: "j1", Coordinator: "b", Term: 2, Version: 5})
	v.Put(market.JobRecord{ID: "j1", Coordinator: "a", Term: 2, Version: 9})
	if got, _ := v.Job("j1"); got.Coordinator != "b" {
		t.Errorf("Put replaced the outranking coordinator's copy: %+v", got)
	}
	v.Put(market.JobRecord{ID: "j1", Coordinator: "b", Term: 2, Version: 3})
	if got, _ := v.Job("j1"); got.Version != 3 {
		t.Errorf("Put of the same coordinator's copy kept version %d, want 3", got.Version)
	}
	if v.PutNewer(market.JobRecord{ID: "j1", Coordinator: "b", Term: 2, Version: 3}) {
		t.Errorf("PutNewer stored the same version again")
	}
	if !v.PutNewer(market.JobRecord{ID: "j1", Coordinator: "b", Term: 2, Version: 4}) {
		t.Errorf("PutNewer refused a higher version")
	}
	if !v.PutNewer(market.JobRecord{ID: "j1", Coordinator: "a", Term: 1, Version: 1, State: market.JobSucceeded}) {
		t.Errorf("PutNewer refused an end at a lower term")
	}
	if v.PutNewer(market.JobRecord{ID: "j1", Coordinator: "c", Term: 5, Version: 1, State: market.JobRunning}) {
		t.Errorf("PutNewer let a live copy replace the end")
	}
	if got, ok := v.Job("j1"); !ok || got.State != market.JobSucceeded {
		t.Errorf("held %+v, want the end", got)
	}
	if !v.PutNewer(market.JobRecord{ID: "j2", Coordinator: "c", Term: 1, Version: 1}) {
		t.Errorf("PutNewer refused the first copy of a job")
	}
}

// The view lists what it holds: all of it, by coordinator, and the jobs
// submitted here whose records it does not hold (sorted).
func TestViewLists(t *testing.T) {
	v := NewView()
	v.Put(market.JobRecord{ID: "j1", Coordinator: "self"})
	v.Put(market.JobRecord{ID: "j2", Coordinator: "other"})
	v.Put(market.JobRecord{ID: "j3", Coordinator: "self"})
	ids := func(recs []market.JobRecord) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	if got := ids(v.All()); !slices.Equal(got, []string{"j1", "j2", "j3"}) {
		t.Errorf("All = %v", got)
	}
	if got := ids(v.SettlingCoordinatedBy("self")); !slices.Equal(got, []string{"j1", "j3"}) {
		t.Errorf("SettlingCoordinatedBy(self) = %v", got)
	}
	if got := v.SettlingCoordinatedBy("nobody"); len(got) != 0 {
		t.Errorf("SettlingCoordinatedBy(nobody) = %v", got)
	}
	if _, ok := v.Job("j9"); ok {
		t.Errorf("Job found a job never put")
	}
	now := time.Unix(1000, 0)
	for _, id := range []string{"r2", "j1", "r1"} {
		v.AddSubmitted(id, now)
	}
	if got := v.Remote(); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("Remote = %v, want r1 r2 (j1 is held here)", got)
	}
}

// Jobs are listed newest first, ties by ID.
func TestSortJobs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	recs := []market.JobRecord{
		{ID: "b", SubmittedAt: t0},
		{ID: "c", SubmittedAt: t0.Add(time.Second)},
		{ID: "a", SubmittedAt: t0},
		{ID: "d", SubmittedAt: t0.Add(-time.Second)},
	}
	SortJobs(recs)
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if want := []string{"c", "a", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// The view indexes the jobs still needing a coordinator (Settling): a job
// leaves the index when a record of its end with nothing live is stored,
// stays while an ended job's attempts still stop, and never comes back for
// a stale copy the view refuses.
func TestViewIndexesTheJobsStillSettling(t *testing.T) {
	v := NewView()
	running := market.JobRecord{ID: "j1", Coordinator: "c", Term: 1, Version: 3, State: market.JobRunning,
		Placements: []market.Placement{{Share: 0, Epoch: 1, Node: "s", State: market.PlacementRunning}}}
	v.Put(running)
	v.Put(market.JobRecord{ID: "j2", Coordinator: "c", Term: 1, Version: 1, State: market.JobPending})
	v.Put(market.JobRecord{ID: "moved", Coordinator: "c", Term: 1, Version: 1, State: market.JobMoved})
	settling := func() []string {
		var out []string
		for _, r := range v.Settling() {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	if got := settling(); !slices.Equal(got, []string{"j1", "j2"}) {
		t.Fatalf("Settling = %v, want j1 j2", got)
	}
	stopping := running
	stopping.Version, stopping.State = 4, market.JobCancelled // its attempt still stops
	if !v.PutNewer(stopping) || !slices.Equal(settling(), []string{"j1", "j2"}) {
		t.Errorf("a cancelled job whose attempt still stops left the index: %v", settling())
	}
	ended := stopping
	ended.Version = 5
	ended.Placements = []market.Placement{{Share: 0, Epoch: 1, Node: "s", State: market.PlacementStopped}}
	if !v.PutNewer(ended) || !slices.Equal(settling(), []string{"j2"}) {
		t.Errorf("after the end: Settling = %v, want j2", settling())
	}
	if v.PutNewer(running) || !slices.Equal(settling(), []string{"j2"}) {
		t.Errorf("a stale copy of the running job came back: Settling = %v", settling())
	}
	if got := v.SettlingCoordinatedBy("c"); len(got) != 1 || got[0].ID != "j2" {
		t.Errorf("SettlingCoordinatedBy(c) = %v", got)
	}
	if len(v.All()) != 3 {
		t.Errorf("All holds %d records, want 3: the index drops nothing from the view", len(v.All()))
	}
}

// Forget drops a record only once its job ended before the cutoff with
// nothing live, and keeps a tombstone in its place: Job rebuilds the end
// from it, and no record of the job is stored again, stale or not.
func TestForgetKeepsATombstoneAndNothingComesBack(t *testing.T) {
	v := NewView()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	code := 0
	ended := market.JobRecord{ID: "j1", Spec: market.JobSpec{ID: "j1", Name: "train", Owner: "alice", Cards: 2, Command: []string{"x"}}, Cards: 2, Coordinator: "c", Term: 2, Version: 9,
		State: market.JobSucceeded, SubmittedAt: t0, EndedAt: t0.Add(time.Hour), ExitCode: &code, CostCNY: 1.5,
		Placements: []market.Placement{{Share: 0, Epoch: 1, Node: "s", State: market.PlacementExited}}}
	live := market.JobRecord{ID: "j2", Coordinator: "c", Term: 1, Version: 3, State: market.JobRunning, SubmittedAt: t0,
		Placements: []market.Placement{{Share: 0, Epoch: 1, Node: "s", State: market.PlacementRunning}}}
	v.Put(ended)
	v.Put(live)
	v.AddSubmitted("j1", t0)
	if _, ok := v.Forget("j1", t0.Add(time.Hour), t0.Add(2*time.Hour)); ok {
		t.Errorf("Forget dropped a job that ended at the cutoff, not before it")
	}
	if got := v.Expired(t0.Add(48 * time.Hour)); len(got) != 1 || got[0].ID != "j1" {
		t.Errorf("Expired = %v, want j1 alone (j2 runs)", got)
	}
	if _, ok := v.Forget("j2", t0.Add(48*time.Hour), t0.Add(48*time.Hour)); ok {
		t.Errorf("Forget dropped a running job")
	}
	tomb, ok := v.Forget("j1", t0.Add(48*time.Hour), t0.Add(49*time.Hour))
	if !ok || tomb.Version != 9 || tomb.Owner != "alice" || !tomb.EndedAt.Equal(ended.EndedAt) || tomb.CostCNY != 1.5 {
		t.Fatalf("Forget: %+v %v", tomb, ok)
	}
	rec, ok := v.Job("j1")
	if !ok || rec.State != market.JobSucceeded || rec.Reason != DroppedReason || rec.Spec.Owner != "alice" || rec.Version != 9 || *rec.ExitCode != 0 ||
		rec.Spec.Name != "train" || rec.Cards != 2 || rec.Spec.Cards != 2 {
		t.Errorf("Job after Forget: %+v %v", rec, ok)
	}
	if len(v.All()) != 1 || len(v.Remote()) != 0 {
		t.Errorf("All %d records, Remote %v: want j2 alone and nothing submitted", len(v.All()), v.Remote())
	}
	stale := ended
	stale.State, stale.Version, stale.Term = market.JobRunning, 5, 3
	if v.PutNewer(stale) || v.PutNewer(ended) {
		t.Errorf("PutNewer stored a record of a dropped job")
	}
	v.Put(stale)
	if rec, _ := v.Job("j1"); rec.Reason != DroppedReason {
		t.Errorf("Put brought back a record of a dropped job: %+v", rec)
	}
	w := NewView()
	w.Put(stale)
	w.PutTombstone(tomb)
	if rec, _ := w.Job("j1"); rec.Reason != DroppedReason || len(w.Settling()) != 0 {
		t.Errorf("a tombstone read back after the record: %+v, settling %d", rec, len(w.Settling()))
	}
}
