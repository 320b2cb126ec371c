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

// fenceMargin is how much earlier than its coordinator's LostAfter the
// keeper kills an attempt: the ack reached the runner a little after the
// coordinator heard the renewal, and the command reaches the keeper a
// little after the driver wrote it.
const fenceMargin = 200 * time.Millisecond

// fences are the attempts armed with the keeper and their deadlines.
type fences struct {
	k fence.Fencer // nil: no keeper

	mu    sync.Mutex
	armed map[attemptKey]armed
	// acked is when each attempt this node runs was last acknowledged
	// (market.Lease.AckedAt), refreshed by the driver every tick: an
	// attempt is armed from it the moment its process starts (armStarted),
	// not at the next tick, so that a node frozen right then still has its
	// attempt fenced on time.
	acked map[attemptKey]time.Time
}

type armed struct {
	ackedAt  time.Time // the ack the deadline counts from
	deadline time.Time // when the keeper kills the attempt, by this node's clock
}

func newFences(k fence.Fencer) *fences {
	return &fences{k: k, armed: map[attemptKey]armed{}, acked: map[attemptKey]time.Time{}}
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
		pgid, cgroup, ok := run.Process()
		if !ok {
			continue
		}
		n.fences.mu.Lock()
		prev, was := n.fences.armed[key]
		n.fences.mu.Unlock()
		if was && !l.AckedAt.After(prev.ackedAt) {
			continue
		}
		n.arm(key, run, pgid, cgroup, l.AckedAt, lostAfter, now)
	}
}

// armStarted arms an attempt the moment its process started, from its
// last ack as the driver last saw it. It runs on the attempt's watcher.
func (n *Node) armStarted(key attemptKey, run *executor.Run) {
	if n.fences.k == nil {
		return
	}
	pgid, cgroup, ok := run.Process()
	if !ok {
		return
	}
	now := time.Now()
	n.fences.mu.Lock()
	ackedAt, known := n.fences.acked[key]
	n.fences.mu.Unlock()
	if !known {
		ackedAt = now // not seen by a tick yet: its award came a moment ago
	}
	n.arm(key, run, pgid, cgroup, ackedAt, n.lostAfter, now)
}

// arm tells the keeper to kill the attempt LostAfter - fenceMargin after
// ackedAt, unless armed again meanwhile.
func (n *Node) arm(key attemptKey, run *executor.Run, pgid int, cgroup string, ackedAt time.Time, lostAfter time.Duration, now time.Time) {
	deadline := ackedAt.Add(lostAfter - fenceMargin)
	within := max(deadline.Sub(now), 0)
	if err := n.fences.k.Arm(attemptName(key.job, key.share, key.epoch), pgid, cgroup, within); err != nil {
		n.log.Debug("cannot arm the fence keeper", "job", key.job, "share", key.share, "epoch", key.epoch, "err", err)
		return
	}
	n.fences.mu.Lock()
	if prev, ok := n.fences.armed[key]; !ok || !ackedAt.Before(prev.ackedAt) {
		n.fences.armed[key] = armed{ackedAt: ackedAt, deadline: now.Add(within)}
	}
	n.fences.mu.Unlock()
	select {
	case <-run.Done():
		// It ended as it was armed; its watcher may have disarmed it
		// before: the keeper must not kill its group later, which
		// another process may be given.
		n.disarm(key, now)
	default:
	}
}

// disarm forgets an attempt whose process ended, and reports whether it
// ended past its fence deadline: the keeper killed it, or would have (its
// lease had lapsed while the node was frozen), so it ended fenced.
func (n *Node) disarm(key attemptKey, endedAt time.Time) (fenced bool) {
	if n.fences.k == nil {
		return false
	}
	n.fences.mu.Lock()
	a, ok := n.fences.armed[key]
	delete(n.fences.armed, key)
	n.fences.mu.Unlock()
	if !ok {
		return false
	}
	if err := n.fences.k.Disarm(attemptName(key.job, key.share, key.epoch)); err != nil {
		n.log.Debug("cannot disarm the fence keeper", "job", key.job, "err", err)
	}
	return !endedAt.Before(a.deadline)
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
