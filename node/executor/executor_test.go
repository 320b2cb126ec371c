//go:build unix

package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// forEachIsolation runs a behaviour test in process mode and, where this
// host can provide it, in sandbox mode: what a job sees of its own run must
// not depend on the isolation.
func forEachIsolation(t *testing.T, test func(t *testing.T, iso Isolation)) {
	t.Run("process", func(t *testing.T) { test(t, IsolationProcess) })
	t.Run("sandbox", func(t *testing.T) {
		requireSandbox(t)
		test(t, IsolationSandbox)
	})
}

// requireSandbox skips the test when this host cannot run the sandbox,
// saying why.
func requireSandbox(t testing.TB) {
	t.Helper()
	ex, err := New(Config{Root: t.TempDir(), Isolation: IsolationSandbox})
	if err != nil {
		if errors.Is(err, ErrSandboxUnavailable) {
			t.Skipf("sandbox tests need Linux, root, namespaces and cgroups: %v", err)
		}
		t.Fatal(err)
	}
	ex.Close()
}

func newExecutor(t *testing.T, iso Isolation, grace time.Duration) *Executor {
	t.Helper()
	ex, err := New(Config{Root: t.TempDir(), Grace: grace, TailBytes: 1024, Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

func waitDone(t *testing.T, r *Run, within time.Duration) Result {
	t.Helper()
	select {
	case <-r.Done():
		return r.Result()
	case <-time.After(within):
		t.Fatalf("attempt %s still running after %v", r.Attempt().Name(), within)
		return Result{}
	}
}

func readAll(t testing.TB, ex *Executor, name string, s Stream) string {
	t.Helper()
	b, _, err := ReadLog(ex.cfg.Root, name, s, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestJobSeesItsEnvironmentAndNotTheNodes(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		t.Setenv("GPUMESH_NODE_SECRET", "do-not-leak")
		ex := newExecutor(t, iso, time.Second)
		a := Attempt{
			JobID: "job-1", Share: 1, Epoch: 3,
			Command:    []string{"sh", "-c", "env | sort"},
			Env:        map[string]string{"USER_VAR": "hello", "GPUMESH_EPOCH": "999"},
			DeviceEnv:  map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
			LocalCards: 2,
			Gang:       &Gang{NNodes: 2, NodeRank: 1, MasterAddr: "10.0.0.5", MasterPort: 29500, WorldSize: 8},
		}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		res := waitDone(t, r, 10*time.Second)
		if res.ExitCode != 0 {
			t.Fatalf("exit code %d", res.ExitCode)
		}
		out := readAll(t, ex, a.Name(), Stdout)
		for _, want := range []string{
			"USER_VAR=hello", "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
			"GPUMESH_JOB_ID=job-1", "GPUMESH_SHARE=1", "GPUMESH_EPOCH=3", "GPUMESH_LOCAL_CARDS=2", "GPUMESH_ATTEMPT=job-1-s1-e3",
			"NNODES=2", "NODE_RANK=1", "MASTER_ADDR=10.0.0.5", "MASTER_PORT=29500", "WORLD_SIZE=8",
			"HOME=" + r.WorkDir(), "GPUMESH_CHECKPOINT_DIR=" + r.CheckpointDir(),
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("job env lacks %q; got:\n%s", want, out)
			}
		}
		if strings.Contains(out, "do-not-leak") {
			t.Errorf("the node's environment leaked into the job:\n%s", out)
		}
		fi, err := os.Stat(r.Dir())
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("attempt dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
		}
	})
}

func TestExitCodeAndStreams(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		a := Attempt{JobID: "j", Command: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		res := waitDone(t, r, 10*time.Second)
		if res.ExitCode != 7 || res.Stopped != "" || res.Signal != "" {
			t.Fatalf("result = %+v, want exit 7 by itself", res)
		}
		if got := readAll(t, ex, a.Name(), Stdout); got != "out\n" {
			t.Errorf("stdout = %q", got)
		}
		if got := readAll(t, ex, a.Name(), Stderr); got != "err\n" {
			t.Errorf("stderr = %q", got)
		}
		if res.Seconds() <= 0 {
			t.Errorf("run time %v must be positive", res.Seconds())
		}
	})
}

func TestStopIsTermThenKillAndReachesTheWholeGroup(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, 300*time.Millisecond)
		// The job ignores SIGTERM and leaves a grandchild that would outlive it.
		a := Attempt{JobID: "stubborn", Command: []string{"sh", "-c",
			`trap '' TERM; (trap '' TERM; sleep 300) & echo $! > child.pid; echo ready; while :; do sleep 0.05; done`}}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return strings.Contains(string(r.Tail()), "ready") })
		pidText, err := os.ReadFile(filepath.Join(r.WorkDir(), "child.pid"))
		if err != nil {
			t.Fatal(err)
		}
		var child int
		if _, err := fmt.Sscan(strings.TrimSpace(string(pidText)), &child); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r.Stop(StopCancelled)
		res := waitDone(t, r, 10*time.Second)
		if res.Stopped != StopCancelled || res.Signal != "killed" || res.ExitCode != -1 {
			t.Fatalf("result = %+v, want killed after cancel", res)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("SIGKILL came after %v, before the 300ms grace period", took)
		}
		waitFor(t, 5*time.Second, func() bool { return syscall.Kill(child, 0) != nil })
	})
}

func TestStopGracefulExit(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, 10*time.Second)
		a := Attempt{JobID: "polite", Command: []string{"sh", "-c", `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`}}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return strings.Contains(string(r.Tail()), "ready") })
		r.Stop(StopFenced)
		res := waitDone(t, r, 5*time.Second) // well before the 10s grace
		if res.Stopped != StopFenced || res.ExitCode != 0 {
			t.Fatalf("result = %+v", res)
		}
		if !strings.Contains(string(r.Tail()), "bye") {
			t.Errorf("tail %q lacks the job's goodbye", r.Tail())
		}
	})
}

// writeFiles returns a Work hook that writes files (mode 0700) into the
// work directory.
func writeFiles(files map[string]string) func(string) error {
	return func(dir string) error {
		for name, body := range files {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(body), 0o700); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestWorkHookFillsTheWorkDir(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		a := Attempt{JobID: "p", Command: []string{"sh", "run.sh"}, Work: writeFiles(map[string]string{
			"run.sh":         "#!/bin/sh\ncat data/input.txt\n",
			"data/input.txt": "payload-ok\n",
		})}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		if res := waitDone(t, r, 10*time.Second); res.ExitCode != 0 {
			t.Fatalf("exit %d: %s", res.ExitCode, r.Tail())
		}
		if got := readAll(t, ex, a.Name(), Stdout); got != "payload-ok\n" {
			t.Errorf("stdout = %q", got)
		}
	})
}

// A Work hook that fails fails the start, saying why; nothing runs.
func TestFailedWorkHookFailsTheStart(t *testing.T) {
	ex := newExecutor(t, IsolationProcess, time.Second)
	_, err := ex.Start(Attempt{JobID: "bad", Command: []string{"touch", "ran"}, Work: func(string) error {
		return errors.New("payload sha256:ab12: no holder answered")
	}})
	if err == nil || !strings.Contains(err.Error(), "payload sha256:ab12: no holder answered") {
		t.Fatalf("start with a failing hook: %v", err)
	}
	if _, ok := ex.Lookup(Attempt{JobID: "bad"}.Name()); ok {
		t.Error("a start that failed is still listed")
	}
}

func TestBadAttemptsAreRefused(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		for name, a := range map[string]Attempt{
			"no command":     {JobID: "j"},
			"bad job id":     {JobID: "../x", Command: []string{"true"}},
			"missing":        {JobID: "j", Command: []string{"no-such-command-gpumesh"}},
			"bad env":        {JobID: "j", Command: []string{"true"}, Env: map[string]string{"A=B": "c"}},
			"negative share": {JobID: "j", Share: -1, Command: []string{"true"}},
		} {
			if _, err := ex.Start(a); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
		if n := len(ex.Running()); n != 0 {
			t.Errorf("%d attempts running after refusals", n)
		}
	})
}

func TestTailIsBoundedAndFollowersAreWoken(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		a := Attempt{JobID: "noisy", Command: []string{"sh", "-c", "i=0; while [ $i -lt 500 ]; do echo line-$i; i=$((i+1)); done"}}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		changed := r.Changed()
		waitDone(t, r, 10*time.Second)
		select {
		case <-changed:
		default:
			t.Error("followers were not woken")
		}
		tail := r.Tail()
		if len(tail) > 1024 || !strings.HasSuffix(string(tail), "line-499\n") {
			t.Errorf("tail is %d bytes ending %q", len(tail), tail[max(0, len(tail)-20):])
		}
		full := readAll(t, ex, a.Name(), Stdout)
		if !strings.HasPrefix(full, "line-0\n") || strings.Count(full, "\n") != 500 {
			t.Errorf("log file has %d lines", strings.Count(full, "\n"))
		}
		part, next, err := ReadLog(ex.cfg.Root, a.Name(), Stdout, 7, 7)
		if err != nil || string(part) != "line-1\n" || next != 14 {
			t.Errorf("ReadLog(7,7) = %q, %d, %v", part, next, err)
		}
	})
}

func TestCloseStopsEverything(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex, err := New(Config{Root: t.TempDir(), Grace: 200 * time.Millisecond, Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		var runs []*Run
		for i := 0; i < 3; i++ {
			r, err := ex.Start(Attempt{JobID: "long", Share: i, Command: []string{"sleep", "300"}})
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, r)
		}
		ex.Close()
		for _, r := range runs {
			select {
			case <-r.Done():
				if r.Result().Stopped != StopShutdown {
					t.Errorf("stopped = %q", r.Result().Stopped)
				}
			default:
				t.Error("Close returned with an attempt still running")
			}
		}
		if _, err := ex.Start(Attempt{JobID: "late", Command: []string{"true"}}); !errors.Is(err, ErrClosed) {
			t.Errorf("Start after Close: %v", err)
		}
	})
}

func waitFor(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopWhilePreparingStopsTheJobOnceStarted(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, 200*time.Millisecond)
		reading, open := make(chan struct{}), make(chan struct{})
		a := Attempt{JobID: "early-stop", Command: []string{"sleep", "300"}, Work: func(string) error {
			close(reading)
			<-open
			return nil
		}}
		started := make(chan *Run, 1)
		go func() {
			r, err := ex.Start(a)
			if err != nil {
				t.Error(err)
			}
			started <- r
		}()
		<-reading
		r, ok := ex.Lookup(a.Name())
		if !ok {
			t.Fatal("an attempt being prepared is not listed")
		}
		if uid := r.UID(); uid != -1 {
			t.Errorf("UID while preparing = %d, want -1", uid)
		}
		r.Stop(StopCancelled)
		close(open)
		if got := <-started; got != r {
			t.Fatalf("Start returned %p, Lookup %p", got, r)
		}
		if res := waitDone(t, r, 10*time.Second); res.Stopped != StopCancelled || res.Signal == "" {
			t.Errorf("result %+v, want stopped by the early cancel", res)
		}
	})
}

// While an attempt's checkpoint is being restored the run is listed (a
// drain waits for it) but not started: what its checkpoint directory
// holds then is part of an older checkpoint, which the node must not ship
// as the attempt's own.
func TestARunRestoringItsCheckpointIsNotStarted(t *testing.T) {
	ex := newExecutor(t, IsolationProcess, time.Second)
	restoring, release := make(chan *Run, 1), make(chan struct{})
	a := Attempt{JobID: "job-1", Share: 0, Epoch: 2, Command: []string{"sh", "-c", `cat "$GPUMESH_CHECKPOINT_DIR/state"`}}
	a.Checkpoint = func(dir string) error {
		for _, r := range ex.Running() {
			restoring <- r
		}
		<-release
		return os.WriteFile(filepath.Join(dir, "state"), []byte("step 7"), 0o600)
	}
	started := make(chan *Run, 1)
	go func() {
		r, err := ex.Start(a)
		if err != nil {
			t.Error(err)
		}
		started <- r
	}()
	r := <-restoring
	if r.Started() {
		t.Fatal("a run restoring its checkpoint says it started")
	}
	close(release)
	r = <-started
	if r == nil {
		return
	}
	if !r.Started() {
		t.Fatal("a run whose process started says it did not")
	}
	if res := waitDone(t, r, 10*time.Second); res.ExitCode != 0 {
		t.Fatalf("exit code %d", res.ExitCode)
	}
	if out := readAll(t, ex, a.Name(), Stdout); out != "step 7" {
		t.Fatalf("the job read %q from its restored checkpoint, want %q", out, "step 7")
	}
}

// Attempt.Starting hears that the process is about to start, once and
// before Started; Started hears of the process before Start returns, with
// the group and cgroup that Run.Process reports afterwards, while the
// process runs: a fence keeper told there knows the process before the
// node can freeze with it unknown.
func TestStartedHearsOfTheProcessBeforeStartReturns(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		type told struct {
			pgid    int
			cgroup  string
			running bool
		}
		var got []told
		starting := 0
		a := Attempt{JobID: "told", Command: []string{"sleep", "30"}}
		a.Starting = func() { starting++ }
		a.Started = func(pgid int, cgroup string) {
			if starting != 1 {
				t.Errorf("Started after %d calls of Starting, want 1", starting)
			}
			got = append(got, told{pgid, cgroup, syscall.Kill(-pgid, 0) == nil})
		}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { r.Stop(StopCancelled); waitDone(t, r, 10*time.Second) }()
		pgid, cgroup, ok := r.Process()
		if !ok {
			t.Fatal("Process: not started after Start returned")
		}
		if len(got) != 1 || got[0] != (told{pgid, cgroup, true}) {
			t.Errorf("Started was told %+v; want once, before Start returned, {pgid %d cgroup %q running}", got, pgid, cgroup)
		}
	})
}
