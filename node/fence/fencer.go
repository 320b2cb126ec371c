package fence

import "time"

// Fencer is what the node depends on to have its job attempts killed when
// the node itself can no longer do it (frozen or dead).
//
// Arm tells the fencer that the attempt key runs in process group pgid and,
// when cgroupDir is not empty, in that cgroup v2 directory; unless armed
// again within the duration, counted from now, the fencer kills it.
// Prearm does the same for an attempt whose process is about to start, its
// group not known yet: the fencer kills the processes that carry
// AttemptEnv=key in their environment, unless Arm came in time. Arming a
// key again moves its deadline, earlier or later. Disarm forgets key; a key
// that is not armed is no error. Both are safe to call from any number of
// goroutines and return promptly: they never wait on the attempt or on the
// deadline, and wait for the fencer itself for a bounded time at most. An
// error means the fence was not set or moved; the caller decides whether to
// run on without it.
type Fencer interface {
	Arm(key string, pgid int, cgroupDir string, within time.Duration) error
	Prearm(key string, within time.Duration) error
	Disarm(key string) error
}

// Nop is a Fencer that fences nothing, for platforms without process groups
// and for nodes that run without a keeper.
type Nop struct{}

// Arm does nothing.
func (Nop) Arm(string, int, string, time.Duration) error { return nil }

// Prearm does nothing.
func (Nop) Prearm(string, time.Duration) error { return nil }

// Disarm does nothing.
func (Nop) Disarm(string) error { return nil }

var (
	_ Fencer = Nop{}
	_ Fencer = (*Keeper)(nil)
)

// AttemptEnv is the environment variable that names an attempt (its key)
// in the environment of its processes: the keeper finds a prearmed
// attempt's processes by it (Fencer.Prearm).
const AttemptEnv = "GPUMESH_ATTEMPT"
