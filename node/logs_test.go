package node

import (
	"bytes"
	"context"
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
