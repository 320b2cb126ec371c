package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/store"
)

// stepScript counts to 30 steps, keeping its count in its checkpoint.
const stepScript = `f=$GPUMESH_CHECKPOINT_DIR/step
s=$(cat $f 2>/dev/null || echo 0)
echo start=$s
while [ $s -lt 30 ]; do s=$((s+1)); echo $s > $f.tmp && mv $f.tmp $f; echo step=$s; sleep 0.1; done`

func TestCheckpointedJobSurvivesTwoCrashes(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.CheckpointInterval = 150 * time.Millisecond },
		"", "a100-80g:1", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 3)
	if _, err := coord.Submit(context.Background(), market.JobSpec{ID: "steps", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", stepScript}}); err != nil {
		t.Fatal(err)
	}
	// checkpointedSince reports whether the coordinator accepted a
	// checkpoint of the given epoch written after since.
	checkpointedSince := func(epoch uint64, since time.Time) bool {
		found := false
		coord.store.ForEach(store.Checkpoints, func(_ string, raw []byte) error {
			var n checkpointNote
			if json.Unmarshal(raw, &n) == nil && n.Job == "steps" && n.Epoch == epoch && n.At.After(since) {
				found = true
			}
			return nil
		})
		return found
	}
	for epoch := uint64(1); epoch <= 2; epoch++ {
		var runner *Node
		var p market.Placement
		eventually(t, 20*time.Second, fmt.Sprintf("attempt %d runs", epoch), func() bool {
			rec, _ := coord.Job(context.Background(), "steps")
			var ok bool
			p, ok = livePlacement(rec)
			return ok && p.Epoch == epoch
		})
		runner = sm.byID(p.Node)
		step := fmt.Sprintf("step=%d\n", 10*epoch)
		eventually(t, 20*time.Second, "attempt reaches "+step, func() bool {
			run, ok := runner.exec.Lookup(attemptName("steps", p.Share, p.Epoch))
			return ok && strings.Contains(string(run.Tail()), step)
		})
		seen := time.Now()
		eventually(t, 10*time.Second, "a checkpoint after "+step, func() bool { return checkpointedSince(epoch, seen) })
		if err := sm.net.Crash(runner.ID()); err != nil {
			t.Fatal(err)
		}
	}
	rec := waitState(t, coord, "steps", 60*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded || rec.Epoch < 3 {
		t.Fatalf("job %s at epoch %d: %s", rec.State, rec.Epoch, rec.Reason)
	}
	var out bytes.Buffer
	last, _ := latestPlacement(rec, lastShare(rec))
	if err := coord.Logs(context.Background(), api.LogRequest{Job: "steps", Share: last.Share}, &out, func() {}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var start int
	fmt.Sscanf(lines[0], "start=%d", &start)
	if start < 20 || lines[len(lines)-1] != "step=30" {
		t.Fatalf("the last attempt started at step %d and ended with %q; want it to resume from its checkpoint and finish", start, lines[len(lines)-1])
	}
	// Continuous: the last attempt counts on from where it started, one by one.
	for i, l := range lines[1:] {
		if l != fmt.Sprintf("step=%d", start+i+1) {
			t.Fatalf("line %d is %q, want step=%d", i+1, l, start+i+1)
		}
	}
	t.Logf("resumed at step %d after two crashes (epoch %d)", start, rec.Epoch)
}

func lastShare(rec market.JobRecord) int {
	best, epoch := 0, uint64(0)
	for _, p := range rec.Placements {
		if p.Epoch > epoch {
			best, epoch = p.Share, p.Epoch
		}
	}
	return best
}
