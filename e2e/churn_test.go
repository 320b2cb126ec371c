//go:build unix

package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// TestChaosChurn is the churn that once ran finished jobs again (issue
// 20): node processes on loopback, one-card jobs that checkpoint a step
// counter every half second, and faults at about ten a minute — the
// daemon killed with SIGKILL (its jobs left to its fence keeper), the
// machine crashing (the daemon and its jobs), the daemon frozen with
// SIGSTOP for 3 to 8 s then resumed, and killed nodes restarted with their
// own data dirs. Beyond cluster.finish's invariants it checks, from
// outside the nodes, that no attempt started after its job's end as the
// final record states it (startedAfterEnd) and that no two attempts of a
// share ran at once beyond the fencing grace (the process table,
// overlaps).
//
// By default it is short (6 nodes, 8 jobs, 8 faults); jobs are submitted
// as others end, about half of them in flight at a time. GPUMESH_SOAK=1 runs
// the scale: GPUMESH_CHURN_NODES (8) nodes, GPUMESH_CHURN_JOBS
// (16) jobs of 30 to 80 steps, GPUMESH_CHURN_FAULTS (25) faults.
// GPUMESH_CHAOS_SEED replays a run's choices.
//
//	GPUMESH_SOAK=1 go test ./e2e/ -run TestChaosChurn -v -timeout 30m
func TestChaosChurn(t *testing.T) {
	nodes, jobs, faults, minSteps, maxSteps := 6, 8, 8, 20, 40
	if os.Getenv("GPUMESH_SOAK") != "" {
		nodes, jobs, faults = envInt(t, "GPUMESH_CHURN_NODES", 8), envInt(t, "GPUMESH_CHURN_JOBS", 16), envInt(t, "GPUMESH_CHURN_FAULTS", 25)
		minSteps, maxSteps = 30, 80
	}
	if nodes < 5 {
		t.Fatalf("GPUMESH_CHURN_NODES=%d: the churn needs at least 5 nodes (3 hold each job's record, 2 may be down)", nodes)
	}
	specs := make([]string, nodes)
	for i := range specs {
		specs[i] = "a100-80g:2"
	}
	c := newCluster(t, nil, chaosSeed(t), specs, nil)
	started := time.Now()
	// Jobs are submitted as others end, so that about half of them are
	// in flight while the faults come.
	submitted := 0
	topUp := func() {
		active := 0
		for _, j := range c.jobs {
			if r, err := c.record(j.id); err != nil || !r.State.Terminal() {
				active++
			}
		}
		for ; active < max(jobs/2, 1) && submitted < jobs; active++ {
			spec := c.stepper(minSteps+c.rng.IntN(maxSteps-minSteps+1), 16)
			spec.Env["CHAOS_STEP_S"] = "0.5"
			c.submit(c.any(), spec)
			submitted++
		}
	}
	topUp()
	maxDown := 2
	kinds := []struct {
		name   string
		weight int
	}{{"kill", 3}, {"crash", 2}, {"stall", 3}, {"restart", 2}}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	done := 0
	for i := 0; done < faults && i < 4*faults; i++ {
		// About ten faults a minute: one every 4 to 8 s.
		time.Sleep(4*time.Second + time.Duration(c.rng.IntN(4000))*time.Millisecond) // the fault rate, not synchronization
		topUp()
		n := c.rng.IntN(total)
		var kind string
		for _, k := range kinds {
			if n -= k.weight; n < 0 {
				kind = k.name
				break
			}
		}
		live := c.live()
		switch {
		case kind == "restart" || len(c.down) >= maxDown && kind != "stall":
			if len(c.down) == 0 {
				continue
			}
			var down []*proc
			for _, p := range c.nodes {
				if c.down[p] {
					down = append(down, p)
				}
			}
			c.restart(down[c.rng.IntN(len(down))])
		case kind == "kill":
			p := live[c.rng.IntN(len(live))]
			c.killDaemon(p, c.roleOf(p))
		case kind == "crash":
			p := live[c.rng.IntN(len(live))]
			c.crash(p, c.roleOf(p))
		case kind == "stall":
			p := live[c.rng.IntN(len(live))]
			c.stall(p, 3*time.Second+time.Duration(c.rng.IntN(5000))*time.Millisecond)
		}
		done++
	}
	c.restartAll()
	for submitted < jobs {
		topUp()
		time.Sleep(time.Second) // polling interval
	}
	recs, violations := c.finish(5 * time.Minute)
	t.Log(c.churnSummary(recs, started, violations))
}

// roleOf says what a node does for the jobs now: how many it coordinates
// and runs, for the fault's log line.
func (c *cluster) roleOf(p *proc) string {
	coord, runs := 0, 0
	for _, j := range c.jobs {
		r, err := c.record(j.id)
		if err != nil || r.State.Terminal() {
			continue
		}
		if r.Coordinator == p.peerID {
			coord++
		}
		for _, pl := range r.Live() {
			if pl.Node == p.peerID {
				runs++
			}
		}
	}
	return fmt.Sprintf("coordinates %d jobs, runs %d", coord, runs)
}

// churnSummary is the churn run's report: faults by kind, how the jobs
// ended, reroutes and takeovers, the longest time two attempts of a share
// were seen alive together, violations.
func (c *cluster) churnSummary(recs map[string]market.JobRecord, started time.Time, violations int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "churn summary (%v, %d nodes)\n", time.Since(started).Round(time.Second), len(c.nodes))
	c.mu.Lock()
	var kinds []string
	for k, n := range c.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	which, longest := c.shares.longestOverlap()
	c.mu.Unlock()
	slices.Sort(kinds)
	fmt.Fprintf(&b, "  faults: %s\n", strings.Join(kinds, ", "))
	states := map[market.JobState]int{}
	reroutes, takeovers, attempts := 0, 0, 0
	for _, r := range recs {
		states[r.State]++
		attempts += len(r.Placements)
		for _, p := range r.Placements {
			if p.State == market.PlacementLost {
				reroutes++
			}
		}
		if r.Term > 1 {
			takeovers++
		}
	}
	var st []string
	for k, n := range states {
		st = append(st, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(st)
	fmt.Fprintf(&b, "  jobs: %d (%s), placements %d, lost and placed again %d, coordinator changed %d\n", len(recs), strings.Join(st, ", "), attempts, reroutes, takeovers)
	if longest > 0 {
		fmt.Fprintf(&b, "  longest two attempts of a share seen alive together: %v (%s)\n", longest.Round(time.Millisecond), which)
	} else {
		b.WriteString("  no two attempts of a share were seen alive together\n")
	}
	fmt.Fprintf(&b, "  failures: %d", violations)
	return b.String()
}
