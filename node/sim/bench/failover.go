package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim"
)

// Loss kinds of the failover scenario.
const (
	lossCrash  = "crash"  // the node and its links vanish (power cut)
	lossSilent = "silent" // links stay up, nothing gets through (hang, black hole)
)

// failoverJobs is how many single-card jobs lose their node, per kind.
const failoverJobs = 8

// failoverVirtual and failoverReal time reroutes: single-card jobs whose node is lost, from
// the loss until the job runs whole again elsewhere. On the full-node mesh
// (sim.SimMarket's timings: a runner lost after 5 s of silence, 1 s
// after a disconnect hint) the nodes crash (sim.Cluster.Crash) or go
// silent (Cluster.Silence: every message delayed by an hour, nothing
// closed). On the virtual mesh (the market's default timings: lost after
// 2 s, 0.6 s after a hint) a crash is a node down with the hint given to
// the coordinator at once, a silent loss a node cut off without a hint.
func failoverVirtual(ctx context.Context, r *runner) error {
	for _, vl := range virtualLatencies {
		for _, kind := range []string{lossCrash, lossSilent} {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lat, err := virtualFailover(ctx, r.cfg, vl.d, kind)
			if err != nil {
				return fmt.Errorf("%s %s: %w", vl.clock, kind, err)
			}
			failoverRows(r, kind, vl.clock, lat)
			if vl.clock == ClockVirtualLAN {
				r.plotLine(failoverPlot(), cdf(fmt.Sprintf("%s, %s", kind, vl.clock), lat))
			}
		}
	}
	return nil
}

// failoverPlot is the CDF of reroute latencies.
func failoverPlot() Plot {
	return Plot{File: "failover.svg", Title: "Reroute latency CDF", XLabel: "loss → job running whole again (ms)", YLabel: "fraction of reroutes"}
}

// failoverReal is the full-node mesh's half of the failover scenario.
func failoverReal(ctx context.Context, r *runner) error {
	m, err := r.fullMesh(ctx)
	if err != nil {
		return err
	}
	for _, kind := range []string{lossCrash, lossSilent} {
		r.cfg.Progress(fmt.Sprintf("failover: %s of the full mesh", kind))
		lat, err := meshFailover(ctx, r, m, kind)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		failoverRows(r, kind, ClockReal, lat)
		r.plotLine(failoverPlot(), cdf(fmt.Sprintf("%s, real", kind), lat))
	}
	return nil
}

func failoverRows(r *runner, kind, clock string, lat []time.Duration) {
	l := sim.LatencyOf("", lat)
	r.row(Row{Scenario: ScenarioFailover, Case: kind, Clock: clock, Metric: "median", Value: ms(l.P50), Unit: "ms", N: l.Count})
	r.row(Row{Scenario: ScenarioFailover, Case: kind, Clock: clock, Metric: "p99", Value: ms(l.P99), Unit: "ms", N: l.Count})
}

// cdf is the empirical distribution of lat as a plot line.
func cdf(name string, lat []time.Duration) Line {
	s := slices.Clone(lat)
	slices.Sort(s)
	l := Line{Name: name}
	for i, d := range s {
		l.Points = append(l.Points, Point{X: ms(d), Y: float64(i+1) / float64(len(s))})
	}
	return l
}

// virtualFailover places single-card jobs on distinct nodes of a virtual
// mesh, loses every node that runs one (at the same instant), and returns
// how long each job took to run whole again.
func virtualFailover(ctx context.Context, cfg Config, latency time.Duration, kind string) ([]time.Duration, error) {
	v, err := newVirtualMesh(cfg.VirtualNodes, cfg.CardsPerNode, cfg.Seed, virtualOptions{Latency: latency, Tick: max(latency/4, time.Millisecond)})
	if err != nil {
		return nil, err
	}
	n := min(cfg.samples(failoverJobs*4, 3), cfg.VirtualNodes/4)
	var jobs []string
	for i := range n {
		id := fmt.Sprintf("f%d", i)
		if _, _, err := v.place(ctx, sleepSpec(id, 1), 10*time.Second); err != nil {
			return nil, err
		}
		jobs = append(jobs, id)
	}
	v.h.RunFor(time.Second) // leases settle
	lost, coords := map[string]bool{}, map[string]bool{}
	for _, j := range jobs {
		coords[v.h.Coordinator(j)] = true
	}
	t0 := v.h.Now
	for _, j := range jobs {
		rec, _ := v.h.Job(j)
		node := runningOn(rec)
		if node == "" || lost[node] || coords[node] {
			continue // a job that shares its node, or runs on a coordinator, stays
		}
		lost[node] = true
		if kind == lossCrash {
			v.h.SetDown(node, true)
			for _, o := range jobs {
				v.h.PeerLost(v.h.Coordinator(o), node)
			}
		} else {
			v.h.SetCut(node, true)
		}
	}
	var moved []string
	for _, j := range jobs {
		rec, _ := v.h.Job(j)
		for _, p := range rec.Placements {
			if lost[p.Node] {
				moved = append(moved, j)
				break
			}
		}
	}
	back := func() bool {
		for _, j := range moved {
			if _, ok := v.back[j]; !ok {
				return false
			}
		}
		return true
	}
	ok, err := runUntil(ctx, v.h, back, time.Minute)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("jobs not rerouted after a minute of virtual time")
	}
	var out []time.Duration
	for _, j := range moved {
		out = append(out, v.back[j].Sub(t0))
	}
	return out, nil
}

// silenceDelay is how late a silenced node's messages arrive, both ways:
// far beyond the market's LostAfter and FenceAfter (5 s and 4 s under
// sim.SimMarket), so the node is lost as if its messages vanished.
// (sim.Cluster.Silence delays them by an hour, but a node with a stream
// handshake in flight on such a link cannot close before the handshake
// ends: gossip.Direct's stream Close waits for it.)
const silenceDelay = 10 * time.Second

// silence makes a supplier go quiet without closing a connection: every
// message to or from it is delayed by silenceDelay.
func (f *fullMesh) silence(name string) error {
	victim, ok := f.c.Member(name)
	if !ok || victim.Node == nil {
		return fmt.Errorf("supplier %s is not up", name)
	}
	for _, o := range f.c.Members() {
		if o.Node != nil && o.Supplier.Name != name {
			f.c.Net().SetLatency(victim.Node.ID(), o.Node.ID(), silenceDelay)
		}
	}
	return nil
}

// runningOn is the node of a single-share job's running placement.
func runningOn(rec market.JobRecord) string {
	for _, p := range rec.Placements {
		if p.State == market.PlacementRunning {
			return p.Node
		}
	}
	return ""
}

// meshFailover places failoverJobs single-card jobs on the full-node mesh,
// loses the suppliers that run them all at once, and returns each job's
// time from the loss until it ran whole again. Silenced nodes are stopped
// afterwards; the jobs are cancelled.
func meshFailover(ctx context.Context, r *runner, m *fullMesh, kind string) ([]time.Duration, error) {
	gw := m.c.Gateway()
	n := r.cfg.samples(failoverJobs, 2)
	var jobs []string
	for i := range n {
		id := fmt.Sprintf("fo-%s-%d", kind, i)
		if _, err := m.submit(ctx, gw, sleepSpec(id, 1)); err != nil {
			return nil, fmt.Errorf("submit %s: %w", id, err)
		}
		jobs = append(jobs, id)
	}
	defer m.cancel(ctx, jobs)     // the last scenario of the mesh: no need to wait for the cards
	byPeer := map[string]string{} // peer ID → supplier
	for _, mem := range m.c.Members() {
		if mem.Node != nil {
			byPeer[mem.Node.ID().String()] = mem.Supplier.Name
		}
	}
	victims := map[string]time.Time{} // supplier → when it was lost
	var moved []string
	on := map[string]string{} // job → supplier
	for _, j := range jobs {
		if _, err := m.waitRunning(ctx, j, time.Minute); err != nil {
			return nil, err
		}
		rec, err := gw.Job(ctx, j)
		if err != nil {
			return nil, err
		}
		s, ok := byPeer[runningOn(rec)]
		if !ok {
			return nil, fmt.Errorf("job %s runs on no supplier known", j)
		}
		victims[s] = time.Time{}
		on[j] = s
		moved = append(moved, j)
	}
	up := len(m.c.Up())
	if len(victims) > up/2 {
		return nil, fmt.Errorf("%d of %d nodes would be lost: the mesh is too small", len(victims), up)
	}
	for s := range victims {
		victims[s] = time.Now()
		var err error
		if kind == lossCrash {
			err = m.c.Crash(s)
		} else {
			err = m.silence(s)
		}
		if err != nil {
			return nil, err
		}
	}
	var out []time.Duration
	for _, j := range moved {
		at, err := m.waitFor(ctx, j, time.Minute, func() (time.Time, bool) { at, ok := m.back[j]; return at, ok })
		if err != nil {
			return nil, fmt.Errorf("reroute of %s: %w", j, err)
		}
		out = append(out, at.Sub(victims[on[j]]))
	}
	if kind == lossSilent {
		// The silent nodes go now. Crash, not Leave, and in parallel: each
		// close waits for the stream handshakes still in flight on its
		// slow links (silenceDelay).
		var wg sync.WaitGroup
		for s := range victims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.c.Crash(s)
			}()
		}
		wg.Wait()
		m.mu.Lock()
		m.quietBy = time.Now().Add(silenceDelay)
		m.mu.Unlock()
	}
	return out, nil
}
