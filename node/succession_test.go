package node

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A member ranked above the successor in the job's HRW list that never got
// the record (here it became a coordinator after the job was submitted,
// and its link to the coordinator is cut, as a replica fails to reach a
// node that has just restarted) must not hold the job up: the next member
// that holds the record takes the job over.
func TestSuccessorPassesOverAMemberWithoutTheRecord(t *testing.T) {
	sm := newSimMesh(t, "", "", "", "a100-80g:1")
	runner := sm.nodes[3]
	sm.neverCoordinate(runner)
	for _, n := range sm.nodes[:3] { // any of them may coordinate the job
		sm.waitBook(n, 1)
	}
	coords := peerIDs(sm.nodes[:3])
	// A job whose HRW list is [coordinator, skipped, successor].
	id := firstID("passed-over", func(id string) bool { return sm.byID(market.Coordinators(id, coords, 1)[0]) != runner })
	order := market.Coordinators(id, coords, 3)
	coord, skipped, successor := sm.byID(order[0]), sm.byID(order[1]), sm.byID(order[2])
	// The submission is acknowledged once the job's group of the moment
	// (the coordinator and the successor) holds the record; only once the
	// job runs does the skipped member join the group, out of the
	// coordinator's reach.
	sm.neverCoordinate(runner, skipped)
	if _, err := successor.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	// Running before the skipped member joins: an award leaves only once
	// every replica of the list as it is holds the record (commit.go),
	// and a member the coordinator cannot reach would hold it back.
	rec := waitState(t, runner, id, 20*time.Second, market.JobRunning)
	if rec.Coordinator != coord.ID().String() {
		t.Fatalf("coordinated by %s, want %s", rec.Coordinator, coord.ID())
	}
	sm.net.Cut(coord.ID(), skipped.ID())
	if err := skipped.SetCoordinator(context.Background(), CoordinatorAuto); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the successor counts the skipped member among the job's group", func() bool {
		return slices.Equal(successor.coordinators(id, 3), []peer.ID{coord.ID(), skipped.ID(), successor.ID()})
	})
	eventually(t, 10*time.Second, "the successor holds a replica", func() bool {
		r, ok := successor.view.Job(id)
		return ok && r.State == market.JobRunning
	})
	if _, ok := skipped.view.Job(id); ok {
		t.Fatal("the member cut off from the coordinator holds a replica; the test needs it not to")
	}

	start := time.Now()
	if err := sm.net.Crash(coord.ID()); err != nil {
		t.Fatal(err)
	}
	var after market.JobRecord
	eventually(t, 5*time.Second, "the successor that holds the record takes the job over", func() bool {
		r, err := runner.Job(context.Background(), id)
		after = r
		return err == nil && r.Coordinator == successor.ID().String()
	})
	t.Logf("taken over in %v at term %d (the member passed over counts once more)", time.Since(start).Round(time.Millisecond), after.Term)
	if after.Term != rec.Term+2 {
		t.Errorf("term %d after passing over one member, want %d", after.Term, rec.Term+2)
	}
	waitState(t, runner, id, 10*time.Second, market.JobRunning)
	if _, err := runner.Cancel(context.Background(), id); err != nil {
		t.Fatalf("cancel through the successor: %v", err)
	}
	waitState(t, runner, id, 10*time.Second, market.JobCancelled)
}

// A coordinator cut off together with its runner keeps the job going on
// its side while the other side's successor adopts it under a higher term
// and runs the share elsewhere. When the partition heals, the successor's
// replica reaches the old coordinator, which lets the job go: its runner
// is stopped, and the share does not run a third time.
func TestCoordinatorCutOffWithItsRunnerYieldsAfterTheHeal(t *testing.T) {
	sm := newSimMesh(t, "", "", "", "a100-80g:1", "a100-80g:1")
	sm.neverCoordinate(sm.nodes[3], sm.nodes[4])
	for _, n := range sm.nodes[:3] {
		sm.waitBook(n, 2)
	}
	coords := peerIDs(sm.nodes[:3])
	id := "cut-with-its-runner"
	order := market.Coordinators(id, coords, 3)
	coord, successor := sm.byID(order[0]), sm.byID(order[1])
	if _, err := sm.nodes[3].Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, id, 20*time.Second, market.JobRunning)
	first, _ := livePlacement(rec)
	runner, other := sm.nodes[3], sm.nodes[4]
	if runner.ID().String() != first.Node {
		runner, other = other, runner
	}
	eventually(t, 10*time.Second, "the successor holds a replica", func() bool {
		r, ok := successor.view.Job(id)
		return ok && r.State == market.JobRunning
	})

	// The runner first: cut off from the majority before its coordinator
	// is, it cannot hear the successor that adopts the job at once.
	minority := []*Node{runner, coord}
	var majority []*Node
	for _, n := range sm.nodes {
		if n != coord && n != runner {
			majority = append(majority, n)
		}
	}
	for _, a := range minority {
		for _, b := range majority {
			sm.net.Cut(a.ID(), b.ID())
		}
	}
	eventually(t, 20*time.Second, "the majority runs the share again", func() bool { return len(other.exec.Running()) == 1 })
	if len(runner.exec.Running()) != 1 {
		t.Fatalf("the minority's runner stopped while it could still renew with its coordinator")
	}
	for _, a := range minority {
		for _, b := range majority {
			sm.net.Heal(a.ID(), b.ID())
		}
	}
	healed := time.Now()
	eventually(t, 20*time.Second, "the old coordinator lets the job go and its runner stops", func() bool {
		return len(runner.exec.Running()) == 0
	})
	t.Logf("after the heal, the minority's copy stopped in %v", time.Since(healed).Round(time.Millisecond))
	// The old coordinator must not place the share again once its runner
	// has stopped renewing with it (LostAfter, 2 s): watch a while longer.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if n := len(runner.exec.Running()) + len(other.exec.Running()); n > 1 {
			t.Fatalf("%d attempts of the share run after the heal, want 1", n)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	final := waitState(t, successor, id, 10*time.Second, market.JobRunning)
	if final.Term <= rec.Term {
		t.Errorf("the job is coordinated at term %d after the heal, want above %d", final.Term, rec.Term)
	}
}

// A runner that holds a replica of its own job (it ranks among the job's
// coordinators) and is cut off alone sees every other member die. It must
// not adopt the job — that would keep its own attempt running while the
// rest of the mesh places the share again — but fence itself: it cannot
// reach a majority of the job's coordinator group.
func TestRunnerCutOffAloneWithAReplicaFencesItself(t *testing.T) {
	// Three coordinator-eligible nodes: every job's group of three is all
	// of them, so the card holder holds a replica of each job it does not
	// coordinate.
	sm := newSimMesh(t, "", "", "a100-80g:1")
	holder := sm.nodes[2]
	for _, n := range sm.nodes {
		sm.waitBook(n, 1)
	}
	sm.agreeCoordinators(nil)
	coords := peerIDs(sm.nodes)
	id := firstID("alone", func(id string) bool { return market.Coordinators(id, coords, 1)[0] != holder.ID().String() })
	if _, err := sm.nodes[0].Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, sm.nodes[0], id, 20*time.Second, market.JobRunning)
	eventually(t, 10*time.Second, "the runner holds a replica of its job", func() bool {
		r, ok := holder.view.Job(id)
		return ok && r.State == market.JobRunning
	})
	// A second card, for the share to move to.
	spare := sm.add(3, "a100-80g:1")
	sm.waitMembers(4)
	sm.neverCoordinate(spare)
	for _, n := range sm.nodes[:2] {
		sm.waitBook(n, 2)
	}

	// What the runner saw, to tell on a failure whether it took the job
	// over because of the cut or of a member it wrongly lost before it.
	seen, unsubscribe := holder.events.subscribe()
	var timeline []api.Event
	var seenWG sync.WaitGroup
	seenWG.Go(func() {
		for ev := range seen {
			timeline = append(timeline, ev)
		}
	})
	defer func() {
		unsubscribe()
		seenWG.Wait()
	}()
	if q := holder.quorumOthers(); q != 1 {
		t.Fatalf("before the cut the runner counts %d other members its claims need, want 1 (a group of three)", q)
	}
	// Cut off from all at once: cut link by link, the runner could still
	// reach a majority of the group while the first links go, and adopt.
	cut := time.Now()
	sm.net.Isolate(holder.ID())
	eventually(t, 15*time.Second, "the cut-off runner stops its attempt", func() bool { return len(holder.exec.Running()) == 0 })
	t.Logf("the cut-off runner fenced itself %v after the cut", time.Since(cut).Round(time.Millisecond))
	var mine bool
	if err := holder.do(context.Background(), func() { _, mine = holder.mk.Job(id) }); err != nil {
		t.Fatal(err)
	}
	if mine {
		unsubscribe()
		seenWG.Wait()
		var lines []string
		for _, ev := range timeline {
			if ev.Type == "member" || ev.Job == id {
				lines = append(lines, fmt.Sprintf("%+v %s %s %s %s", ev.At.Sub(cut).Round(time.Millisecond), ev.Type, ev.State, ev.Peer, ev.Reason))
			}
		}
		t.Errorf("the cut-off runner adopted its own job; what it saw, from the cut:\n%s", strings.Join(lines, "\n"))
	}
	eventually(t, 15*time.Second, "the share runs on the other side", func() bool { return len(spare.exec.Running()) == 1 })
}

// A coordinator that lets a job go to one that never took it up (it heard
// of a higher term second-hand; the other crashed before it persisted its
// adoption) leaves the job with no coordinator, while membership sees
// nothing wrong. The audit finds that the named coordinator answers
// without the job, and the job's group takes it over.
func TestOrphanedJobIsTakenOverByItsGroup(t *testing.T) {
	sm := newSimMesh(t, "", "", "", "a100-80g:1")
	runner := sm.nodes[3]
	_, coord, other := runOnTheRunner(t, sm, "orphan-me")
	eventually(t, 10*time.Second, "the others hold a replica", func() bool {
		r, ok := other.view.Job("orphan-me")
		return ok && r.State == market.JobRunning
	})
	// Tell the coordinator that other took the job over at term 5; other
	// never did.
	if err := coord.do(context.Background(), func() {
		coord.step(market.MessageReceived{Now: time.Now(), Message: market.Message{
			From: runner.ID().String(), To: coord.ID().String(),
			Payload: &market.Superseded{Job: "orphan-me", Term: 5, Coordinator: other.ID().String()},
		}})
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var after market.JobRecord
	eventually(t, 20*time.Second, "a member of the job's group coordinates it again, above term 5", func() bool {
		for _, n := range sm.nodes[:3] {
			var r market.JobRecord
			var mine bool
			if err := n.do(context.Background(), func() { r, mine = n.mk.Job("orphan-me") }); err == nil && mine && r.Term > 5 && !r.State.Terminal() {
				after = r
				return true
			}
		}
		return false
	})
	t.Logf("orphan taken over by %s at term %d after %v", after.Coordinator, after.Term, time.Since(start).Round(time.Millisecond))
	waitState(t, runner, "orphan-me", 20*time.Second, market.JobRunning)
	if _, err := runner.Cancel(context.Background(), "orphan-me"); err != nil {
		t.Fatalf("cancel after the takeover: %v", err)
	}
	waitState(t, runner, "orphan-me", 10*time.Second, market.JobCancelled)
}

// A coordinator that also runs a replica of its service and goes silent
// for a moment (cut off for less than the lease, as a node frozen for a
// second or two) is declared dead by memberlist, and a successor adopts
// the job. When it is back it lets the job go — and its own replica, which
// the successor holds as running, follows the successor and runs on: a
// short silence moves no share. (Five nodes: the successor still has a
// majority of the job's group if one more member is taken for dead for a
// moment, as memberlist does of a busy node under the race detector.)
func TestCoordinatorBackFromAShortSilenceKeepsItsOwnReplica(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) {
		price := 5.0
		if strings.HasPrefix(filepath.Base(c.DataDir), "node-0-") {
			price = 1 // the coordinator is the cheapest: it runs a replica
		}
		c.Prices = map[string]float64{"a100-80g": price}
	}, "a100-80g:1", "a100-80g:1", "a100-80g:1", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	for _, n := range sm.nodes {
		sm.waitBook(n, 5)
	}
	sm.agreeCoordinators(nil)
	ids := peerIDs(sm.nodes)
	id := firstID("svc", func(id string) bool { return market.Coordinators(id, ids, 1)[0] == coord.ID().String() })
	if _, err := sm.nodes[1].Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Kind: market.KindService, Replicas: 3, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	var own market.Placement
	rec := waitState(t, coord, id, 20*time.Second, market.JobRunning)
	if rec.Coordinator != coord.ID().String() {
		t.Fatalf("the job is coordinated by %s, want the cheapest node %s", rec.Coordinator, coord.ID())
	}
	eventually(t, 20*time.Second, "three replicas run, one on the coordinator", func() bool {
		rec, _ = coord.Job(context.Background(), id)
		n, nodes := liveReplicas(rec)
		for _, p := range rec.Live() {
			if p.Node == coord.ID().String() {
				own = p
			}
		}
		return n == 3 && nodes[coord.ID().String()]
	})

	sm.net.Isolate(coord.ID())
	var successor *Node
	eventually(t, 10*time.Second, "a successor adopts the job", func() bool {
		for _, n := range sm.nodes[1:] {
			if r, ok := n.view.Job(id); ok && r.Coordinator == n.ID().String() && r.Term > rec.Term {
				successor = n
				return true
			}
		}
		return false
	})
	sm.net.Reconnect(coord.ID())
	eventually(t, 10*time.Second, "the old coordinator lets the job go", func() bool {
		mine := true
		coord.do(context.Background(), func() { _, mine = coord.mk.Job(id) })
		return !mine
	})
	// Its replica runs on under the successor, the same attempt: watch
	// past the lease (LostAfter, 2.7 s).
	throughout(t, 4*time.Second, func() bool { return attemptRuns(coord, id, own) }, func() string {
		r, _ := successor.Job(context.Background(), id)
		return fmt.Sprintf("the old coordinator's own replica (share %d epoch %d) stopped after a short silence: %+v", own.Share, own.Epoch, r.Placements)
	})
	r, err := successor.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Placements {
		if p.Share == own.Share && p.Epoch == own.Epoch && p.State != market.PlacementRunning {
			t.Errorf("the successor holds the old coordinator's replica as %s (%s), want running", p.State, p.Reason)
		}
	}
}
