package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// placed gives r a running placement of each share.
func placed(r market.JobRecord, shares ...int) market.JobRecord {
	for _, sh := range shares {
		r.Placements = append(r.Placements, market.Placement{Share: sh, Epoch: 1, Node: nodeA, State: market.PlacementRunning, StartedAt: time.Now()})
	}
	return r
}

func TestLogs(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(placed(market.JobRecord{ID: "j1", State: market.JobRunning}, 0, 1))
	n.b.SetLog("j1", 0, "stdout", "CUDA_VISIBLE_DEVICES=GPU-1\nstep 1\n")
	n.b.SetLog("j1", 1, "stderr", "warning on share 1\n")
	if code, out, errOut := n.run("logs", "j1"); code != 0 || out != "CUDA_VISIBLE_DEVICES=GPU-1\nstep 1\n" || errOut != "" {
		t.Errorf("logs: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := n.run("logs", "j1", "--share", "1", "--stderr"); code != 0 || out != "warning on share 1\n" {
		t.Errorf("--share 1 --stderr: exit %d, %q", code, out)
	}
	code, _, errOut := n.run("logs", "j1", "--share", "5")
	if code != exitError {
		t.Errorf("missing share: exit %d", code)
	}
	oneLineErr(t, "missing share", errOut, "job j1 has no share 5")
	code, _, errOut = n.run("logs", "j1", "--share", "-1")
	if code != exitUsage {
		t.Errorf("negative share: exit %d", code)
	}
	oneLineErr(t, "negative share", errOut, "--share: must be 0 or more")
	code, _, errOut = n.run("logs", "jnope")
	if code != exitError {
		t.Errorf("unknown job: exit %d", code)
	}
	oneLineErr(t, "unknown job", errOut, `job "jnope" not found`)
}

// logs -f prints each chunk as it comes and ends with the attempt.
func TestLogsFollow(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(placed(market.JobRecord{ID: "j1", State: market.JobRunning}, 0))
	n.b.SetLog("j1", 0, "stdout", "step 1\n")
	feed := n.b.Feed("j1", 0, "stdout")
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- n.runTo(context.Background(), &stdout, &stderr, "logs", "-f", "j1") }()
	waitFor(t, "the output so far", func() bool { return stdout.String() == "step 1\n" })
	feed <- []byte("step 2\n")
	waitFor(t, "a chunk while the job runs", func() bool { return stdout.String() == "step 1\nstep 2\n" })
	close(feed)
	select {
	case code := <-done:
		if code != 0 || stderr.String() != "" {
			t.Errorf("exit %d, stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not end with the attempt")
	}
}

// Ctrl-C ends logs -f quietly.
func TestLogsFollowInterrupted(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(placed(market.JobRecord{ID: "j1", State: market.JobRunning}, 0))
	n.b.SetLog("j1", 0, "stdout", "step 1\n")
	n.b.Feed("j1", 0, "stdout")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- n.runTo(ctx, &stdout, &stderr, "logs", "--follow", "j1") }()
	waitFor(t, "the output so far", func() bool { return stdout.String() == "step 1\n" })
	cancel()
	select {
	case code := <-done:
		if code != 0 || stderr.String() != "" {
			t.Errorf("exit %d, stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not end on interrupt")
	}
}

func TestCancel(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "j1", State: market.JobRunning})
	n.b.AddJob(market.JobRecord{ID: "j2", State: market.JobSucceeded})
	if code, out, errOut := n.run("cancel", "j1"); code != 0 || out != "cancelled\n" || errOut != "" {
		t.Errorf("cancel: exit %d, %q, %q", code, out, errOut)
	}
	if rec, _ := n.b.Job(t.Context(), "j1"); rec.State != market.JobCancelled {
		t.Errorf("the node has j1 %s", rec.State)
	}
	code, out, errOut := n.run("cancel", "j2")
	if code != 0 || out != "succeeded\n" {
		t.Errorf("cancel of an ended job: exit %d, %q", code, out)
	}
	oneLineErr(t, "ended job", errOut, "job j2 had already ended")
	code, out, _ = n.run("cancel", "j1", "--json")
	var rec market.JobRecord
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.State != market.JobCancelled || rec.EndedAt.IsZero() {
		t.Errorf("--json: exit %d, %q", code, out)
	}
	code, _, errOut = n.run("cancel", "jnope")
	if code != exitError {
		t.Errorf("unknown: exit %d", code)
	}
	oneLineErr(t, "unknown", errOut, `job "jnope" not found`)
}

func TestScale(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "e1", State: market.JobRunning, Cards: 4, Spec: market.JobSpec{Elastic: &market.Elastic{Min: 2, Max: 16}}})
	n.b.AddJob(market.JobRecord{ID: "fixed", State: market.JobRunning, Cards: 4})
	if code, out, errOut := n.run("scale", "e1", "8"); code != 0 || out != "e1: 8 cards (running)\n" {
		t.Errorf("scale: exit %d, %q, %q", code, out, errOut)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"scale", "e1", "32"}, exitUsage, "CARDS: cards 32 is outside the elastic range 2..16"},
		{[]string{"scale", "fixed", "8"}, exitUsage, "CARDS: job fixed is not elastic"},
		{[]string{"scale", "e1", "0"}, exitUsage, `CARDS "0": want a whole number from 1 to 4096`},
		{[]string{"scale", "e1", "many"}, exitUsage, `CARDS "many"`},
		{[]string{"scale", "e1"}, exitUsage, "accepts 2 arg"},
		{[]string{"scale", "jnope", "2"}, exitError, `job "jnope" not found`},
	}
	for _, tc := range cases {
		code, out, errOut := n.run(tc.args...)
		if code != tc.code || out != "" {
			t.Errorf("%q: exit %d, stdout %q", tc.args, code, out)
		}
		oneLineErr(t, strings.Join(tc.args, " "), errOut, tc.want)
	}
	if rec, _ := n.b.Job(t.Context(), "e1"); rec.Cards != 8 {
		t.Errorf("refused scales changed the job: %d cards", rec.Cards)
	}
}

// A scale-down stops whole shares only: when they cannot give back
// exactly, scale prints what the job holds and says why on stderr; an
// ended job cannot be scaled, and scale says its state.
func TestScaleDownKeepsWholeShares(t *testing.T) {
	n := newFakeNode(t)
	share := func(i int) market.Placement {
		return market.Placement{Share: i, Epoch: 1, Node: nodeA, State: market.PlacementRunning, Cards: []string{"g0", "g1", "g2", "g3"}}
	}
	n.b.AddJob(market.JobRecord{ID: "e2", State: market.JobRunning, Cards: 8, Spec: market.JobSpec{Elastic: &market.Elastic{Min: 1, Max: 8}},
		Placements: []market.Placement{share(0), share(1)}})
	code, out, errOut := n.run("scale", "e2", "2")
	if code != 0 || out != "e2: 4 cards (running)\n" {
		t.Errorf("scale to 2: exit %d, stdout %q", code, out)
	}
	oneLineErr(t, "scale to 2", errOut, "job e2 holds 4 cards, not the 2 asked", "stops only whole shares and starts nothing")
	if code, out, errOut := n.run("scale", "e2", "4"); code != 0 || out != "e2: 4 cards (running)\n" || errOut != "" {
		t.Errorf("scale to 4: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	n.b.AddJob(market.JobRecord{ID: "done", State: market.JobSucceeded, Cards: 4, Spec: market.JobSpec{Elastic: &market.Elastic{Min: 1, Max: 8}}})
	code, out, errOut = n.run("scale", "done", "2")
	if code != exitError || out != "" {
		t.Errorf("scale of an ended job: exit %d, stdout %q", code, out)
	}
	oneLineErr(t, "ended job", errOut, "job done has ended (succeeded): it cannot be scaled")
}

// logs -f right after submit waits for the share to start, then follows it.
func TestLogsFollowWaitsForStart(t *testing.T) {
	n := newFakeNode(t)
	pending := market.JobRecord{ID: "j1", State: market.JobPending, Reason: "waiting for a placement round"}
	n.b.AddJob(pending)
	n.b.Script("j1", pending, market.JobRecord{ID: "j1", State: market.JobPlacing, Epoch: 1},
		placed(market.JobRecord{ID: "j1", State: market.JobRunning, Epoch: 1}, 0))
	n.b.SetLog("j1", 0, "stdout", "step 1\n")
	code, out, errOut := n.run("logs", "-f", "j1")
	if code != 0 || out != "step 1\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	oneLineErr(t, "waiting", errOut, "job j1 is pending; waiting for share 0 to start")
}

func TestLogsFollowJobEndsBeforeStart(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "j1", State: market.JobPending})
	n.b.Script("j1", market.JobRecord{ID: "j1", State: market.JobPending},
		market.JobRecord{ID: "j1", State: market.JobFailed, Reason: "needs 16 × h100-sxm-80g, mesh has 4"})
	code, out, errOut := n.run("logs", "-f", "j1")
	if code != exitError || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if !strings.HasSuffix(errOut, "gpumesh: job j1 failed before share 0 started: needs 16 × h100-sxm-80g, mesh has 4\n") {
		t.Errorf("stderr %q", errOut)
	}
}

// A share a running job does not have is an error at once, -f or not.
func TestLogsFollowMissingShare(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(placed(market.JobRecord{ID: "j1", State: market.JobRunning}, 0))
	code, _, errOut := n.run("logs", "-f", "--share", "3", "j1")
	if code != exitError {
		t.Errorf("exit %d", code)
	}
	oneLineErr(t, "missing share", errOut, "job j1 has no share 3")
	if g := n.b.Gets("j1"); g != 1 {
		t.Errorf("%d job lookups, want 1 (no waiting)", g)
	}
	code, _, errOut = n.run("logs", "-f", "jnope")
	if code != exitError {
		t.Errorf("unknown job: exit %d", code)
	}
	oneLineErr(t, "unknown job", errOut, `job "jnope" not found`)
}

// rerouted is a job whose share 0 ran on node A (epoch 1, lost), then on
// node B (epoch 2, running); share 1 ran once.
func rerouted() market.JobRecord {
	r := market.JobRecord{ID: "jmoved", State: market.JobRunning, Epoch: 2}
	r.Placements = []market.Placement{
		{Share: 0, Epoch: 1, Node: nodeA, State: market.PlacementLost, Reason: "renewals stopped", StartedAt: time.Now()},
		{Share: 1, Epoch: 1, Node: nodeA, State: market.PlacementRunning, StartedAt: time.Now()},
		{Share: 0, Epoch: 2, Node: nodeB, State: market.PlacementRunning, StartedAt: time.Now()},
		{Share: 0, Epoch: 3, Node: nodeA, State: market.PlacementRejected, Reason: "no cards"},
	}
	return r
}

// logs --attempt EPOCH prints an earlier attempt's output; --attempt all
// prints every attempt's in epoch order under a header naming its epoch
// and node.
func TestLogsOfEarlierAttempts(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(rerouted())
	n.b.SetLog("jmoved", 0, "stdout", "step 48\n")
	n.b.SetAttemptLog("jmoved", 0, 1, "stdout", "step 1\nstep 47")
	n.b.SetAttemptLog("jmoved", 0, 2, "stdout", "resumed at step 47\nstep 48\n")
	if code, out, errOut := n.run("logs", "jmoved"); code != 0 || out != "step 48\n" || errOut != "" {
		t.Errorf("latest: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := n.run("logs", "jmoved", "--attempt", "1"); code != 0 || out != "step 1\nstep 47" || errOut != "" {
		t.Errorf("--attempt 1: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut := n.run("logs", "jmoved", "--attempt", "all")
	want := "==> share 0 · epoch 1 · node 12*aaaaaa · lost: renewals stopped <==\n" +
		"step 1\nstep 47\n" +
		"\n==> share 0 · epoch 2 · node 12*bbbbbb · running <==\n" +
		"resumed at step 47\nstep 48\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("--attempt all: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}

	// The first attempt's node is gone: that attempt says so, the others
	// still print, and the command succeeds.
	n.b.SetAttemptGone("jmoved", 0, 1, "job jmoved share 0 epoch 1 ran on 12*aaaaaa, which is dead (unreachable): its output is there, out of reach")
	code, out, errOut = n.run("logs", "jmoved", "--attempt", "all")
	want = "==> share 0 · epoch 1 · node 12*aaaaaa · lost: renewals stopped <==\n" +
		"(no output: job jmoved share 0 epoch 1 ran on 12*aaaaaa, which is dead (unreachable): its output is there, out of reach)\n" +
		"\n==> share 0 · epoch 2 · node 12*bbbbbb · running <==\n" +
		"resumed at step 47\nstep 48\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("--attempt all, epoch 1 gone: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	// Asked for alone, the gone attempt is an error that says why.
	code, out, errOut = n.run("logs", "jmoved", "--attempt", "1")
	if code != exitError || out != "" {
		t.Errorf("--attempt 1, gone: exit %d, %q", code, out)
	}
	oneLineErr(t, "--attempt 1, gone", errOut, "which is dead (unreachable)")
	// Every attempt gone: the command fails.
	n.b.SetAttemptGone("jmoved", 0, 2, "ran on 12*bbbbbb, which has left the mesh")
	code, _, errOut = n.run("logs", "jmoved", "--attempt", "all")
	if code != exitError {
		t.Errorf("--attempt all, every attempt gone: exit %d", code)
	}
	oneLineErr(t, "every attempt gone", errOut, "none of the 2 attempts of job jmoved share 0 could be read", "which has left the mesh")
}

func TestLogsAttemptBadInput(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(rerouted())
	for _, bad := range []string{"0", "-1", "last", "2.5"} {
		code, out, errOut := n.run("logs", "jmoved", "--attempt", bad)
		if code != exitUsage || out != "" {
			t.Errorf("--attempt %s: exit %d, %q", bad, code, out)
		}
		oneLineErr(t, "--attempt "+bad, errOut, "--attempt", "want an epoch")
	}
	// An epoch the share never had: the node's 404 names the flag.
	code, _, errOut := n.run("logs", "jmoved", "--attempt", "9")
	if code != exitError {
		t.Errorf("--attempt 9: exit %d", code)
	}
	oneLineErr(t, "--attempt 9", errOut, "has no attempt of epoch 9")
	// A job never placed: nothing to print, and the command says so.
	n.b.AddJob(market.JobRecord{ID: "jwait", State: market.JobPending})
	code, _, errOut = n.run("logs", "jwait", "--attempt", "all")
	if code != exitError {
		t.Errorf("--attempt all of an unplaced job: exit %d", code)
	}
	oneLineErr(t, "unplaced", errOut, "job jwait (pending) has no attempt of share 0 yet")
}
