//go:build unix

package e2e

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// TestChaosSoak injures a mesh of node processes at random while jobs
// flow through it, then checks the invariants (cluster.finish) and prints a
// summary: faults by kind, jobs by how they ended, reroutes, takeovers,
// shares moved by a short stall (false reroutes), violations.
//
// By default it is short (8 faults on 5 nodes), for CI. Set GPUMESH_SOAK=1
// for the long one: GPUMESH_SOAK_FAULTS faults (default 300) on
// GPUMESH_SOAK_NODES nodes (default 6). GPUMESH_CHAOS_SEED replays a run's
// choices (the timing of the processes is not replayed).
//
//	GPUMESH_SOAK=1 GPUMESH_SOAK_FAULTS=300 go test ./e2e/ -run TestChaosSoak -v -timeout 2h
func TestChaosSoak(t *testing.T) {
	faults, nodes := 8, 5
	if os.Getenv("GPUMESH_SOAK") != "" {
		faults, nodes = envInt(t, "GPUMESH_SOAK_FAULTS", 300), envInt(t, "GPUMESH_SOAK_NODES", 6)
	}
	if nodes < 4 {
		t.Fatalf("GPUMESH_SOAK_NODES=%d: the soak needs at least 4 nodes (3 hold each job's record)", nodes)
	}
	specs := make([]string, nodes)
	for i := range specs {
		specs[i] = "a100-80g:2"
	}
	c := newCluster(t, nil, chaosSeed(t), specs, nil)
	s := &soak{c: c, maxDown: nodes - 3, started: time.Now(), injected: map[string]int{}}

	svc, _ := c.submitAt(nil, c.service(3))
	s.svc = svc
	c.running(svc.id, 30*time.Second)
	watch := c.watchReplicas(svc.id, 3)

	kinds := []struct {
		name   string
		weight int
		run    func() bool // false: nothing to injure now
	}{
		{"crash-runner", 4, s.crashRunner},
		{"crash-coordinator", 3, s.crashCoordinator},
		{"crash-both", 2, s.crashBoth},
		{"crash-placing", 2, s.crashPlacing},
		{"crash-finishing", 2, s.crashFinishing},
		{"crash-checkpointing", 1, s.crashCheckpointing},
		{"stall-past-lease", 2, s.stallLong},
		{"stall-short", 2, s.stallShort},
		{"restart-half", 1, s.restartHalf},
		{"cancel", 1, s.cancelOne},
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	done := 0
	for i := 0; done < faults && i < 4*faults; i++ {
		s.topUp(nodes - 1)
		n := c.rng.IntN(total)
		for _, k := range kinds {
			if n -= k.weight; n < 0 {
				if k.run() {
					s.injected[k.name]++
					done++
				}
				break
			}
		}
		// Crashed nodes come back after a moment, or stay down a while
		// and let the next fault find the mesh short.
		if len(c.down) > 0 && (len(c.down) >= s.maxDown || c.rng.IntN(3) > 0) {
			time.Sleep(time.Duration(c.rng.IntN(1500)) * time.Millisecond) // how long it stays down, not synchronization
			c.restartAll()
		}
		if done%25 == 0 && done > 0 {
			t.Logf("soak: %d of %d faults, %d jobs, %v", done, faults, len(c.jobs), time.Since(s.started).Round(time.Second))
		}
	}
	c.restartAll()
	least, zero := watch.result()
	recs, violations := c.finish(3 * time.Minute)
	t.Log(s.summary(recs, least, zero, violations))
	if least < 1 {
		t.Errorf("the 3-replica service fell to no replica alive for %v", zero)
	}
	if s.falseReroutes > 0 {
		t.Errorf("%d shares moved after a stall of at most 2 s", s.falseReroutes)
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// soak is the state of one soak run.
type soak struct {
	c             *cluster
	svc           *chaosJob // the 3-replica service that must never stop
	maxDown       int       // nodes that may be down at once
	started       time.Time
	falseReroutes int
	shortStalls   int
	injected      map[string]int // by kind
}

// topUp keeps want batch jobs in flight: mostly short batch jobs, some that
// fail by their own exit, some that checkpoint.
func (s *soak) topUp(want int) {
	c := s.c
	active := 0
	for _, j := range c.jobs {
		if j.spec.Kind == market.KindService || j.cancelled || j.ended {
			continue
		}
		if r, err := c.record(j.id); err == nil && !r.State.Terminal() {
			active++
		}
	}
	for ; active < want; active++ {
		var spec market.JobSpec
		switch n := c.rng.IntN(10); {
		case n == 0:
			spec = c.batch(0.5+c.rng.Float64()*2, 3)
		case n == 1:
			spec = c.stepper(10+c.rng.IntN(20), 64+c.rng.IntN(2048))
		default:
			spec = c.batch(1+c.rng.Float64()*6, 0)
		}
		c.submit(c.any(), spec)
	}
}

// runningJob picks a batch job that runs now, with its record.
func (s *soak) runningJob() (*chaosJob, market.JobRecord, bool) {
	c := s.c
	order := c.rng.Perm(len(c.jobs))
	for _, i := range order {
		j := c.jobs[i]
		if j.spec.Kind == market.KindService || j.ended {
			continue
		}
		r, err := c.record(j.id)
		if err == nil && r.State == market.JobRunning && len(r.Live()) > 0 {
			return j, r, true
		}
	}
	return nil, market.JobRecord{}, false
}

// canCrash reports whether n more nodes may go down.
func (s *soak) canCrash(n int) bool { return len(s.c.down)+n <= s.maxDown }

// spares reports whether a replica of the service keeps running when
// victims go down. The faults never take out every running replica at
// once — no mesh keeps a service up through that — but they may take all
// but one, as often as they like: the mesh must place the replacements
// before the next fault finds the last one.
func (s *soak) spares(victims ...*proc) bool {
	c := s.c
	r, err := c.record(s.svc.id)
	if err != nil {
		return false
	}
	marks := c.markers(s.svc.id)
	for _, pl := range r.Live() {
		p := c.byID(pl.Node)
		if p == nil || c.down[p] || slices.Contains(victims, p) {
			continue
		}
		if m := marks[[2]uint64{uint64(pl.Share), pl.Epoch}]; m.pgid > 0 && groupAlive(m.pgid) {
			return true
		}
	}
	return false
}

func (s *soak) crashRunner() bool {
	c := s.c
	j, r, ok := s.runningJob()
	if !ok || !s.canCrash(1) {
		return false
	}
	p := c.byID(r.Live()[0].Node)
	if p == nil || c.down[p] || !s.spares(p) {
		return false
	}
	c.crash(p, "runner of "+j.id)
	return true
}

func (s *soak) crashCoordinator() bool {
	c := s.c
	j, r, ok := s.runningJob()
	if !ok || !s.canCrash(1) {
		return false
	}
	p := c.byID(r.Coordinator)
	if p == nil || c.down[p] || !s.spares(p) {
		return false
	}
	c.crash(p, "coordinator of "+j.id)
	return true
}

func (s *soak) crashBoth() bool {
	c := s.c
	j, r, ok := s.runningJob()
	if !ok || !s.canCrash(2) {
		return false
	}
	victims := []*proc{c.byID(r.Coordinator), c.byID(r.Live()[0].Node)}
	if !s.spares(victims...) {
		return false
	}
	hit := false
	for _, p := range victims {
		if p != nil && !c.down[p] {
			c.crash(p, "coordinator and runner of "+j.id)
			hit = true
		}
	}
	return hit
}

func (s *soak) crashPlacing() bool {
	c := s.c
	if !s.canCrash(1) {
		return false
	}
	j := c.submit(c.any(), c.batch(1+c.rng.Float64()*3, 0))
	time.Sleep(time.Duration(c.rng.IntN(300)) * time.Millisecond) // a random moment of the placement, not synchronization
	r, err := c.record(j.id)
	if err != nil {
		return false
	}
	victim, role := c.byID(r.Coordinator), "coordinator"
	if live := r.Live(); len(live) > 0 && c.rng.IntN(2) == 0 {
		victim, role = c.byID(live[0].Node), "runner"
	}
	if victim == nil || c.down[victim] || !s.spares(victim) {
		return false
	}
	c.crash(victim, fmt.Sprintf("%s of %s while %s", role, j.id, r.State))
	return true
}

// crashFinishing crashes the runner (or the coordinator) of a short job
// just as its work is done.
func (s *soak) crashFinishing() bool {
	c := s.c
	if !s.canCrash(1) {
		return false
	}
	j := c.submit(c.any(), c.batch(0.5+c.rng.Float64(), 0))
	return s.crashAtEnd(j, "as it finishes")
}

// crashCheckpointing crashes the runner or coordinator of a job while the
// last checkpoint (1 to 8 MiB) of its attempt is shipped.
func (s *soak) crashCheckpointing() bool {
	c := s.c
	if !s.canCrash(1) {
		return false
	}
	j := c.submit(c.any(), c.stepper(3+c.rng.IntN(5), 1024+c.rng.IntN(7*1024)))
	return s.crashAtEnd(j, "while its checkpoint ships")
}

func (s *soak) crashAtEnd(j *chaosJob, when string) bool {
	c := s.c
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		r, err := c.record(j.id)
		if err != nil || r.State.Terminal() {
			return false
		}
		for _, p := range r.Live() {
			if m := c.markers(j.id)[[2]uint64{uint64(p.Share), p.Epoch}]; !m.ended.IsZero() {
				time.Sleep(time.Duration(c.rng.IntN(150)) * time.Millisecond) // a random moment of the end, not synchronization
				victim, role := c.byID(p.Node), "runner"
				if c.rng.IntN(3) == 0 {
					victim, role = c.byID(r.Coordinator), "coordinator"
				}
				if victim == nil || c.down[victim] || !s.canCrash(1) || !s.spares(victim) {
					return false
				}
				c.crash(victim, role+" of "+j.id+" "+when)
				return true
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	return false
}

// stallLong freezes a node past the lease (3.5 to 4.5 s; LostAfter is
// 2.7 s): its shares move, and it must fence them when it resumes.
func (s *soak) stallLong() bool {
	c := s.c
	p := c.any()
	if !s.canCrash(1) || !s.spares(p) {
		return false
	}
	c.stall(p, 3500*time.Millisecond+time.Duration(c.rng.IntN(1000))*time.Millisecond)
	return true
}

// stallShort freezes a node for 0.5 to 2 s, which the lease timings
// tolerate (market.Config.LostAfter): nothing it runs may move.
func (s *soak) stallShort() bool {
	c := s.c
	p := c.any()
	before := s.liveOn(p)
	c.stall(p, 500*time.Millisecond+time.Duration(c.rng.IntN(1500))*time.Millisecond)
	s.shortStalls++
	time.Sleep(3 * time.Second) // longer than LostAfter: a share that was going to move has moved
	for key := range before {
		r, err := c.record(key.job)
		if err != nil {
			continue
		}
		for _, pl := range r.Placements {
			if pl.Share == key.share && pl.Epoch == key.epoch && pl.State == market.PlacementLost {
				s.falseReroutes++
				c.note("false reroute: %s share %d epoch %d lost after a short stall of %s: %s", key.job, key.share, key.epoch, p.name, pl.Reason)
			}
		}
	}
	return true
}

type liveKey struct {
	job   string
	share int
	epoch uint64
}

// liveOn lists the running attempts on node p.
func (s *soak) liveOn(p *proc) map[liveKey]bool {
	out := map[liveKey]bool{}
	for _, j := range s.c.jobs {
		if j.ended {
			continue
		}
		r, err := s.c.record(j.id)
		if err != nil {
			continue
		}
		marks := s.c.markers(j.id)
		for _, pl := range r.Live() {
			// Only attempts whose process runs: a record can still show
			// running an attempt that died with its node a moment ago,
			// whose loss the stall did not cause.
			m := marks[[2]uint64{uint64(pl.Share), pl.Epoch}]
			if pl.Node == p.peerID && pl.State == market.PlacementRunning && m.pgid > 0 && groupAlive(m.pgid) {
				out[liveKey{j.id, pl.Share, pl.Epoch}] = true
			}
		}
	}
	return out
}

// restartHalf crashes and restarts half the nodes, one after another.
func (s *soak) restartHalf() bool {
	c := s.c
	c.restartAll()
	live := c.live()
	hit := false
	for _, i := range c.rng.Perm(len(live))[:len(live)/2] {
		if !s.spares(live[i]) {
			continue
		}
		c.crash(live[i], "restart of half the mesh")
		c.restart(live[i])
		hit = true
	}
	return hit
}

func (s *soak) cancelOne() bool {
	if j, _, ok := s.runningJob(); ok {
		s.c.cancel(j)
		return true
	}
	return false
}

// summary is the soak's report. Its last line counts every kind of
// failure the test fails on: invariant violations (cluster.finish: jobs
// lost or wrongly ended, double results, bills, resumes, stray processes,
// jobs that did not end), the service at zero replicas, false reroutes.
func (s *soak) summary(recs map[string]market.JobRecord, least int, zero time.Duration, violations int) string {
	c := s.c
	var b strings.Builder
	fmt.Fprintf(&b, "soak summary (%v, %d nodes)\n", time.Since(s.started).Round(time.Second), len(c.nodes))
	var kinds []string
	total := 0
	for k, n := range s.injected {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "  faults injected: %d (%s); nodes crashed %d times, frozen %d times\n", total, strings.Join(kinds, ", "), c.faults["crash"], c.faults["stall"])
	states := map[market.JobState]int{}
	reroutes, takeovers, maxTerm := 0, 0, uint64(0)
	var cost float64
	for _, r := range recs {
		states[r.State]++
		for _, p := range r.Placements {
			if p.State == market.PlacementLost {
				reroutes++
			}
		}
		if r.Term > 1 {
			takeovers++
		}
		maxTerm = max(maxTerm, r.Term)
		cost += r.CostCNY
	}
	var st []string
	for k, n := range states {
		st = append(st, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(st)
	fmt.Fprintf(&b, "  jobs: %d (%s)\n", len(recs), strings.Join(st, ", "))
	fmt.Fprintf(&b, "  attempts lost and placed again: %d; jobs whose coordinator changed: %d (highest term %d)\n", reroutes, takeovers, maxTerm)
	fmt.Fprintf(&b, "  short stalls: %d, shares they moved (false reroutes): %d\n", s.shortStalls, s.falseReroutes)
	fmt.Fprintf(&b, "  3-replica service: at least %d alive throughout, longest with none %v\n", least, zero)
	fmt.Fprintf(&b, "  billed: %.4f CNY\n", cost)
	atZero := 0
	if least < 1 {
		atZero = 1
	}
	fmt.Fprintf(&b, "  failures: %d (invariant violations %d, service at zero replicas %d, false reroutes %d)",
		violations+atZero+s.falseReroutes, violations, atZero, s.falseReroutes)
	return b.String()
}
