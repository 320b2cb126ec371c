package node

import (
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/fence"
)

// Fencing. A runner stops an attempt whose lease its coordinator no longer
// acknowledges (market.Config.FenceAfter), before the coordinator places
// the share elsewhere (LostAfter). A node that is frozen or killed cannot:
// its fence keeper (node/fence), a process of its own, kills the attempt
// when the lease lapses. The driver arms each running attempt with the
// keeper from its process's start, and again whenever its coordinator
// acknowledges it; the attempt's watcher disarms it when the process ends.
// The first arming comes from the executor itself, as the process starts
// (armStarted).

// fenceMargin is how much earlier than its coordinator's LostAfter the
// keeper kills an attempt: the ack reached the runner a little after the
// coordinator heard the renewal, and the command reaches the keeper a
// little after the driver wrote it.
const fenceMargin = 200 * time.Millisecond

// fences are the keeper and the last acknowledgement of each attempt this
// node runs. What each attempt was armed with lives in its runSlot
// (fenceState), so that it goes when the attempt goes.
type fences struct {
	k fence.Fencer // nil: no keeper

	mu sync.Mutex
	// acked is when each attempt this node runs was last acknowledged
	// (market.Lease.AckedAt), refreshed by the driver every tick: an
	// attempt is armed from it the moment its process starts (armStarted),
	// not at the next tick, so that a node frozen right then still has its
	// attempt fenced on time.
	acked map[attemptKey]time.Time
}

// fenceState is what an attempt was armed with. Guarded by its
// runSlot's mu.
type fenceState struct {
	armed    bool
	ackedAt  time.Time // the ack the deadline counts from
	deadline time.Time // when the keeper kills the attempt, by this node's clock
	// lapsed is set once the node saw the deadline pass with the process
	// still running: the keeper kills it, or has, whatever ack comes
	// later, so the deadline is never moved again and the attempt ends
	// fenced.
	lapsed bool
	// disarmed is set when the attempt's watcher disarmed it: nothing
	// arms it again.
	disarmed bool
	// prearmed is set once the keeper was told of the attempt before its
	// process started (prearm), its group not known yet.
	prearmed bool
}

func newFences(k fence.Fencer) *fences {
	return &fences{k: k, acked: map[attemptKey]time.Time{}}
}

// armFences arms with the keeper every attempt whose process runs and
// whose lease was acknowledged since it was last armed. Driver only.
func (n *Node) armFences(now time.Time) {
	if n.fences.k == nil {
		return
	}
	lostAfter := n.mk.LostAfter()
	leases := n.mk.Leases()
	n.fences.mu.Lock()
	clear(n.fences.acked)
	for _, l := range leases {
		n.fences.acked[attemptKey{l.Job, l.Share, l.Epoch}] = l.AckedAt
	}
	n.fences.mu.Unlock()
	for _, l := range leases {
		key := attemptKey{l.Job, l.Share, l.Epoch}
		slot := n.runs[key]
		if slot == nil {
			continue
		}
		slot.mu.Lock()
		run := slot.run
		slot.mu.Unlock()
		if run == nil {
			continue
		}
		n.arm(key, slot, run, l.AckedAt, lostAfter, now)
	}
}

// armStarted arms an attempt the moment its process started, from its
// last ack as the driver last saw it, or, before a tick saw its lease, from
// when the driver decided to start it (decided): never later than the ack
// its coordinator counts from, so that a node frozen between that decision
// and the start has its process killed at once, not LostAfter later. The
// executor calls it (executor.Attempt.Started) before Start returns, on the
// attempt's watcher: nothing of the node runs between the process's start
// and the keeper's knowing it.
func (n *Node) armStarted(key attemptKey, slot *runSlot, pgid int, cgroup string, decided time.Time) {
	if n.fences.k == nil {
		return
	}
	now := time.Now()
	ackedAt := n.ackedOr(key, decided)
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if within, ok, _ := slot.fence.next(ackedAt, n.lostAfter, now); ok {
		n.armLocked(key, slot, pgid, cgroup, ackedAt, within, now)
	}
}

// prearm tells the keeper of an attempt whose process is about to start,
// with the deadline armStarted would give it: should the node freeze or die
// before armStarted, the keeper finds the process by its environment
// (fence.AttemptEnv). The executor calls it (executor.Attempt.Starting).
func (n *Node) prearm(key attemptKey, slot *runSlot, decided time.Time) {
	if n.fences.k == nil {
		return
	}
	now := time.Now()
	within := fenceWithin(n.ackedOr(key, decided), n.lostAfter, now)
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if err := n.fences.k.Prearm(attemptName(key.job, key.share, key.epoch), within); err != nil {
		n.log.Debug("cannot prearm the fence keeper", "job", key.job, "share", key.share, "epoch", key.epoch, "err", err)
		return
	}
	slot.fence.prearmed = true
}

// unprearm forgets a prearmed attempt whose process did not start.
func (n *Node) unprearm(key attemptKey, slot *runSlot) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if n.fences.k == nil || !slot.fence.prearmed || slot.fence.armed {
		return
	}
	slot.fence.prearmed = false
	if err := n.fences.k.Disarm(attemptName(key.job, key.share, key.epoch)); err != nil {
		n.log.Debug("cannot disarm the fence keeper", "job", key.job, "err", err)
	}
}

// ackedOr returns the attempt's last ack as the driver last saw it, or,
// before a tick saw its lease, decided.
func (n *Node) ackedOr(key attemptKey, decided time.Time) time.Time {
	n.fences.mu.Lock()
	defer n.fences.mu.Unlock()
	if ackedAt, known := n.fences.acked[key]; known {
		return ackedAt
	}
	return decided
}

// arm tells the keeper to kill the attempt LostAfter - fenceMargin after
// ackedAt, unless armed again meanwhile. It and disarm hold the slot's
// lock while they tell the keeper, so an attempt its watcher disarmed is
// never armed again. An attempt whose deadline this
// node saw pass is not armed again: a node frozen past it hears its
// coordinator's ack only after the keeper killed the attempt (or is about
// to), and moving the deadline then would make that kill look like the
// job's own exit (-1) instead of a fence.
func (n *Node) arm(key attemptKey, slot *runSlot, run *executor.Run, ackedAt time.Time, lostAfter time.Duration, now time.Time) {
	pgid, cgroup, ok := run.Process()
	if !ok {
		return
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	f := &slot.fence
	within, ok, lapsed := f.next(ackedAt, lostAfter, now)
	if lapsed {
		run.Stop(executor.StopFenced) // the keeper's kill, should it be gone
		n.log.Warn("an attempt's lease lapsed while this node could not renew it (frozen?): it ends fenced",
			"job", key.job, "share", key.share, "epoch", key.epoch, "deadline", f.deadline)
	}
	if ok {
		n.armLocked(key, slot, pgid, cgroup, ackedAt, within, now)
	}
}

// armLocked tells the keeper to kill the attempt within of now and
// records it. The caller holds slot.mu.
func (n *Node) armLocked(key attemptKey, slot *runSlot, pgid int, cgroup string, ackedAt time.Time, within time.Duration, now time.Time) {
	if err := n.fences.k.Arm(attemptName(key.job, key.share, key.epoch), pgid, cgroup, within); err != nil {
		n.log.Debug("cannot arm the fence keeper", "job", key.job, "share", key.share, "epoch", key.epoch, "err", err)
		return
	}
	slot.fence.armedAt(ackedAt, now.Add(within))
}

// next says whether to arm the attempt again for an ack at ackedAt, seen
// at now, and within what: not once it was disarmed, nor for an ack no
// newer than the one it is armed from, nor once its deadline passed
// (lapsed reports that this call saw it pass first).
func (f *fenceState) next(ackedAt time.Time, lostAfter time.Duration, now time.Time) (within time.Duration, arm, lapsed bool) {
	switch {
	case f.disarmed || f.lapsed:
		return 0, false, false
	case f.armed && !now.Before(f.deadline):
		f.lapsed = true
		return 0, false, true
	case f.armed && !ackedAt.After(f.ackedAt):
		return 0, false, false
	}
	return fenceWithin(ackedAt, lostAfter, now), true, false
}

// fenceWithin is how long from now the keeper waits before it kills an
// attempt last acknowledged at ackedAt: LostAfter - fenceMargin after it.
func fenceWithin(ackedAt time.Time, lostAfter time.Duration, now time.Time) time.Duration {
	return max(ackedAt.Add(lostAfter-fenceMargin).Sub(now), 0)
}

// armedAt records that the keeper was told to kill the attempt at
// deadline, counting from the ack at ackedAt.
func (f *fenceState) armedAt(ackedAt, deadline time.Time) {
	f.armed, f.ackedAt, f.deadline = true, ackedAt, deadline
}

// end records that the attempt's process ended at endedAt and reports
// whether the keeper was armed for it and whether it ended fenced.
func (f *fenceState) end(endedAt time.Time) (armed, fenced bool) {
	f.disarmed = true
	return f.armed, f.armed && (f.lapsed || !endedAt.Before(f.deadline))
}

// disarm forgets an attempt whose process ended, and reports whether it
// ended fenced: its deadline had passed when it ended (the keeper killed
// it, or would have: its lease lapsed while the node was frozen), or this
// node saw the deadline pass while it ran (lapsed). It runs on the
// attempt's watcher.
func (n *Node) disarm(key attemptKey, slot *runSlot, endedAt time.Time) (fenced bool) {
	if n.fences.k == nil {
		return false
	}
	slot.mu.Lock()
	armed, fenced := slot.fence.end(endedAt)
	prearmed := slot.fence.prearmed // and never armed, should that have failed
	slot.mu.Unlock()
	if armed || prearmed {
		if err := n.fences.k.Disarm(attemptName(key.job, key.share, key.epoch)); err != nil {
			n.log.Debug("cannot disarm the fence keeper", "job", key.job, "err", err)
		}
	}
	return fenced
}

// watchFenced logs the attempts the keeper killed. Their watchers report
// them fenced (disarm); this only says so where an operator looks.
func (n *Node) watchFenced(k *fence.Keeper) {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case key, ok := <-k.Fenced():
			if !ok {
				return
			}
			n.log.Warn("the fence keeper killed an attempt whose lease lapsed while this node could not stop it", "attempt", key)
		}
	}
}
