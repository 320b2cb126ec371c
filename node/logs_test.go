package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
)

// Following the output of a job that has ended returns its whole output
// and then ends, as `gpumesh logs --follow` of a finished job must. (The
// follower also watches the run's Done: in the moment between an
// attempt's end and the executor forgetting its run, the end's wake may
// already have gone by. That moment is too short to hold open here;
// executor's TestTailIsBoundedAndFollowersAreWoken checks the wake comes
// before Done.)
func TestFollowingAnEndedJobReturns(t *testing.T) {
	sm := newSimMesh(t, "a100-80g:1")
	n := sm.nodes[0]
	sm.waitBook(n, 1)
	if _, err := n.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "done-already", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", "echo first; echo last"}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, "done-already", 20*time.Second, market.JobSucceeded)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := n.Logs(ctx, api.LogRequest{Job: "done-already", Follow: true}, &out, func() {}); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("following an ended job's output returned only when the request timed out (%q so far)", out.String())
	}
	if out.String() != "first\nlast\n" {
		t.Errorf("output %q, want both lines", out.String())
	}
}

// The output of a share's earlier attempts stays readable by epoch after
// the share moved (here: its first runner drained), from any node; an
// epoch the share never had is a 404 naming its epochs; an attempt whose
// runner is gone says so.
func TestLogsOfEarlierAttempts(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1], sm.nodes[2])
	sm.waitBook(coord, 2)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "moved-logs", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", "echo attempt $GPUMESH_EPOCH; sleep 300"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, spec.ID, 20*time.Second, market.JobRunning)
	first, _ := livePlacement(rec)
	runner := sm.byID(first.Node)
	logs := func(from *Node, epoch uint64) (string, error) {
		var out bytes.Buffer
		err := from.Logs(ctx, api.LogRequest{Job: spec.ID, Epoch: epoch}, &out, func() {})
		return out.String(), err
	}
	firstOut := fmt.Sprintf("attempt %d\n", first.Epoch)
	eventually(t, 10*time.Second, "the first attempt printed", func() bool {
		out, err := logs(coord, 0)
		return err == nil && out == firstOut
	})

	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := runner.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	var second market.Placement
	eventually(t, 20*time.Second, "the share runs again elsewhere", func() bool {
		r, err := coord.Job(ctx, spec.ID)
		p, ok := livePlacement(r)
		second = p
		return err == nil && ok && p.Epoch > first.Epoch && p.Node != first.Node
	})
	secondOut := fmt.Sprintf("attempt %d\n", second.Epoch)
	eventually(t, 10*time.Second, "the second attempt printed", func() bool {
		out, err := logs(coord, 0)
		return err == nil && out == secondOut
	})
	for _, from := range sm.nodes {
		if out, err := logs(from, first.Epoch); err != nil || out != firstOut {
			t.Errorf("epoch %d read through %s: %q, %v; want %q", first.Epoch, from.ID().ShortString(), out, err, firstOut)
		}
		if out, err := logs(from, second.Epoch); err != nil || out != secondOut {
			t.Errorf("epoch %d read through %s: %q, %v; want %q", second.Epoch, from.ID().ShortString(), out, err, secondOut)
		}
	}
	_, err := logs(coord, 99)
	var he *api.HTTPError
	want := fmt.Sprintf("has no attempt of epoch 99 (its attempts: epoch %d, %d)", first.Epoch, second.Epoch)
	if !errors.As(err, &he) || he.Status != 404 || he.Field != "epoch" || !strings.Contains(he.Error(), want) {
		t.Errorf("epoch 99: %v, want a 404 on epoch saying %q", err, want)
	}

	// The first runner goes: its attempt's output goes with it, and
	// reading it says so; the current attempt's output stays readable.
	if err := sm.net.Crash(runner.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the coordinator sees the first runner dead", func() bool {
		m, ok := coord.Mesh().Member(runner.ID())
		return ok && m.State == mesh.StateDead
	})
	_, err = logs(coord, first.Epoch)
	if !errors.As(err, &he) || he.Status != 502 || !strings.Contains(he.Error(), "ran on "+runner.ID().ShortString()+", which is dead") {
		t.Errorf("epoch %d after its runner died: %v, want a 502 saying its runner is dead", first.Epoch, err)
	}
	if out, err := logs(coord, second.Epoch); err != nil || out != secondOut {
		t.Errorf("epoch %d after the first runner died: %q, %v", second.Epoch, out, err)
	}
}

// A share whose command is not found never runs: the job fails with exit
// status 127 and says why in its record, and its stderr, read through
// another peer as `gpumesh logs ID --stderr` does, holds the same line;
// the same for a payload the runner has no room for (its store is full).
func TestStartFailureIsInTheRecordAndTheStderr(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		if i == 1 {
			c.StoreMax = 1 << 20 // the runner's store cannot hold the payload
		}
	}), "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(runner)
	sm.waitBook(coord, 1)
	ctx := context.Background()
	dir, _ := payloadTree(t, 9, 2<<20)
	up, err := upload(t, coord, testOwner(0), dir)
	if err != nil {
		t.Fatal(err)
	}
	big := up.Ref
	for _, c := range []struct {
		spec market.JobSpec
		why  string
	}{
		{market.JobSpec{AllowSimulated: true, ID: "no-smi", Cards: 1, MaxPriceCNY: 20, Command: []string{"no-such-smi-4711", "-L"}},
			"executable file not found in $PATH: no-such-smi-4711"},
		{market.JobSpec{AllowSimulated: true, ID: "no-room", Cards: 1, MaxPriceCNY: 20, Command: []string{"true"}, Payload: &big},
			"payload " + big.Manifest + ": transfer: fetch " + big.Manifest + ": 3 chunks missing: blob: store full: "},
	} {
		if _, err := coord.Submit(ctx, c.spec); err != nil {
			t.Fatal(err)
		}
		rec := waitState(t, coord, c.spec.ID, 60*time.Second, market.JobFailed, market.JobSucceeded, market.JobCancelled)
		if rec.State != market.JobFailed || rec.ExitCode == nil || *rec.ExitCode != 127 {
			t.Fatalf("%s: %s exit %v (%s), want failed with 127", c.spec.ID, rec.State, rec.ExitCode, rec.Reason)
		}
		if want := "share 0 exited with status 127: did not start: " + c.why; !strings.HasPrefix(rec.Reason, want) {
			t.Errorf("%s: job reason %q, want it to start %q", c.spec.ID, rec.Reason, want)
		}
		p, _ := latestPlacement(rec, 0)
		if p.Node != runner.ID().String() || !strings.HasPrefix(p.Reason, "exit status 127: did not start: "+c.why) {
			t.Errorf("%s: placement on %s, reason %q", c.spec.ID, p.Node, p.Reason)
		}
		t.Logf("%s: %s", c.spec.ID, rec.Reason)
		var stderr, stdout bytes.Buffer
		if err := coord.Logs(ctx, api.LogRequest{Job: c.spec.ID, Stream: "stderr"}, &stderr, func() {}); err != nil {
			t.Fatalf("%s: stderr: %v", c.spec.ID, err)
		}
		if !strings.HasPrefix(stderr.String(), "gpumesh: the attempt did not start: "+c.why) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s: stderr %q", c.spec.ID, stderr.String())
		}
		if err := coord.Logs(ctx, api.LogRequest{Job: c.spec.ID}, &stdout, func() {}); err != nil || stdout.Len() != 0 {
			t.Errorf("%s: stdout %q, %v; want empty", c.spec.ID, stdout.String(), err)
		}
	}
}
