//go:build unix

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Failover figures on a mesh of 20 real node processes on loopback: 5
// expensive coordinators without work of their own and 15 cheap runners
// (--coordinator never), so that killing a runner never takes a
// coordinator with it. Each iteration injures one node, measures, and
// brings the node back before the next (outside the measure). Issue 6's
// targets: runner crash → running again elsewhere, median < 1 s and p99 <
// 2 s; silent loss (SIGSTOP past the lease) p99 < 3 s; coordinator crash →
// query and cancel served by the successor < 2 s.
//
//	go test -run '^$' -bench 'Failover' -benchtime 20x -timeout 30m ./e2e/
//
// With 20 iterations the p99 is the worst of the 20.

const (
	failoverCoordinators = 5
	failoverRunners      = 15
)

// failoverMesh starts the 20-node mesh and waits until the coordinators,
// and only they, coordinate (a node does once it has been a member for
// 30 s).
func failoverMesh(b *testing.B) (c *cluster, coords, runners []*proc) {
	b.Helper()
	n := failoverCoordinators + failoverRunners
	specs := make([]string, n)
	extra := make([][]string, n)
	for i := range n {
		specs[i] = "a100-80g:2"
		extra[i] = []string{"--log-level", "info", "--price", "a100-80g=9"}
		if i >= failoverCoordinators {
			extra[i] = []string{"--log-level", "info", "--price", "a100-80g=2", "--coordinator", "never"}
		}
	}
	c = newClusterWith(b, nil, chaosSeed(b), specs, extra)
	coords, runners = c.nodes[:failoverCoordinators], c.nodes[failoverCoordinators:]
	eventually(b, 60*time.Second, "the coordinators, and only they, coordinate", func() bool {
		el := c.eligible()
		if len(el) != len(coords) {
			return false
		}
		for _, p := range coords {
			if !slices.Contains(el, p.peerID) {
				return false
			}
		}
		return true
	})
	return c, coords, runners
}

// runningOnRunner submits a long one-card job coordinated by one of the
// coordinators and waits until it runs on a runner; it returns the job and
// its running placement.
func runningOnRunner(c *cluster, coords, runners []*proc) (*chaosJob, *proc, market.Placement) {
	c.t.Helper()
	// A coordinator that restarted coordinates again only after 30 s as a
	// member; the others must be seen coordinating.
	eventually(c.t, 60*time.Second, "at least 3 coordinators", func() bool { return len(c.eligible()) >= 3 })
	j, coord, rec := c.placeOn(runners, []*proc{coords[c.rng.IntN(len(coords))]}, c.batch(600, 0))
	old := onlyLive(c.t, rec)
	c.waitMarker(j.id, old.Share, old.Epoch, "start", 10*time.Second)
	return j, coord, old
}

// reportQuantiles reports the quantiles of ms, and logs them too: a run
// whose final invariant check fails prints no metrics.
func reportQuantiles(b *testing.B, ms []float64, unit string, qs ...float64) {
	for _, q := range qs {
		name := fmt.Sprintf("ms-p%d-%s", int(q*100), unit)
		b.ReportMetric(quantile(ms, q), name)
		b.Logf("%s: %.0f (%d samples)", name, quantile(ms, q), len(ms))
	}
}

// BenchmarkFailoverRunnerCrash: kill -9 of the node running a share (and
// of the share's process) → the share's process running again on another
// node (its start marker).
func BenchmarkFailoverRunnerCrash(b *testing.B) {
	c, coords, runners := failoverMesh(b)
	var ms []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		j, _, old := runningOnRunner(c, coords, runners)
		runner := c.byID(old.Node)
		b.StartTimer()
		killed := time.Now()
		c.crash(runner, "runner of "+j.id)
		_, at := c.rerun(j.id, old, 20*time.Second)
		ms = append(ms, float64(at.Sub(killed).Microseconds())/1000)
		b.StopTimer()
		c.cancel(j)
		c.restart(runner)
		b.StartTimer()
	}
	b.StopTimer()
	reportQuantiles(b, ms, "rerun", 0.5, 0.99)
	c.finish(60 * time.Second)
}

// BenchmarkFailoverRunnerStall: SIGSTOP of the node running a share for
// 4 s (past the 2 s lease) → the share running again on another node.
// The frozen node fences its attempt when it resumes.
func BenchmarkFailoverRunnerStall(b *testing.B) {
	c, coords, runners := failoverMesh(b)
	var ms []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		j, _, old := runningOnRunner(c, coords, runners)
		runner := c.byID(old.Node)
		b.StartTimer()
		stalled := time.Now()
		done := make(chan struct{})
		go func() { defer close(done); c.stall(runner, 4*time.Second) }()
		_, at := c.rerun(j.id, old, 20*time.Second)
		ms = append(ms, float64(at.Sub(stalled).Microseconds())/1000)
		b.StopTimer()
		<-done
		c.cancel(j)
		b.StartTimer()
	}
	b.StopTimer()
	reportQuantiles(b, ms, "rerun", 0.5, 0.99)
	c.finish(60 * time.Second)
}

// BenchmarkFailoverCoordinatorCrash: kill -9 of a job's coordinator →
// the job's record served by the successor through another node (a query
// that names a new coordinator at a higher term), then a cancel through
// another node answered.
func BenchmarkFailoverCoordinatorCrash(b *testing.B) {
	c, coords, runners := failoverMesh(b)
	var queryMs, cancelMs []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		j, coord, _ := runningOnRunner(c, coords, runners)
		before, err := c.record(j.id)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		killed := time.Now()
		c.crash(coord, "coordinator of "+j.id)
		asker := runners[c.rng.IntN(len(runners))]
		eventually(b, 20*time.Second, "the successor serves "+j.id, func() bool {
			r, err := asker.job(j.id)
			return err == nil && r.Coordinator != coord.peerID && r.Term > before.Term
		})
		queryMs = append(queryMs, float64(time.Since(killed).Microseconds())/1000)
		eventually(b, 20*time.Second, "cancel "+j.id+" through the successor", func() bool {
			resp, err := asker.do(http.MethodDelete, "/v1/jobs/"+j.id)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		j.cancelled = true
		cancelMs = append(cancelMs, float64(time.Since(killed).Microseconds())/1000)
		b.StopTimer()
		c.restart(coord)
		b.StartTimer()
	}
	b.StopTimer()
	reportQuantiles(b, queryMs, "query", 0.5, 0.99)
	reportQuantiles(b, cancelMs, "cancel", 0.5, 0.99)
	c.finish(60 * time.Second)
}
