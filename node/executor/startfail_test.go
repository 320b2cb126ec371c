//go:build unix

package executor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A command the job cannot find does not start; Start's error says which
// and in what words, and StartFailed leaves that line where the owner
// reads the attempt's stderr, with an empty stdout.
func TestCommandNotFoundIsReadableOnStderr(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		a := Attempt{JobID: "nosmi", Epoch: 1, Command: []string{"no-such-tool-4711", "-L"}}
		_, err := ex.Start(a)
		if !errors.Is(err, exec.ErrNotFound) || !strings.HasSuffix(err.Error(), "executable file not found in $PATH: no-such-tool-4711") {
			t.Fatalf("Start = %v, want a not-found error naming the command", err)
		}
		if err := ex.StartFailed(a, strings.TrimPrefix(err.Error(), "executor: ")); err != nil {
			t.Fatal(err)
		}
		if got, want := readAll(t, ex, a.Name(), Stderr), StartFailedPrefix+"executable file not found in $PATH: no-such-tool-4711\n"; got != want {
			t.Errorf("stderr %q, want %q", got, want)
		}
		if got := readAll(t, ex, a.Name(), Stdout); got != "" {
			t.Errorf("stdout %q, want empty", got)
		}
	})
}

// A failure before Start (the payload could not be fetched) leaves a
// readable stderr too; a running attempt's logs are never overwritten.
func TestStartFailedBeforeStartAndNotWhileRunning(t *testing.T) {
	ex := newExecutor(t, IsolationProcess, time.Second)
	a := Attempt{JobID: "nopayload", Share: 2, Epoch: 7, Command: []string{"true"}}
	if err := ex.StartFailed(a, "payload sha256:ab12: no holder\nanswered"); err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, ex, a.Name(), Stderr), StartFailedPrefix+"payload sha256:ab12: no holder answered\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	run := Attempt{JobID: "busy", Epoch: 1, Command: []string{"sh", "-c", "echo working >&2; sleep 30"}}
	r, err := ex.Start(run)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); readAll(t, ex, run.Name(), Stderr) == ""; {
		if time.Now().After(deadline) {
			t.Fatal("the running attempt wrote nothing")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	if err := ex.StartFailed(run, "nonsense"); err == nil {
		t.Error("StartFailed wrote over a running attempt")
	}
	r.Stop(StopCancelled)
	waitDone(t, r, 10*time.Second)
	if got := readAll(t, ex, run.Name(), Stderr); got != "working\n" {
		t.Errorf("the running attempt's stderr became %q", got)
	}
	if err := ex.StartFailed(Attempt{JobID: "../escape", Epoch: 1}, "x"); err == nil {
		t.Error("StartFailed took a job ID that is not one")
	}
}

// In the sandbox, a command found only in a directory the sandbox hides
// (a tool under /root on the node) is not found, and the error says where
// it is and why the job cannot run it. In process mode it runs.
func TestCommandInAHiddenDirectory(t *testing.T) {
	hidden := t.TempDir()
	tool := filepath.Join(hidden, "mytool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	a := Attempt{JobID: "hidden", Epoch: 1, Command: []string{"mytool"}, Env: map[string]string{"PATH": hidden + ":/usr/bin:/bin"}}
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex, err := New(Config{Root: t.TempDir(), Grace: time.Second, Isolation: iso, HideDirs: []string{hidden}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
		r, err := ex.Start(a)
		if iso == IsolationProcess {
			if err != nil {
				t.Fatalf("process mode: %v", err)
			}
			if res := waitDone(t, r, 10*time.Second); res.ExitCode != 0 || readAll(t, ex, a.Name(), Stdout) != "ran\n" {
				t.Fatalf("process mode: exit %d, stdout %q", res.ExitCode, readAll(t, ex, a.Name(), Stdout))
			}
			return
		}
		want := "executable file not found in $PATH: mytool (" + tool + " is in " + hidden + ", which the sandbox hides from jobs)"
		if err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Fatalf("sandbox: Start = %v, want it to end %q", err, want)
		}
	})
}
