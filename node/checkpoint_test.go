package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
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

// A job that counts steps in its checkpoint is killed twice (its runner
// crashes) and finishes with its counter continuous: the first attempt
// starts from 0, every later one from exactly the step its predecessor had
// checkpointed (the last checkpoint the coordinator accepted from it), and
// each counts on one by one from there.
func TestCheckpointedJobSurvivesTwoCrashes(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.CheckpointInterval = 150 * time.Millisecond },
		"", "a100-80g:1", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 3)
	if _, err := coord.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "steps", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", stepScript}}); err != nil {
		t.Fatal(err)
	}
	// The coordinator keeps only a share's latest checkpoint; a watcher
	// reads each one it accepts, so that the step each attempt had
	// checkpointed last is known after the attempt is gone. An attempt's
	// last checkpoint stays the latest for seconds (until the next attempt
	// runs and checkpoints), far longer than the watcher's poll.
	checkpointed := newCheckpointWatcher(t, coord, "steps")
	defer checkpointed.stop()

	// logOf returns the attempt's output so far.
	logOf := func(runner *Node, p market.Placement) string {
		run, ok := runner.exec.Lookup(attemptName("steps", p.Share, p.Epoch))
		if !ok {
			return ""
		}
		return string(run.Tail())
	}
	starts := map[uint64]int{}
	for epoch := uint64(1); epoch <= 2; epoch++ {
		var p market.Placement
		eventually(t, 20*time.Second, fmt.Sprintf("attempt %d runs", epoch), func() bool {
			rec, _ := coord.Job(context.Background(), "steps")
			var ok bool
			p, ok = livePlacement(rec)
			return ok && p.Epoch == epoch
		})
		runner := sm.byID(p.Node)
		step := fmt.Sprintf("step=%d\n", 10*epoch)
		eventually(t, 20*time.Second, "attempt reaches "+step, func() bool { return strings.Contains(logOf(runner, p), step) })
		eventually(t, 10*time.Second, fmt.Sprintf("a checkpoint of attempt %d at step %d or later", epoch, 10*epoch), func() bool {
			s, ok := checkpointed.last(epoch)
			return ok && s >= int(10*epoch)
		})
		if err := sm.net.Crash(runner.ID()); err != nil {
			t.Fatal(err)
		}
		starts[epoch] = countsOn(t, logOf(runner, p), fmt.Sprintf("attempt %d", epoch))
	}
	rec := waitState(t, coord, "steps", 60*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded || rec.Epoch != 3 {
		t.Fatalf("job %s at epoch %d: %s", rec.State, rec.Epoch, rec.Reason)
	}
	var out bytes.Buffer
	last, _ := latestPlacement(rec, lastShare(rec))
	if err := coord.Logs(context.Background(), api.LogRequest{Job: "steps", Share: last.Share}, &out, func() {}); err != nil {
		t.Fatal(err)
	}
	starts[3] = countsOn(t, out.String(), "attempt 3")
	if !strings.HasSuffix(strings.TrimSpace(out.String()), "step=30") {
		t.Fatalf("the last attempt did not finish the count: %q", out.String())
	}
	if starts[1] != 0 {
		t.Errorf("the first attempt started at step %d, want 0", starts[1])
	}
	for epoch := uint64(2); epoch <= 3; epoch++ {
		want, _ := checkpointed.last(epoch - 1)
		if starts[epoch] != want {
			t.Errorf("attempt %d started at step %d; attempt %d had checkpointed step %d", epoch, starts[epoch], epoch-1, want)
		}
	}
	t.Logf("attempts started at steps %d, %d, %d", starts[1], starts[2], starts[3])
}

// countsOn checks that an attempt's output is "start=S" then step=S+1,
// S+2, ... one by one (the last line may be cut short by a crash), and
// returns S.
func countsOn(t *testing.T, out, what string) int {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var start int
	if _, err := fmt.Sscanf(lines[0], "start=%d", &start); err != nil {
		t.Fatalf("%s: first line %q, want start=N", what, lines[0])
	}
	for i, l := range lines[1:] {
		if want := fmt.Sprintf("step=%d", start+i+1); l != want && !(i == len(lines)-2 && strings.HasPrefix(want, l)) {
			t.Fatalf("%s: line %d is %q, want %s", what, i+1, l, want)
		}
	}
	return start
}

// checkpointWatcher polls a coordinator's latest checkpoint of a job's
// share 0 and remembers, per epoch, the step counter in the last one seen.
type checkpointWatcher struct {
	t    *testing.T
	mu   sync.Mutex
	seen map[uint64]int
	done chan struct{}
	wg   sync.WaitGroup
}

func newCheckpointWatcher(t *testing.T, coord *Node, job string) *checkpointWatcher {
	w := &checkpointWatcher{t: t, seen: map[uint64]int{}, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ref := ""
		for {
			var note checkpointNote
			if coord.store.Get(store.Checkpoints, checkpointKey(job, 0), &note) == nil && note.Ref.Digest != ref {
				if step, err := stepIn(coord, note.Ref); err == nil {
					ref = note.Ref.Digest
					w.mu.Lock()
					w.seen[note.Epoch] = step
					w.mu.Unlock()
				}
			}
			select {
			case <-w.done:
				return
			case <-time.After(5 * time.Millisecond): // polling interval
			}
		}
	}()
	return w
}

func (w *checkpointWatcher) last(epoch uint64) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.seen[epoch]
	return s, ok
}

func (w *checkpointWatcher) stop() {
	close(w.done)
	w.wg.Wait()
}

// stepIn reads the step counter from a checkpoint archive the node holds.
func stepIn(n *Node, ref market.PayloadRef) (int, error) {
	f, err := n.payload.open(ref)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return 0, err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			return 0, fmt.Errorf("no step file in the checkpoint: %w", err)
		}
		if h.Name != "step" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return 0, err
		}
		var step int
		_, err = fmt.Sscanf(string(b), "%d", &step)
		return step, err
	}
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

// An attempt that runs on its job's coordinator ships its checkpoints to
// that node too: they are accepted, with no call to make.
func TestCheckpointOfAJobOnItsOwnCoordinatorIsAccepted(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.CheckpointInterval = 150 * time.Millisecond }, "a100-80g:1")
	n := sm.nodes[0]
	sm.waitBook(n, 1)
	if _, err := n.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "self", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", stepScript}}); err != nil {
		t.Fatal(err)
	}
	w := newCheckpointWatcher(t, n, "self")
	defer w.stop()
	eventually(t, 20*time.Second, "a checkpoint of the attempt accepted by its own coordinator", func() bool {
		s, ok := w.last(1)
		return ok && s > 0
	})
}
