//go:build unix

package executor

import (
	"strings"
	"testing"
	"time"
)

// A note from the node lands, one line, in the running attempt's stderr
// with what the job wrote there itself, and in its tail; after the
// attempt ended nothing more is written.
func TestNoteGoesToTheRunningAttemptsStderr(t *testing.T) {
	ex := newExecutor(t, IsolationProcess, time.Second)
	a := Attempt{JobID: "noted", Epoch: 1, Command: []string{"sh", "-c", "echo working >&2; sleep 30"}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Note("checkpoint not shipped:\nstore full"); err != nil {
		t.Fatal(err)
	}
	want := NotePrefix + "checkpoint not shipped: store full\n"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(readAll(t, ex, a.Name(), Stderr), "working\n"); {
		if time.Now().After(deadline) {
			t.Fatal("the running attempt wrote nothing")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	if got := readAll(t, ex, a.Name(), Stderr); !strings.Contains(got, want) {
		t.Errorf("stderr %q, want it to hold %q", got, want)
	}
	if got := string(r.Tail()); !strings.Contains(got, want) {
		t.Errorf("tail %q, want it to hold %q", got, want)
	}
	r.Stop(StopCancelled)
	waitDone(t, r, 10*time.Second)
	if err := r.Note("too late"); err == nil {
		t.Error("Note wrote to an attempt that ended")
	}
	if got := readAll(t, ex, a.Name(), Stderr); strings.Contains(got, "too late") {
		t.Errorf("stderr %q holds a note written after the end", got)
	}
}
