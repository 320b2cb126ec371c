package node

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A coordinator that cannot reach one of its job's replicas places
// nothing: the award waits until every replica holds the record that made
// it, so no attempt starts that a successor (adopting a replica that never
// heard of it) would not know about. Once the link is back, the share runs
// — one attempt of it.
func TestAwardWaitsUntilTheReplicasHoldIt(t *testing.T) {
	sm := newSimMesh(t, "", "", "", "a100-80g:1")
	runner := sm.nodes[3]
	sm.neverCoordinate(runner)
	for _, n := range sm.nodes[:3] {
		sm.waitBook(n, 1)
	}
	coords := peerIDs(sm.nodes[:3])
	// The runner's one card is busy, so the job waits in pending until it
	// frees; the job is acknowledged, its replicas hold it.
	blocker, err := runner.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "blocker", Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, runner, blocker.ID, 20*time.Second, market.JobRunning)
	id := "waits-for-replicas"
	order := market.Coordinators(id, coords, 3)
	coord, replica := sm.byID(order[0]), sm.byID(order[2])
	if _, err := runner.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	sm.net.Cut(coord.ID(), replica.ID())
	if _, err := runner.Cancel(context.Background(), blocker.ID); err != nil {
		t.Fatal(err)
	}
	waitState(t, runner, blocker.ID, 20*time.Second, market.JobCancelled)
	eventually(t, 20*time.Second, "the coordinator awards the freed card", func() bool {
		rec, err := coord.Job(context.Background(), id)
		return err == nil && len(rec.Placements) > 0
	})
	throughout(t, 3*time.Second, func() bool { return len(attemptsOf(sm, id)) == 0 }, func() string {
		return fmt.Sprintf("an attempt of the job reached the runner while a replica was cut off: %v", attemptsOf(sm, id))
	})
	sm.net.Heal(coord.ID(), replica.ID())
	rec := waitState(t, runner, id, 20*time.Second, market.JobRunning)
	if as := attemptsOf(sm, id); len(as) != 1 {
		t.Errorf("%d attempts of the job on the runner, want 1: %v", len(as), as)
	}
	// Records reach the replicas after they are on the coordinator's disk,
	// a moment after the job runs there.
	eventually(t, 5*time.Second, "the replica that was cut off holds the record of the running job", func() bool {
		got, ok := replica.view.Job(id)
		return ok && got.State == market.JobRunning
	})
	t.Logf("running once the replica was back: %s", describePlacements(rec))
}

// A coordinator frozen past its successor's takeover resumes, finds its
// share silent and awards it again; before the award leaves, a replica
// holder answers that the successor outranks it (onSuperseding puts the
// successor's record in the view). The award must not leave: its runner
// would start a share that the job's replicas never heard of, beside the
// one the successor runs (soak seed 1796599946222083395: two attempts of
// one share together for 2.4 s). Messages that decide nothing pass.
func TestADecisionOfAJobSupersededBeforeItLeftIsDropped(t *testing.T) {
	self, successor, runner := peer.ID("coordinator-frozen"), peer.ID("successor"), peer.ID("runner")
	n := &Node{id: self, self: self.String(), view: jobstate.NewView(), gate: jobstate.NewGate(), log: slog.New(slog.DiscardHandler)}
	n.view.Put(market.JobRecord{ID: "j1", Coordinator: self.String(), Term: 1, Version: 8})
	n.view.PutNewer(market.JobRecord{ID: "j1", Coordinator: successor.String(), Term: 2, Version: 1})

	award := market.Message{From: self.String(), To: runner.String(), Payload: &market.Award{Job: "j1", Term: 1, Share: 0, Epoch: 2}}
	ack := market.Message{From: self.String(), To: runner.String(), Payload: &market.RenewalAck{Job: "j1", Term: 1, Share: 1, Epoch: 1}}
	out := n.gateOut([]market.Message{award, ack}, time.Now())
	if len(out) != 1 || out[0].Payload != ack.Payload {
		t.Errorf("sent %v; want only the renewal ack, and the award dropped", out)
	}
	if held := n.gate.Waiting(); len(held) != 0 {
		t.Errorf("jobs with held messages: %v; want none (dropped, not held)", held)
	}
}

// An award waits for its record's commit as long as its replicas take; when
// the commit comes it leaves if its coordinator still waits for its answer,
// however long it waited (the wait follows the supplier's answers and is
// often longer than AwardTimeout), and is dropped if the coordinator gave
// up on it meanwhile and gave the share to another award: its runner must
// not start it. Under CPU load, dropping every award held past AwardTimeout
// made awards time out that their coordinators still waited for.
func TestAnAwardLeavesOnCommitUnlessItsCoordinatorGaveUpOnIt(t *testing.T) {
	self, runner, spare := peer.ID("coordinator"), peer.ID("runner"), peer.ID("spare")
	n := &Node{id: self, self: self.String(), view: jobstate.NewView(), gate: jobstate.NewGate(), log: slog.New(slog.DiscardHandler)}
	rec := market.JobRecord{ID: "j1", Coordinator: self.String(), Term: 1, Version: 9, Placements: []market.Placement{
		{Share: 0, Epoch: 1, Node: runner.String(), State: market.PlacementRejected, Reason: "no answer to the award within the timeout"},
		{Share: 0, Epoch: 2, Node: spare.String(), State: market.PlacementAwarded},
	}}
	n.view.Put(rec)
	mark := jobstate.MarkOf(rec)
	givenUp := market.Message{From: self.String(), To: runner.String(), Payload: &market.Award{Job: "j1", Term: 1, Share: 0, Epoch: 1}}
	awaited := market.Message{From: self.String(), To: spare.String(), Payload: &market.Award{Job: "j1", Term: 1, Share: 0, Epoch: 2}}
	unknown := market.Message{From: self.String(), To: spare.String(), Payload: &market.Award{Job: "j1", Term: 1, Share: 1, Epoch: 1}}
	long := time.Now().Add(-time.Minute)
	for _, m := range []market.Message{givenUp, awaited, unknown} {
		if !n.gate.Hold("j1", mark, m, long) {
			t.Fatalf("the award to %s was not held", m.To)
		}
	}
	out, dropped := n.gate.Commit("j1", mark, n.awardWithdrawn)
	if len(out) != 1 || out[0].Payload != awaited.Payload || dropped != 2 {
		t.Errorf("sent %v, dropped %d; want only the award still waited for sent, and the one given up on and the one the record does not know dropped", out, dropped)
	}
}

// A job whose replica is far from its coordinator (400 ms each way) is
// placed by its first award: the award waits in the commit gate for the
// record to reach the replica, longer than AwardTimeout, and its time for
// an answer counts from when it left (market.AwardHeld, AwardSent). While
// that time ran from the award, every award timed out in the gate, before
// it left, and the job was awarded again and again without running.
func TestAFarReplicaDoesNotTimeOutTheAwards(t *testing.T) {
	sm := newSimMesh(t, "", "", "a100-80g:1")
	runner := sm.nodes[2]
	sm.neverCoordinate(runner)
	for _, n := range sm.nodes[:2] {
		sm.waitBook(n, 1)
	}
	id := "far-replica"
	order := market.Coordinators(id, peerIDs(sm.nodes[:2]), 3)
	coord, replica := sm.byID(order[0]), sm.byID(order[1])
	sm.net.SetLatency(coord.ID(), replica.ID(), 400*time.Millisecond)
	if _, err := runner.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, id, 30*time.Second, market.JobRunning)
	if len(rec.Placements) != 1 {
		t.Errorf("%d awards before the job ran, want the first accepted: %s", len(rec.Placements), describePlacements(rec))
	}
}
