//go:build unix

package executor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An ended attempt's work and tmp directories go with Tidy, never while it
// runs; its logs and checkpoint directory stay.
func TestTidyRemovesWorkAndKeepsLogs(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		a := Attempt{JobID: "tidy", Command: []string{"sh", "-c",
			`echo out; mkdir -p outputs && echo w > outputs/w; echo c > "$GPUMESH_CHECKPOINT_DIR/c"; echo t > "$TMPDIR/t"; exec sleep 300`}}
		r, err := ex.Start(a)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(r.WorkDir(), "outputs", "w"))
			return err == nil
		})
		if err := ex.Tidy(a.Name()); err == nil || !strings.Contains(err.Error(), "still running") {
			t.Errorf("Tidy of a running attempt: %v", err)
		}
		if _, err := os.Stat(filepath.Join(r.WorkDir(), "outputs", "w")); err != nil {
			t.Errorf("a refused Tidy removed the running attempt's work: %v", err)
		}
		r.Stop(StopCancelled)
		waitDone(t, r, 10*time.Second)
		if b, err := os.ReadFile(filepath.Join(r.WorkDir(), "outputs", "w")); err != nil || string(b) != "w\n" {
			t.Fatalf("the outputs are gone before Tidy: %q %v", b, err)
		}
		if err := ex.Tidy(a.Name()); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{r.WorkDir(), r.tmpDir()} {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s after Tidy: %v", d, err)
			}
		}
		if got := readAll(t, ex, a.Name(), Stdout); got != "out\n" {
			t.Errorf("stdout after Tidy: %q", got)
		}
		if b, err := os.ReadFile(filepath.Join(r.CheckpointDir(), "c")); err != nil || string(b) != "c\n" {
			t.Errorf("checkpoint after Tidy: %q %v", b, err)
		}
		for _, bad := range []string{"", ".", "..", "../x", "a/b"} {
			if err := ex.Tidy(bad); err == nil {
				t.Errorf("Tidy(%q) did not fail", bad)
			}
		}
	})
}

// Prune removes attempts that ended before its time, logs and all; it
// tidies those left by a start that failed or by the node's last run, and
// leaves running attempts and those whose runner has not tidied them yet.
func TestPruneRemovesOldAttemptsAndTidiesLeftovers(t *testing.T) {
	ex := newExecutor(t, IsolationProcess, time.Second)
	now := time.Now()
	long := now.Add(-2 * time.Hour)
	age := func(name string) {
		t.Helper()
		dir := filepath.Join(ex.Root(), name)
		for _, p := range []string{filepath.Join(dir, stdoutFileName), filepath.Join(dir, stderrFileName), dir} {
			if err := os.Chtimes(p, long, long); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(job, script string) *Run {
		t.Helper()
		r, err := ex.Start(Attempt{JobID: job, Command: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ended := func(job string, tidy bool) *Run {
		t.Helper()
		r := run(job, "echo "+job+" > out; echo "+job)
		waitDone(t, r, 10*time.Second)
		if tidy {
			if err := ex.Tidy(r.Attempt().Name()); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	old, recent, untidied := ended("old", true), ended("recent", true), ended("untidied", false)
	running := run("running", "echo up > out; exec sleep 300")
	t.Cleanup(func() { running.Stop(StopCancelled); <-running.Done() })
	waitFor(t, 10*time.Second, func() bool { _, err := os.Stat(filepath.Join(running.WorkDir(), "out")); return err == nil })
	// What the node's last run left: an attempt directory with its work.
	left := filepath.Join(ex.Root(), Attempt{JobID: "left"}.Name())
	for _, d := range []string{left, filepath.Join(left, payloadDirName), filepath.Join(left, tmpDirName)} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(left, stdoutFileName), filepath.Join(left, payloadDirName, "out")} {
		if err := os.WriteFile(f, []byte("left\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stray := filepath.Join(ex.Root(), "not-an-attempt")
	if err := os.WriteFile(stray, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lostFound := filepath.Join(ex.Root(), "lost+found") // Root on a file system of its own
	if err := os.Mkdir(lostFound, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(lostFound, long, long); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Run{old, untidied, running} {
		age(r.Attempt().Name())
	}

	removed, err := ex.Prune(now.Add(-time.Hour))
	if err != nil || removed != 1 {
		t.Fatalf("Prune: %d removed, %v; want 1", removed, err)
	}
	if _, err := os.Stat(old.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the attempt that ended 2 h ago is still there: %v", err)
	}
	if got := readAll(t, ex, recent.Attempt().Name(), Stdout); got != "recent\n" {
		t.Errorf("the recent attempt's log: %q", got)
	}
	for _, f := range []string{filepath.Join(untidied.WorkDir(), "out"), filepath.Join(running.WorkDir(), "out"), filepath.Join(left, stdoutFileName), stray, lostFound} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, d := range []string{filepath.Join(left, payloadDirName), filepath.Join(left, tmpDirName)} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the leftover %s is still there: %v", d, err)
		}
	}
	// Once its runner tidied it, an old attempt goes too.
	if err := ex.Tidy(untidied.Attempt().Name()); err != nil {
		t.Fatal(err)
	}
	age(untidied.Attempt().Name())
	if removed, err := ex.Prune(now.Add(-time.Hour)); err != nil || removed != 1 {
		t.Errorf("second Prune: %d removed, %v; want 1", removed, err)
	}
	if _, err := os.Stat(untidied.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tidied old attempt is still there: %v", err)
	}
}
