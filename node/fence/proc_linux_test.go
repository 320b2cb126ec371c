package fence

import (
	"testing"
	"time"
)

// A node prearms an attempt and freezes, or dies, before it can arm it
// with the process group it has just started: the keeper finds the
// attempt's processes by their environment when the deadline passes, and
// kills them and only them.
func TestKeeperFencesAPrearmedAttemptByItsEnvironment(t *testing.T) {
	k, _ := startKeeper(t)
	v := startVictim(t, AttemptEnv+"=job-p-s0-e1")
	other := startVictim(t, AttemptEnv+"=job-p-s0-e10") // a key that begins the same
	const within = 200 * time.Millisecond
	start := time.Now()
	if err := k.Prearm("job-p-s0-e1", within); err != nil {
		t.Fatal(err)
	}
	if key := nextFenced(t, k); key != "job-p-s0-e1" {
		t.Fatalf("fenced %q", key)
	}
	if took := time.Since(start); took < within {
		t.Fatalf("fenced after %v, before its deadline of %v", took, within)
	}
	v.dies("prearmed past its deadline")
	if !other.alive() {
		t.Error("a process of another attempt was killed")
	}
	if err := k.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
