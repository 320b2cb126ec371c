package node

import (
	"log/slog"
	"sync"
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

// recordingFencer notes what the node tells its keeper.
type recordingFencer struct {
	mu   sync.Mutex
	arms []armed
}

type armed struct {
	key    string
	pgid   int
	within time.Duration
}

func (f *recordingFencer) Arm(key string, pgid int, _ string, within time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arms = append(f.arms, armed{key, pgid, within})
	return nil
}

func (f *recordingFencer) Prearm(key string, within time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arms = append(f.arms, armed{key, 0, within})
	return nil
}

func (f *recordingFencer) Disarm(string) error { return nil }

// A node frozen after it decided to start an attempt, and before any tick
// saw the attempt's lease, starts the process when it resumes. Its
// coordinator counts LostAfter from the award, so the share may already
// run elsewhere: the keeper must kill the process at once, not LostAfter
// after the start (which let two attempts of a share run together for
// 1.5 s in CI's churn test, seed 1796595731053858666).
func TestAnAttemptStartedAfterAFreezeIsFencedFromItsDecision(t *testing.T) {
	const lostAfter = 2700 * time.Millisecond
	k := &recordingFencer{}
	n := &Node{fences: newFences(k), lostAfter: lostAfter, log: slog.New(slog.DiscardHandler)}
	frozen := attemptKey{"j1", 0, 1}
	n.armStarted(frozen, &runSlot{}, 4242, "", time.Now().Add(-5*time.Second))
	fresh := attemptKey{"j2", 0, 1}
	n.armStarted(fresh, &runSlot{}, 4343, "", time.Now())
	// Seen by a tick: the lease's ack counts, not the decision.
	renewed := attemptKey{"j3", 0, 1}
	n.fences.acked[renewed] = time.Now()
	n.armStarted(renewed, &runSlot{}, 4444, "", time.Now().Add(-time.Minute))

	// Prearmed before the start, from the same moment: the keeper finds
	// the process by its environment should the node freeze within the
	// start itself.
	n.prearm(frozen, &runSlot{}, time.Now().Add(-5*time.Second))

	if len(k.arms) != 4 {
		t.Fatalf("the keeper was told %+v; want three arms and a prearm", k.arms)
	}
	if a := k.arms[3]; a.key != attemptName("j1", 0, 1) || a.pgid != 0 || a.within != 0 {
		t.Errorf("prearmed, decided 5 s ago: %+v; want its processes killed at once", a)
	}
	if a := k.arms[0]; a.key != attemptName("j1", 0, 1) || a.pgid != 4242 || a.within != 0 {
		t.Errorf("decided 5 s ago: armed %+v; want group 4242 killed at once", a)
	}
	full := lostAfter - fenceMargin
	for _, a := range k.arms[1:3] {
		if a.within > full || a.within < full-time.Second {
			t.Errorf("%s: armed within %v; want about %v", a.key, a.within, full)
		}
	}
}
