package node

import (
	"testing"
	"time"
)

// A node frozen past its attempt's deadline: the keeper killed the
// attempt while the node could do nothing. On resume the node's driver
// may see a fresh ack (the node coordinates the job itself and acks its
// own renewal at once) before the attempt's watcher reports the end.
// Re-arming then moved the deadline past the process's end, and the
// keeper's kill was reported as the job's own exit (-1): the job failed,
// though it had done nothing wrong (soak seed 1796552737507232241).
func TestAnAttemptWhoseDeadlinePassedEndsFencedWhateverAckComesLater(t *testing.T) {
	const lostAfter = 2700 * time.Millisecond
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var f fenceState
	within, arm, lapsed := f.next(t0, lostAfter, t0)
	if !arm || lapsed || within != lostAfter-fenceMargin {
		t.Fatalf("first arm: within %v arm %v lapsed %v; want %v true false", within, arm, lapsed, lostAfter-fenceMargin)
	}
	f.armedAt(t0, t0.Add(within))

	// Renewed in time: the deadline moves.
	t1 := t0.Add(time.Second)
	within, arm, _ = f.next(t1, lostAfter, t1)
	if !arm || within != lostAfter-fenceMargin {
		t.Fatalf("renewed in time: within %v arm %v", within, arm)
	}
	f.armedAt(t1, t1.Add(within))
	// An ack no newer than the armed one changes nothing.
	if _, arm, _ = f.next(t1, lostAfter, t1.Add(100*time.Millisecond)); arm {
		t.Errorf("an ack already armed from was armed again")
	}

	// Frozen for 4.5 s: the node resumes past the deadline with a fresh ack.
	resumed := t1.Add(4500 * time.Millisecond)
	if _, arm, lapsed = f.next(resumed, lostAfter, resumed); arm || !lapsed {
		t.Fatalf("after the freeze: arm %v lapsed %v; want the deadline kept and the lapse reported", arm, lapsed)
	}
	if _, arm, lapsed = f.next(resumed.Add(time.Second), lostAfter, resumed.Add(time.Second)); arm || lapsed {
		t.Errorf("a lapsed attempt: arm %v lapsed %v; want nothing more", arm, lapsed)
	}
	// The watcher saw the process end as the node resumed (the keeper
	// killed it while the node was frozen): fenced.
	if armed, fenced := f.end(resumed); !armed || !fenced {
		t.Errorf("end after the lapse: armed %v fenced %v; want both", armed, fenced)
	}
	if _, arm, _ = f.next(resumed.Add(2*time.Second), lostAfter, resumed.Add(2*time.Second)); arm {
		t.Errorf("an attempt whose end was seen was armed again")
	}
}

func TestAnAttemptThatEndsBeforeItsDeadlineEndsByItself(t *testing.T) {
	const lostAfter = 2700 * time.Millisecond
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var f fenceState
	within, _, _ := f.next(t0, lostAfter, t0)
	f.armedAt(t0, t0.Add(within))
	if armed, fenced := f.end(t0.Add(time.Second)); !armed || fenced {
		t.Errorf("ended before the deadline: armed %v fenced %v; want armed, not fenced", armed, fenced)
	}
	// Never armed (the keeper refused): not fenced, and nothing to disarm.
	var g fenceState
	if armed, fenced := g.end(t0.Add(10 * time.Second)); armed || fenced {
		t.Errorf("never armed: armed %v fenced %v", armed, fenced)
	}
	// Once it ended, no later ack arms it again: the keeper must not kill
	// a process group the system may give another process.
	if _, arm, _ := g.next(t0.Add(11*time.Second), lostAfter, t0.Add(11*time.Second)); arm {
		t.Errorf("an attempt whose end was seen was armed")
	}
}
