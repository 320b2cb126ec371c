package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/executor"
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
	checkpointed := newCheckpointWatcher(t, sm, coord, "steps")
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

// checkpointWatcher polls a coordinator's record of a job for the
// checkpoints of its share 0 and remembers, per epoch, the step counter
// in the last one seen (read from a node of the mesh that holds it).
type checkpointWatcher struct {
	t    *testing.T
	mu   sync.Mutex
	seen map[uint64]int
	done chan struct{}
	wg   sync.WaitGroup
}

func newCheckpointWatcher(t *testing.T, sm *simMesh, coord *Node, job string) *checkpointWatcher {
	w := &checkpointWatcher{t: t, seen: map[uint64]int{}, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		manifest := ""
		for {
			if rec, err := coord.Job(context.Background(), job); err == nil {
				if cp := newestCheckpoint(rec, 0); cp != nil && cp.Manifest != manifest {
					if step, err := stepIn(t, sm, cp.Manifest); err == nil {
						manifest = cp.Manifest
						w.mu.Lock()
						w.seen[cp.Epoch] = step
						w.mu.Unlock()
					}
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

// stepIn reads the step counter from a checkpoint that a live node of the
// mesh holds whole.
func stepIn(t *testing.T, sm *simMesh, manifest string) (int, error) {
	m, err := blob.ParseDigest(manifest)
	if err != nil {
		return 0, err
	}
	for _, n := range sm.nodes {
		if n == nil || n.ctx.Err() != nil || n.holdsWhole(m) != nil {
			continue
		}
		dir := filepath.Join(t.TempDir(), "ckpt")
		if err := n.blobs.Restore(context.Background(), m, dir); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "step"))
		if err != nil {
			return 0, fmt.Errorf("no step file in the checkpoint: %w", err)
		}
		var step int
		_, err = fmt.Sscanf(string(b), "%d", &step)
		return step, err
	}
	return 0, fmt.Errorf("no node holds %s whole", manifest)
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
// another member, and the coordinator records them with no call to make.
func TestCheckpointOfAJobOnItsOwnCoordinatorIsAccepted(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.CheckpointInterval = 150 * time.Millisecond }, "a100-80g:1", "")
	n := sm.nodes[0]
	sm.waitBook(n, 1)
	id := firstID("self", func(id string) bool { return market.Coordinators(id, peerIDs(sm.nodes), 1)[0] == n.ID().String() })
	if _, err := n.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", stepScript}}); err != nil {
		t.Fatal(err)
	}
	w := newCheckpointWatcher(t, sm, n, id)
	defer w.stop()
	eventually(t, 20*time.Second, "a checkpoint of the attempt accepted by its own coordinator", func() bool {
		s, ok := w.last(1)
		return ok && s > 0
	})
	rec, _ := n.Job(context.Background(), id)
	cp := newestCheckpoint(rec, 0)
	if cp == nil || len(cp.Holders) != 2 || cp.Holders[0] != n.ID().String() || cp.Holders[1] != sm.nodes[1].ID().String() {
		t.Errorf("checkpoint %+v, want one held by the runner and the other member", cp)
	}
}

// A node started with CheckpointKeep 3 (--checkpoint-keep 3) keeps the
// newest three checkpoints of a share in the records it coordinates, not
// the default two, and never more.
func TestCheckpointKeepSetsHowManyCheckpointsTheRecordKeeps(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.CheckpointInterval, c.CheckpointKeep = 100*time.Millisecond, 3 }, "a100-80g:1", "")
	n := sm.nodes[0]
	sm.waitBook(n, 1)
	if _, err := n.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "keep3", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", stepScript}}); err != nil {
		t.Fatal(err)
	}
	most, distinct := 0, map[string]bool{}
	eventually(t, 30*time.Second, "five checkpoints taken, the record keeping the newest three", func() bool {
		rec, err := n.Job(context.Background(), "keep3")
		if err != nil {
			return false
		}
		most = max(most, len(rec.Checkpoints))
		for _, cp := range rec.Checkpoints {
			distinct[cp.Manifest] = true
		}
		return len(distinct) >= 5 && len(rec.Checkpoints) == 3
	})
	if most > 3 {
		t.Errorf("the record held %d checkpoints of one share at once, want at most 3", most)
	}
}

// A job alone on a node that no other member could hold a checkpoint for
// goes on, but its checkpoints do not count: the record has none.
func TestCheckpointHeldByItsRunnerAloneDoesNotCount(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.CheckpointInterval = 100 * time.Millisecond }, "a100-80g:1")
	n := sm.nodes[0]
	sm.waitBook(n, 1)
	if _, err := n.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "alone", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", stepScript}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, n, "alone", 30*time.Second, market.JobSucceeded)
	if len(rec.Checkpoints) != 0 {
		t.Errorf("checkpoints %+v recorded with no holder but the runner", rec.Checkpoints)
	}
}

// fullScript checkpoints step 1, waits for $GO, then writes a checkpoint
// of 6 MiB (past a 4 MiB store), and runs on until $DONE.
const fullScript = `d=$GPUMESH_CHECKPOINT_DIR
echo 1 > $d/step && touch $d/.ready
echo first
while [ ! -e "$GO" ]; do sleep 0.05; done
head -c 6291456 /dev/urandom > $HOME/big && mv $HOME/big $d/big
echo 2 > $d/step && touch $d/.ready
echo second
while [ ! -e "$DONE" ]; do sleep 0.05; done
echo done`

// A checkpoint that does not fit a store — the runner's, or that of the
// member that would hold it — is not shipped: the job's stderr says why,
// naming the full store; the job runs on and ends as it would have; the
// record's newest checkpoint is still the previous one, which its holder
// still has whole and restores.
func TestCheckpointIntoAFullStoreKeepsTheJobAndThePreviousCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		runner bool // the runner's store is the small one, else the holder's
		want   string
	}{
		{"runner's store", true, "blob: store full:"},
		{"holder's store", false, "no member would hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fullStore(t, tc.runner, tc.want)
		})
	}
}

func fullStore(t *testing.T, smallRunner bool, want string) {
	sm := newSimMeshWith(t, func(c *Config) {
		c.CheckpointInterval = time.Hour // only when the job asks (.ready)
		if runs := len(c.Devices) > 0; runs == smallRunner {
			c.StoreMax = 4 << 20
		}
	}, "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(runner)
	sm.waitBook(coord, 1)
	marks := t.TempDir()
	goFile, doneFile := filepath.Join(marks, "go"), filepath.Join(marks, "done")
	spec := market.JobSpec{AllowSimulated: true, ID: "full", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", fullScript},
		Env: map[string]string{"GO": goFile, "DONE": doneFile}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	var first *market.Checkpoint
	eventually(t, 20*time.Second, "the first checkpoint in the record", func() bool {
		rec, _ := coord.Job(context.Background(), "full")
		first = newestCheckpoint(rec, 0)
		return first != nil
	})
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	run, ok := runner.exec.Lookup(attemptName("full", first.Share, first.Epoch))
	if !ok {
		t.Fatal("the runner has no such attempt")
	}
	var stderr string
	eventually(t, 20*time.Second, "the job's stderr says the checkpoint was not shipped", func() bool {
		b, _, err := executor.ReadLog(filepath.Join(runner.cfg.DataDir, "attempts"), run.Attempt().Name(), executor.Stderr, 0, 1<<20)
		stderr = string(b)
		return err == nil && strings.Contains(stderr, "not shipped")
	})
	if !strings.HasPrefix(stderr, executor.NotePrefix+"checkpoint of ") || !strings.Contains(stderr, "the job goes on and its previous checkpoint stays: ") ||
		!strings.Contains(stderr, want) || !strings.Contains(stderr, "store full") {
		t.Errorf("stderr %q, want a note saying %q, naming the full store", stderr, want)
	}
	t.Logf("the job's stderr: %s", stderr)
	select {
	case <-run.Done():
		t.Fatalf("the job ended when its checkpoint did not fit: %+v", run.Result())
	default:
	}
	rec, _ := coord.Job(context.Background(), "full")
	if cp := newestCheckpoint(rec, 0); cp == nil || cp.Manifest != first.Manifest {
		t.Fatalf("newest checkpoint %+v, want still %s", cp, first.Manifest)
	}
	if step, err := stepIn(t, sm, first.Manifest); err != nil || step != 1 {
		t.Fatalf("the previous checkpoint restores step %d (%v), want 1", step, err)
	}

	if err := os.WriteFile(doneFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rec = waitState(t, coord, "full", 30*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded || rec.Epoch != 1 {
		t.Fatalf("job %s at epoch %d (%s), want succeeded in its first attempt", rec.State, rec.Epoch, rec.Reason)
	}
	if out := string(run.Tail()); !strings.Contains(out, "second") || !strings.Contains(out, "done") {
		t.Errorf("the job's output %q: want it to have run on to the end", out)
	}
}
