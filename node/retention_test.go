package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/gpumesh/gpumesh/node/store"
)

// Every node that holds the record of a job that ended KeepJobs ago drops
// it and keeps a tombstone: the job reads as ended (and billed) through
// any node, a submission of its ID is refused, a copy from before its end
// is refused, a restart keeps the tombstone, and a job still running is
// never dropped.
func TestRecordsOfJobsThatEndedLongAgoAreDropped(t *testing.T) {
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(nil), "", "a100-80g:2", "", "")
	runner, entry := sm.nodes[1], sm.nodes[3]
	sm.neverCoordinate(runner, entry) // entry holds no records: it lists what went through it by asking
	sm.waitBook(entry, 2)
	c := apiClient(t, entry, alice)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "old", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", "sleep 0.3"}}
	if _, err := c.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "live", Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	first, err := c.Job(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	coord := sm.byID(first.Coordinator)
	running := waitState(t, coord, "old", 30*time.Second, market.JobRunning, market.JobSucceeded)
	ended := waitState(t, coord, "old", 30*time.Second, market.JobSucceeded, market.JobFailed)
	if live, err := c.Job(ctx, "live"); err != nil {
		t.Fatal(err)
	} else {
		waitState(t, sm.byID(live.Coordinator), "live", 30*time.Second, market.JobRunning)
	}
	if ended.State != market.JobSucceeded || ended.CostCNY <= 0 {
		t.Fatalf("old: %s, cost %v", ended.State, ended.CostCNY)
	}
	var holders []*Node
	eventually(t, 10*time.Second, "the coordinator and its replicas hold the end", func() bool {
		holders = nil
		for _, n := range sm.nodes {
			rec, ok := n.view.Job("old")
			if ok && !jobstate.Ended(rec) {
				return false
			}
			if ok {
				holders = append(holders, n)
			}
		}
		return len(holders) == 2 // the coordinator and the other node that may coordinate
	})

	// Not yet: the job ended less than KeepJobs ago.
	for _, n := range holders {
		n.forgetEnded(time.Now())
		if _, gone := n.view.Dropped("old"); gone {
			t.Fatalf("%s dropped a record that ended just now", n.ID().ShortString())
		}
	}
	later := time.Now().Add(coord.cfg.KeepJobs + time.Minute)
	for _, n := range holders {
		n.forgetEnded(later)
		if _, gone := n.view.Dropped("old"); !gone {
			t.Errorf("%s kept the record of a job that ended KeepJobs ago", n.ID().ShortString())
		}
		var onDisk market.JobRecord
		if err := n.store.Get(store.Jobs, "old", &onDisk); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s still has the record on disk (%v)", n.ID().ShortString(), err)
		}
		var tomb jobstate.Tombstone
		if err := n.store.Get(store.Tombstones, "old", &tomb); err != nil || tomb.State != market.JobSucceeded || tomb.Version != ended.Version {
			t.Errorf("%s's tombstone on disk: %+v %v", n.ID().ShortString(), tomb, err)
		}
		if _, ok := n.view.Job("live"); ok {
			if _, gone := n.view.Dropped("live"); gone {
				t.Errorf("%s dropped the record of a job still running", n.ID().ShortString())
			}
		}
	}
	if _, held := coord.mk.Job("old"); held {
		t.Errorf("the coordinator's market still holds the job")
	}
	for _, n := range sm.nodes {
		if rec, ok := n.view.Job("live"); ok && rec.Coordinator == n.self {
			if _, held := n.mk.Job("live"); !held {
				t.Errorf("the coordinator's market let go of the running job")
			}
		}
	}

	// The entry node stops listing what it no longer needs to (a job no
	// node knows, ended jobs), never a job still running.
	entry.view.AddSubmitted("ghost", time.Now().Add(-100*time.Hour))
	entry.forgetSubmitted(later.Add(-coord.cfg.KeepJobs))
	if remote := entry.view.Remote(); slices.Contains(remote, "ghost") || !slices.Contains(remote, "live") {
		t.Errorf("the entry node lists %v as submitted through it; want live (running), not ghost (known to none)", remote)
	}
	listed, err := c.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range listed {
		ids = append(ids, r.ID)
	}
	if !slices.Contains(ids, "live") || slices.Contains(ids, "ghost") {
		t.Errorf("gpumesh jobs through the entry node lists %v; want live, not ghost", ids)
	}

	// It reads as ended, with its bill, through any node.
	got, err := c.Job(ctx, "old")
	if err != nil || got.State != market.JobSucceeded || got.CostCNY != ended.CostCNY || got.Reason != jobstate.DroppedReason {
		t.Errorf("job old through the API: %s %v %q %v", got.State, got.CostCNY, got.Reason, err)
	}
	// Its ID runs once.
	_, err = c.Submit(ctx, spec)
	if !isAPIStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), "its record was dropped after --keep-jobs: submit it with a new ID") {
		t.Errorf("a submission of the dropped job's ID: %v", err)
	}
	// A copy from before the end, sent by its coordinator, is refused.
	stale, _ := json.Marshal(running)
	for _, n := range holders {
		if n == coord {
			continue
		}
		_ = callRaw(coord, n, kindReplicate, stale)
		if rec, _ := n.view.Job("old"); rec.State != market.JobSucceeded {
			t.Errorf("%s took a copy of the job from before its end: %s", n.ID().ShortString(), rec.State)
		}
	}

	// A restart keeps the tombstone, not the record.
	i := slices.Index(sm.nodes, coord)
	cfg := coord.cfg
	coord.Close()
	sm.nodes[i] = nil
	restarted, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sm.nodes[i] = restarted
	if _, gone := restarted.view.Dropped("old"); !gone {
		t.Errorf("the restarted coordinator lost the tombstone")
	}
	if rec, _ := restarted.view.Job("old"); rec.State != market.JobSucceeded || rec.Reason != jobstate.DroppedReason {
		t.Errorf("after a restart the job reads %s %q", rec.State, rec.Reason)
	}
}

// A node with a long history (an upgrade from a release that kept every
// record) drops all of it, a batch per driver turn.
func TestALongHistoryIsDroppedInBatches(t *testing.T) {
	sm := newSimMeshWith(t, nil, "")
	n := sm.nodes[0]
	ended := time.Now().Add(-2 * n.cfg.KeepJobs)
	const jobs = 2*forgetPerTurn + 500
	var ops []store.Op
	var recs []market.JobRecord
	for i := range jobs {
		rec := market.JobRecord{ID: fmt.Sprintf("old-%04d", i), Coordinator: "12D3KooWElsewhere", State: market.JobSucceeded, Term: 1, Version: 7,
			SubmittedAt: ended.Add(-time.Hour), EndedAt: ended}
		recs = append(recs, rec)
		ops = append(ops, store.Put(store.Jobs, rec.ID, rec))
	}
	if err := n.storeApply(ops); err != nil { // on disk first, as a node writes what it holds
		t.Fatal(err)
	}
	for _, rec := range recs {
		n.view.Put(rec)
	}
	n.forgetEnded(time.Now())
	if left := n.view.Expired(time.Now().Add(-n.cfg.KeepJobs)); len(left) != 0 {
		t.Errorf("%d records left to drop", len(left))
	}
	records, tombs := 0, 0
	_ = n.store.ForEach(store.Jobs, func(string, []byte) error { records++; return nil })
	_ = n.store.ForEach(store.Tombstones, func(string, []byte) error { tombs++; return nil })
	if records != 0 || tombs != jobs {
		t.Errorf("on disk: %d records, %d tombstones; want 0 and %d", records, tombs, jobs)
	}
}
