package node

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
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
	if _, err := n.Submit(context.Background(), market.JobSpec{ID: "done-already", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", "echo first; echo last"}}); err != nil {
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

// A share whose command is not found never runs: the job fails with exit
// status 127 and says why in its record, and its stderr, read through
// another peer as `gpumesh logs ID --stderr` does, holds the same line;
// the same for a payload that does not unpack.
func TestStartFailureIsInTheRecordAndTheStderr(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(runner)
	sm.waitBook(coord, 1)
	ctx := context.Background()
	garbage, err := coord.PutPayload(ctx, strings.NewReader("this is not a tar archive"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec market.JobSpec
		why  string
	}{
		{market.JobSpec{ID: "no-smi", Cards: 1, MaxPriceCNY: 20, Command: []string{"no-such-smi-4711", "-L"}},
			"executable file not found in $PATH: no-such-smi-4711"},
		{market.JobSpec{ID: "bad-payload", Cards: 1, MaxPriceCNY: 20, Command: []string{"true"}, Payload: &garbage},
			"payload: "},
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
