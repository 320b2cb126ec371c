package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/libp2p/go-libp2p/core/peer"
)

// gatherJobs keeps the owner's jobs only, the newest copy of each, and
// names the members that failed or did not answer by the deadline; it
// asks at most listParallel at once.
func TestGatherJobsFoldsCopiesAndNamesTheSilent(t *testing.T) {
	alice, bob := testOwner(1).ID(), testOwner(2).ID()
	rec := func(id string, who string, state market.JobState, version uint64) market.JobRecord {
		return market.JobRecord{ID: id, Spec: market.JobSpec{AllowSimulated: true, ID: id, Owner: who}, State: state, Term: 1, Coordinator: "c1", Version: version,
			SubmittedAt: time.Unix(int64(len(id)*1000)+int64(version), 0)}
	}
	held := []market.JobRecord{
		rec("j-running", string(alice), market.JobRunning, 3),
		rec("j-bob", string(bob), market.JobRunning, 1),
	}
	var targets []peer.ID
	for i := range 20 {
		targets = append(targets, peer.ID(fmt.Sprintf("member-%02d", i)))
	}
	var mu sync.Mutex
	inFlight, most := 0, 0
	call := func(ctx context.Context, to peer.ID) ([]market.JobRecord, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		switch to {
		case targets[0]: // a newer copy of a held job, and a job held nowhere else
			return []market.JobRecord{rec("j-running", string(alice), market.JobSucceeded, 9), rec("j-far", string(alice), market.JobPending, 1)}, nil
		case targets[1]: // an older copy, and another owner's job it should not have sent
			return []market.JobRecord{rec("j-running", string(alice), market.JobRunning, 2), rec("j-bob2", string(bob), market.JobRunning, 1)}, nil
		case targets[2]:
			return nil, errors.New("connection refused")
		case targets[3]: // silent until the deadline
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, nil
	}
	start := time.Now()
	list := gatherJobs(context.Background(), alice, held, targets, call)
	took := time.Since(start)
	var got []string
	for _, r := range list.Jobs {
		got = append(got, fmt.Sprintf("%s:%s:%d", r.ID, r.State, r.Version))
	}
	slices.Sort(got)
	if want := []string{"j-far:pending:1", "j-running:succeeded:9"}; !slices.Equal(got, want) {
		t.Errorf("jobs %v, want %v", got, want)
	}
	if want := []string{targets[2].String(), targets[3].String()}; !slices.Equal(list.Unanswered, want) {
		t.Errorf("unanswered %v, want the refusing and the silent member %v", list.Unanswered, want)
	}
	if most > listParallel {
		t.Errorf("%d calls at once, want at most %d", most, listParallel)
	}
	if took > listTimeout+2*time.Second {
		t.Errorf("the gather took %v, past its %v deadline", took, listTimeout)
	}
	// A caller whose own context ends first is not held up.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	list = gatherJobs(ctx, alice, nil, targets[3:4], call)
	if time.Since(start) > time.Second || len(list.Unanswered) != 1 {
		t.Errorf("with a 100ms context: %v, unanswered %v", time.Since(start), list.Unanswered)
	}
}

// On a node that joined after the jobs were submitted, and that never
// coordinates (it holds no record), the owner's jobs are listed all the
// same, gathered from the members that hold them; another owner sees none
// of them; a member that cannot be reached is named.
func TestJobsListedFromAFreshNode(t *testing.T) {
	alice, bob := testOwner(1), testOwner(2)
	sm := newSimMeshWith(t, withAPI(nil), "", "", "a100-80g:2")
	sm.neverCoordinate(sm.nodes[2])
	sm.waitBook(sm.nodes[0], 2)
	ctx := context.Background()
	var ids []string
	for i := range 4 {
		rec, err := apiClient(t, sm.nodes[i%2], alice).Submit(ctx, market.JobSpec{AllowSimulated: true, Cards: 1, MaxPriceCNY: 20, Command: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	slices.Sort(ids)
	for _, id := range ids {
		waitState(t, sm.nodes[0], id, 30*time.Second, market.JobSucceeded)
	}

	fresh := sm.add(3, "")
	if err := fresh.SetCoordinator(ctx, CoordinatorNever); err != nil {
		t.Fatal(err)
	}
	sm.waitMembers(4)
	sm.agreeCoordinators(map[*Node]bool{sm.nodes[2]: true, fresh: true})
	// The simulated network links two nodes when membership first has
	// them talk; a real one can dial any member at once.
	for _, n := range sm.nodes[:3] {
		if err := sm.net.Connect(fresh.ID(), n.ID()); err != nil {
			t.Fatal(err)
		}
	}
	if held := fresh.view.All(); len(held) != 0 {
		t.Fatalf("the fresh node holds %d records; the test needs one that holds none", len(held))
	}
	list, err := apiClient(t, fresh, alice).JobList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list.Jobs {
		got = append(got, r.ID)
		if r.State != market.JobSucceeded {
			t.Errorf("job %s listed %s, want its newest record: succeeded", r.ID, r.State)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) || list.Asked != 3 || len(list.Unanswered) != 0 {
		t.Errorf("alice's jobs through the fresh node: %v (asked %d, unanswered %v); want %v from 3 nodes", got, list.Asked, list.Unanswered, ids)
	}
	if jobs, err := apiClient(t, fresh, bob).Jobs(ctx); err != nil || len(jobs) != 0 {
		t.Errorf("bob's jobs through the fresh node: %d, %v; want none", len(jobs), err)
	}
	if jobs, err := apiClient(t, fresh, nil).Jobs(ctx); err != nil || len(jobs) != 0 {
		t.Errorf("no owner's jobs: %d, %v; want none", len(jobs), err)
	}
	// Between nodes a list without the owner's proof, or with a proof of
	// another request, is refused.
	if err := callRaw(fresh, sm.nodes[0], kindJobsList, []byte("{}")); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("an unsealed list: %v", err)
	}
	sealed := fresh.sealCall(ctx, kindCancel, []byte(`"`+ids[0]+`"`), ids[0])
	if err := callRaw(fresh, sm.nodes[0], kindJobsList, sealed); !isStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "not GET /v1/jobs") {
		t.Errorf("a cancel's proof replayed as a list: %v", err)
	}

	// One coordinator cut off from the fresh node (the others still reach
	// it, so membership keeps it alive): the list comes from the other,
	// which holds every record as a replica, and names the silent one.
	sm.net.Cut(fresh.ID(), sm.nodes[1].ID())
	list, err = apiClient(t, fresh, alice).JobList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := fresh.Mesh().Member(sm.nodes[1].ID()); !ok || m.State == mesh.StateDead {
		t.Fatalf("membership declared the cut-off coordinator dead before the list (%v): the test needs it asked", m.State)
	}
	if len(list.Jobs) != len(ids) || !slices.Equal(list.Unanswered, []string{sm.nodes[1].ID().String()}) {
		t.Errorf("with a coordinator cut off: %d jobs, unanswered %v; want %d and %s", len(list.Jobs), list.Unanswered, len(ids), sm.nodes[1].ID())
	}
}
