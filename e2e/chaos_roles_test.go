//go:build unix

package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// Helpers that let a chaos scenario choose who plays which part (the
// coordinator is the top of the job's HRW list, so the job's ID chooses
// it) and watch what a user would see (attempts starting again, replicas
// alive).

// chaosSeed is GPUMESH_CHAOS_SEED when set, else the clock: the test logs
// it so a failing run can be replayed.
func chaosSeed(t testing.TB) uint64 {
	if s := os.Getenv("GPUMESH_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GPUMESH_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// roles returns, as the live node with the fullest view sees them, the
// alive members that coordinate, those on standby (they will once members
// long enough) and all alive members.
func (c *cluster) roles() (coord, standby, alive []string) {
	var view map[string]api.Peer
	for _, p := range c.live() {
		if v := p.peers(); countAlive(v) > countAlive(view) {
			view = v
		}
	}
	for id, m := range view {
		if m.State != "alive" {
			continue
		}
		alive = append(alive, id)
		switch {
		case m.Coordinator:
			coord = append(coord, id)
		case m.Standby:
			standby = append(standby, id)
		}
	}
	return coord, standby, alive
}

// eligible returns the peer IDs that may be first in a job's group now:
// the members that coordinate, else the standbys, else every alive member.
func (c *cluster) eligible() []string {
	coord, standby, alive := c.roles()
	switch {
	case len(coord) > 0:
		return coord
	case len(standby) > 0:
		return standby
	}
	return alive
}

// groupOf is a job's coordinator group of depth as the nodes compute it
// (node's coordinators) from roles: rendezvous hashing over the
// coordinators, then, while they are too few, over the standbys.
func groupOf(id string, depth int, coord, standby, alive []string) []string {
	if len(coord) == 0 && len(standby) == 0 {
		coord = alive
	}
	top := market.Coordinators(id, coord, depth)
	if len(top) < depth {
		top = append(top, market.Coordinators(id, standby, depth-len(top))...)
	}
	return top
}

// canHead reports whether id can be first in some job's group (groupOf):
// it coordinates, or none does and it is on standby, or neither kind is
// left and it is alive.
func canHead(id string, coord, standby, alive []string) bool {
	switch {
	case len(coord) > 0:
		return slices.Contains(coord, id)
	case len(standby) > 0:
		return slices.Contains(standby, id)
	}
	return slices.Contains(alive, id)
}

var jobSeq atomic.Int64

// idFor returns a new job ID whose coordinator is coord and whose
// replicas (the next two of its HRW list, or the next one when too few
// members are left) are none of avoid. A runner that holds its job's
// replica is another scenario: cut off alone, it takes the job over
// (TestChaosPartition leaves it out; see the chaos branch's notes).
func (c *cluster) idFor(coord *proc, avoid ...*proc) string {
	c.t.Helper()
	// coord was chosen from one node's view (coordinatorOf); the fullest
	// view may change between two calls (a member's flag arriving, one
	// suspected for a moment): wait for a view in which coord can head a
	// group, or no job ID would ever do.
	var coords, standby, alive []string
	eventually(c.t, 10*time.Second, "a view in which "+coord.name+" can head a job's group", func() bool {
		coords, standby, alive = c.roles()
		return canHead(coord.peerID, coords, standby, alive)
	})
	members := len(coords) + len(standby)
	if members == 0 {
		members = len(alive)
	}
	depth := 3
	if members-len(avoid) < 3 {
		depth = 2
	}
	for range 10000 {
		id := fmt.Sprintf("chaos-%d-%d", c.rng.Uint32()%100000, jobSeq.Add(1))
		top := groupOf(id, depth, coords, standby, alive)
		if len(top) < 2 || top[0] != coord.peerID {
			continue
		}
		ok := true
		for _, a := range avoid {
			ok = ok && !slices.Contains(top[1:], a.peerID)
		}
		if ok {
			return id
		}
	}
	c.t.Fatalf("no job ID makes %s the coordinator among %d eligible members", coord.name, members)
	return ""
}

// coordinatorOf returns the first of prefer that is eligible to
// coordinate now, else an eligible node at random. (A node coordinates
// once it has been a member for 30 s; before any has, all do.)
func (c *cluster) coordinatorOf(prefer ...*proc) *proc {
	el := c.eligible()
	for _, p := range prefer {
		if slices.Contains(el, p.peerID) && !c.down[p] {
			return p
		}
	}
	for range 100 {
		if p := c.byID(el[c.rng.IntN(len(el))]); p != nil && !c.down[p] {
			return p
		}
	}
	c.t.Fatalf("no live node is eligible to coordinate among %d", len(el))
	return nil
}

// submitAt submits spec under an ID that the first eligible node of
// prefer coordinates (and whose replicas are none of avoid), through a
// node at random. It returns the job and its coordinator.
func (c *cluster) submitAt(prefer []*proc, spec market.JobSpec, avoid ...*proc) (*chaosJob, *proc) {
	c.t.Helper()
	coord := c.coordinatorOf(prefer...)
	spec.ID = c.idFor(coord, avoid...)
	j := c.submit(c.any(), spec)
	// The acknowledgement names the coordinator; asking for the record
	// again could fail under load and leave the test crashing the wrong
	// node.
	if j.coordinator != coord.peerID {
		c.t.Logf("job %s is coordinated by %s, not %s as chosen (membership changed)", j.id, c.name(j.coordinator), coord.name)
		if got := c.byID(j.coordinator); got != nil {
			coord = got
		}
	}
	return j, coord
}

// rerun waits until the job's share of old runs again under a higher
// epoch on another node, and returns the new placement and when its
// process wrote its start marker.
func (c *cluster) rerun(job string, old market.Placement, within time.Duration) (market.Placement, time.Time) {
	c.t.Helper()
	var moved market.Placement
	var at time.Time
	c.waitRecord(job, within, fmt.Sprintf("share %d runs again after epoch %d on %s", old.Share, old.Epoch, c.name(old.Node)), func(r market.JobRecord) bool {
		for _, p := range r.Placements {
			if p.Epoch <= old.Epoch || p.Node == old.Node || p.State != market.PlacementRunning {
				continue
			}
			if t, ok := c.attemptStarted(job, p.Share, p.Epoch); ok {
				moved, at = p, t
				return true
			}
		}
		return false
	})
	return moved, at
}

// onlyLive returns the job's one live placement.
func onlyLive(t testing.TB, rec market.JobRecord) market.Placement {
	t.Helper()
	live := rec.Live()
	if len(live) != 1 {
		t.Fatalf("job %s has %d live placements, want 1: %s", rec.ID, len(live), describe(&rec))
	}
	return live[0]
}

// waitMarker waits until the attempt of job at share/epoch has written
// the marker kind ("start", "end").
func (c *cluster) waitMarker(job string, share int, epoch uint64, kind string, within time.Duration) marker {
	c.t.Helper()
	var m marker
	eventually(c.t, within, fmt.Sprintf("job %s share %d epoch %d writes its %s marker", job, share, epoch, kind), func() bool {
		m = c.markers(job)[[2]uint64{uint64(share), epoch}]
		if kind == "end" {
			return !m.ended.IsZero()
		}
		return !m.started.IsZero()
	})
	return m
}

// replicaWatch samples, every 10 ms, how many replicas of a service have
// a live process, and keeps the least seen and the longest time at zero.
type replicaWatch struct {
	c      *cluster
	job    string
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	least  int
	zeroAt time.Time
	zero   time.Duration // longest stretch with no replica alive
	seen   bool          // every replica has run at least once
}

// watchReplicas starts sampling once the service has want replicas alive.
func (c *cluster) watchReplicas(job string, want int) *replicaWatch {
	c.t.Helper()
	w := &replicaWatch{c: c, job: job, stop: make(chan struct{}), least: want}
	eventually(c.t, 30*time.Second, fmt.Sprintf("service %s has %d replicas alive", job, want), func() bool { return w.alive() >= want })
	w.wg.Add(1)
	go w.loop()
	c.t.Cleanup(w.close)
	return w
}

func (w *replicaWatch) alive() int {
	n := 0
	for _, m := range w.c.markers(w.job) {
		if m.pgid > 0 && syscall.Kill(-m.pgid, 0) == nil {
			n++
		}
	}
	return n
}

func (w *replicaWatch) loop() {
	defer w.wg.Done()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			n := w.alive()
			w.mu.Lock()
			w.least = min(w.least, n)
			switch {
			case n == 0 && w.zeroAt.IsZero():
				w.zeroAt = now
				w.c.note("service %s: no replica alive", w.job)
			case n > 0 && !w.zeroAt.IsZero():
				w.zero = max(w.zero, now.Sub(w.zeroAt))
				w.c.note("service %s: a replica alive again after %v", w.job, now.Sub(w.zeroAt).Round(time.Millisecond))
				w.zeroAt = time.Time{}
			}
			w.mu.Unlock()
		}
	}
}

// close stops sampling and returns the least replicas seen alive and the
// longest stretch at zero.
func (w *replicaWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

func (w *replicaWatch) result() (least int, zero time.Duration) {
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.zeroAt.IsZero() {
		w.zero = max(w.zero, time.Since(w.zeroAt))
	}
	return w.least, w.zero
}

// distinctNodes reports whether the live placements are on distinct nodes.
func distinctNodes(rec market.JobRecord) bool {
	var nodes []string
	for _, p := range rec.Live() {
		if slices.Contains(nodes, p.Node) {
			return false
		}
		nodes = append(nodes, p.Node)
	}
	return true
}

// placeOn submits spec as submitAt does and waits until it runs; when its
// share landed on none of runners (their bids came after the bid window
// closed: a cold link, a busy machine), it cancels the job and submits
// again, a few times. It returns the job, its coordinator and the running
// record.
func (c *cluster) placeOn(runners []*proc, prefer []*proc, spec market.JobSpec, avoid ...*proc) (*chaosJob, *proc, market.JobRecord) {
	c.t.Helper()
	var names []string
	for _, r := range runners {
		names = append(names, r.name)
	}
	for try := 1; ; try++ {
		j, coord := c.submitAt(prefer, spec, avoid...)
		rec := c.running(j.id, 20*time.Second)
		live := onlyLive(c.t, rec)
		if slices.ContainsFunc(runners, func(r *proc) bool { return r.peerID == live.Node }) {
			return j, coord, rec
		}
		if try == 6 {
			if os.Getenv("GPUMESH_CHAOS_LOGS") != "" {
				c.dumpStacks()
			}
			c.t.Fatalf("job %s runs on %s, not on %v, after %d tries: %s\n%s", j.id, c.name(live.Node), names, try, describe(&rec), rec.Explanation.String())
		}
		c.t.Logf("job %s landed on %s, not on %v; submitting again:\n%s", j.id, c.name(live.Node), names, rec.Explanation.String())
		c.cancel(j)
	}
}
