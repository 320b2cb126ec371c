package market

import "fmt"

// Planned moves. A runner that drains sends Moving for each attempt it
// runs. The coordinator moves the share off that node:
//
//   - a service's replica gets a replacement under a new share number,
//     placed avoiding the node; once the replacement's process runs (its
//     runner's renewal says it started: an accepted award is not yet a
//     process), the old replica is stopped, so the service never has
//     fewer replicas running;
//   - any other share is stopped at once (SIGTERM: it can checkpoint) and,
//     when its end is reported, placed again elsewhere under a new epoch.

// onMoving handles a draining runner's notice.
func (c *coordinator) onMoving(from string, m *Moving) error {
	j := c.jobs[m.Job]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, m.Job)
	}
	p := j.byAttempt[shareEpoch{m.Share, m.Epoch}]
	if p == nil || p.Node != from || !p.State.live() {
		return fmt.Errorf("%w: moving notice for %s share %d epoch %d, not a live attempt of %s", ErrStale, m.Job, m.Share, m.Epoch, from)
	}
	if j.state.Terminal() || p.moving || p.State == PlacementStopping {
		return nil
	}
	p.moving = true
	j.avoid[from] = true
	c.touch(j)
	if j.spec.KindOrDefault() == KindService {
		s := j.nextShare
		j.nextShare++
		if j.replaces == nil {
			j.replaces = map[int]*placement{}
		}
		j.replaces[s] = p
		j.needSlots = append(j.needSlots, s)
		if j.round == nil {
			c.startRound(j)
		}
		c.refresh(j)
		return nil
	}
	c.stopPlacement(j, p, "moved off a draining node")
	c.refresh(j)
	return nil
}

// replaced stops the replica a new share replaces, now that the new
// share's process runs.
func (c *coordinator) replaced(j *job, p *placement) {
	old := j.replaces[p.Share]
	if old == nil {
		return
	}
	delete(j.replaces, p.Share)
	c.stopPlacement(j, old, fmt.Sprintf("drained: share %d replaces it", p.Share))
}

// movedAfterStop places a stopped share of a draining node again.
func (c *coordinator) movedAfterStop(j *job, p *placement) {
	if !p.moving || j.spec.KindOrDefault() == KindService || j.state.Terminal() {
		return
	}
	if j.everRan {
		j.rerouting = true
	}
	c.replace(j, p)
}
