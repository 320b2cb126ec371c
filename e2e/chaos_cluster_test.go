//go:build unix

package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// cluster is a mesh of node processes that the chaos suite injures, and the
// books it keeps to judge the outcome: every job the mesh acknowledged, the
// markers the jobs' attempts wrote, the faults injected.
type cluster struct {
	t     testing.TB
	nodes []*proc
	down  map[*proc]bool // crashed and not restarted
	lab   *netLab        // nil: every node on loopback
	marks string         // where attempts write their markers
	rng   *rand.Rand

	mu     sync.Mutex
	jobs   []*chaosJob
	faults map[string]int
	events []string // what happened, for a failure's report
	start  time.Time
	// doubleUse lists the cards seen used by two attempts' processes at
	// once (watchCards).
	doubleUse []string
	// shares sees two attempts of one share alive at once (watchCards).
	shares *overlaps
	// bothSides names the jobs a test runs on both sides of a partition
	// on purpose (a known limit, market/README.md): their shares'
	// overlaps are reported, not counted as violations.
	bothSides map[string]string
}

// chaosJob is a job the mesh acknowledged.
type chaosJob struct {
	id   string
	spec market.JobSpec
	// exit is the status every attempt exits with when its work is done.
	exit int
	// cancelled: the test cancelled it, so cancelled is a legitimate end.
	cancelled bool
	// ended: a record of it was seen in an end state (the suite stops
	// asking about it until the end).
	ended bool
	// coordinator is the peer ID of the coordinator that acknowledged it.
	coordinator string
}

// checkTwice names the attempt's markers ($m) and writes $m.twice when the
// attempt's share and epoch started before.
const checkTwice = `m=$CHAOS_MARKS/$GPUMESH_JOB_ID.$GPUMESH_SHARE.$GPUMESH_EPOCH
[ -e $m.start ] && echo $$ > $m.twice`

// The variables the suite's jobs read. CHAOS_MARKS also tags every process
// of a test's jobs, so that none can outlive the test unnoticed.
const (
	envMarks = "CHAOS_MARKS"
	envRun   = "CHAOS_RUN"  // seconds of work
	envExit  = "CHAOS_EXIT" // exit status when done
	envSteps = "CHAOS_STEPS"
	envCkpt  = "CHAOS_CKPT_KB" // checkpoint ballast written at the end
)

// batchScript does CHAOS_RUN seconds of work. Each attempt writes
// MARKS/JOB.SHARE.EPOCH.start holding its process group when it starts, and
// .end when its work is done, then exits with CHAOS_EXIT. An attempt that
// finds the .start of its share and epoch already there writes .twice: two
// coordinators gave out one epoch (checkTwice is the same for every script).
const batchScript = checkTwice + `
echo $$ > $m.start
sleep $CHAOS_RUN
echo $$ > $m.end
exit $CHAOS_EXIT`

// stepScript counts CHAOS_STEPS steps of CHAOS_STEP_S seconds (default
// 0.1) in its checkpoint, resuming
// from the restored one (.from says where each attempt resumed, .at the
// step it reached, written before the checkpoint holds it), then writes
// CHAOS_CKPT_KB of ballast to the checkpoint and ends; the runner ships the
// checkpoint every --checkpoint-interval and as the attempt ends.
const stepScript = checkTwice + `
d=$GPUMESH_CHECKPOINT_DIR
s=$(cat $d/step 2>/dev/null || echo 0)
echo $$ > $m.start
echo $s > $m.from
while [ $s -lt $CHAOS_STEPS ]; do s=$((s+1)); echo $s > $m.at; echo $s > $d/step; sleep ${CHAOS_STEP_S:-0.1}; done
head -c ${CHAOS_CKPT_KB}k /dev/urandom > $d/ballast
echo $$ > $m.end
exit 0`

// serviceScript runs until stopped.
const serviceScript = checkTwice + `
echo $$ > $m.start
exec sleep 100000`

// newCluster starts one node per spec of simulated cards (loopback, or in
// the lab's namespaces when lab is not nil), each joining those before it,
// and waits until every node sees all of them. prices, when not nil, gives
// each node a --price (MODEL=CNY).
func newCluster(t testing.TB, lab *netLab, seed uint64, specs, prices []string) *cluster {
	t.Helper()
	extra := make([][]string, len(specs))
	for i := range specs {
		if prices != nil && prices[i] != "" {
			extra[i] = []string{"--price", prices[i]}
		}
	}
	return newClusterWith(t, lab, seed, specs, extra)
}

// newClusterWith is newCluster with more flags for each node.
func newClusterWith(t testing.TB, lab *netLab, seed uint64, specs []string, extra [][]string) *cluster {
	t.Helper()
	c := &cluster{
		t: t, lab: lab, marks: t.TempDir(), down: map[*proc]bool{}, faults: map[string]int{},
		rng: rand.New(rand.NewPCG(seed, 0x5eed)), start: time.Now(),
	}
	t.Logf("chaos seed %d", seed)
	cards := 0
	for i, spec := range specs {
		name := fmt.Sprintf("n%d", i)
		args := append([]string{"--sim", spec, "--sim-seed", name}, extra[i]...)
		for j := max(0, i-3); j < i; j++ {
			args = append(args, "--join", c.nodes[j].joinAddr())
		}
		var p *proc
		if lab != nil {
			p = lab.startNode(t, i, name, args...)
		} else {
			p = startNode(t, name, args...)
		}
		c.nodes = append(c.nodes, p)
		cards += simCards(spec)
	}
	waitAllSee(t, c.nodes, len(specs), cards)
	c.watchCards()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos events:\n%s", strings.Join(c.events, "\n"))
		}
		c.saveLogs()
	})
	return c
}

// watchCards samples the test's job processes every 100 ms until the test
// ends, and records every card that two attempts' processes hold at once
// (from the card IDs in their CUDA_VISIBLE_DEVICES), and every share two
// of whose attempts run at once (overlaps).
func (c *cluster) watchCards() {
	stop := make(chan struct{})
	done := make(chan struct{})
	seen := map[string]bool{}
	c.shares = newOverlaps(overlapGrace)
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			holders := map[string]map[string]bool{}
			shares := map[string]map[uint64]bool{}
			at := time.Now()
			for _, p := range jobProcs(envMarks, c.marks) {
				if p.env["GPUMESH_JOB_ID"] == "" || p.env["GPUMESH_SHARE"] == "" || p.env["GPUMESH_EPOCH"] == "" {
					// Its environment was read in part: a process exiting as
					// it was read (a step job's sleep, every 100 ms) shows
					// a truncated one, which names no attempt.
					continue
				}
				attempt := p.env["GPUMESH_JOB_ID"] + "/" + p.env["GPUMESH_SHARE"] + "/e" + p.env["GPUMESH_EPOCH"]
				share := p.env["GPUMESH_JOB_ID"] + "/" + p.env["GPUMESH_SHARE"]
				if epoch, err := strconv.ParseUint(p.env["GPUMESH_EPOCH"], 10, 64); err == nil {
					if shares[share] == nil {
						shares[share] = map[uint64]bool{}
					}
					shares[share][epoch] = true
				}
				for _, card := range strings.Split(p.env["CUDA_VISIBLE_DEVICES"], ",") {
					if card == "" {
						continue
					}
					if holders[card] == nil {
						holders[card] = map[string]bool{}
					}
					holders[card][attempt] = true
				}
			}
			c.mu.Lock()
			c.shares.sample(at, shares)
			c.mu.Unlock()
			for card, as := range holders {
				if len(as) < 2 {
					continue
				}
				names := make([]string, 0, len(as))
				for a := range as {
					names = append(names, a)
				}
				sort.Strings(names)
				key := card + strings.Join(names, ",")
				if !seen[key] {
					seen[key] = true
					c.mu.Lock()
					c.doubleUse = append(c.doubleUse, fmt.Sprintf("card %s run by %s at once", card, strings.Join(names, " and ")))
					c.mu.Unlock()
				}
			}
		}
	}()
	c.t.Cleanup(func() { close(stop); <-done })
}

// dumpStacks makes every live node print its goroutines (SIGQUIT) into
// its log, and waits for it to exit.
func (c *cluster) dumpStacks() {
	for _, p := range c.live() {
		p.signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// saveLogs writes every node's log, all its runs, and the events to
// $GPUMESH_CHAOS_LOGS/TEST/ when that is set.
func (c *cluster) saveLogs() {
	dir := os.Getenv("GPUMESH_CHAOS_LOGS")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.ReplaceAll(c.t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Log(err)
		return
	}
	for _, p := range c.nodes {
		_ = os.WriteFile(filepath.Join(dir, p.name+"-"+short(p.peerID)+".log"), []byte(p.log.String()), 0o644)
	}
	_ = os.WriteFile(filepath.Join(dir, "events.txt"), []byte(strings.Join(c.events, "\n")+"\n"), 0o644)
}

// simCards counts the cards of a --sim spec ("a100-80g:2,l40s-48g:1").
func simCards(spec string) int {
	n := 0
	for _, part := range strings.Split(spec, ",") {
		var k int
		fmt.Sscanf(part[strings.LastIndexByte(part, ':')+1:], "%d", &k)
		n += k
	}
	return n
}

// note records an event with its time since the cluster started.
func (c *cluster) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf("%7.3fs ", time.Since(c.start).Seconds())+fmt.Sprintf(format, args...))
}

func (c *cluster) fault(kind string, format string, args ...any) {
	c.mu.Lock()
	c.faults[kind]++
	c.mu.Unlock()
	c.note(kind+": "+format, args...)
}

// live returns the nodes that are up.
func (c *cluster) live() []*proc {
	var out []*proc
	for _, p := range c.nodes {
		if !c.down[p] {
			out = append(out, p)
		}
	}
	return out
}

// any returns a live node at random.
func (c *cluster) any() *proc {
	l := c.live()
	return l[c.rng.IntN(len(l))]
}

func (c *cluster) byID(id string) *proc {
	for _, p := range c.nodes {
		if p.peerID == id {
			return p
		}
	}
	return nil
}

// batch is a spec of one card for seconds of work, exiting with exit.
func (c *cluster) batch(seconds float64, exit int) market.JobSpec {
	return market.JobSpec{
		AllowSimulated: true,
		Cards:          1, MaxPriceCNY: 50, Command: []string{"sh", "-c", batchScript},
		Env: map[string]string{envMarks: c.marks, envRun: fmt.Sprint(seconds), envExit: fmt.Sprint(exit)},
	}
}

// stepper is a checkpointing spec of steps 100 ms steps and kb of ballast.
func (c *cluster) stepper(steps, kb int) market.JobSpec {
	return market.JobSpec{
		AllowSimulated: true,
		Cards:          1, MaxPriceCNY: 50, Command: []string{"sh", "-c", stepScript},
		Env: map[string]string{envMarks: c.marks, envSteps: fmt.Sprint(steps), envCkpt: fmt.Sprint(kb)},
	}
}

// service is a service spec of replicas one-card replicas.
func (c *cluster) service(replicas int) market.JobSpec {
	return market.JobSpec{
		AllowSimulated: true,
		Cards:          1, MaxPriceCNY: 50, Kind: market.KindService, Replicas: replicas,
		Command: []string{"sh", "-c", serviceScript},
		Env:     map[string]string{envMarks: c.marks},
	}
}

// submit submits spec through p and remembers the acknowledged job.
func (c *cluster) submit(p *proc, spec market.JobSpec) *chaosJob {
	c.t.Helper()
	rec := p.submit(spec)
	exit := 0
	if spec.Env[envExit] != "" {
		fmt.Sscanf(spec.Env[envExit], "%d", &exit)
	}
	j := &chaosJob{id: rec.ID, spec: spec, exit: exit, coordinator: rec.Coordinator}
	c.mu.Lock()
	c.jobs = append(c.jobs, j)
	c.mu.Unlock()
	c.note("submitted %s through %s (coordinator %s)", rec.ID, p.name, c.name(rec.Coordinator))
	return j
}

func (c *cluster) name(id string) string {
	if p := c.byID(id); p != nil {
		return p.name
	}
	return short(id)
}

// record reads a job's record through any live node that answers.
func (c *cluster) record(id string) (market.JobRecord, error) {
	var err error
	for _, p := range c.live() {
		var rec market.JobRecord
		start := time.Now()
		rec, err = p.job(id)
		if took := time.Since(start); took > 2*time.Second {
			c.note("slow: GET job %s through %s took %v: %v", id, p.name, took.Round(time.Millisecond), err)
		}
		if err == nil {
			if rec.State.Terminal() {
				c.mu.Lock()
				for _, j := range c.jobs {
					if j.id == id {
						j.ended = true
					}
				}
				c.mu.Unlock()
			}
			return rec, nil
		}
	}
	return market.JobRecord{}, err
}

// waitRecord polls the job's record until cond holds.
func (c *cluster) waitRecord(id string, within time.Duration, what string, cond func(market.JobRecord) bool) market.JobRecord {
	c.t.Helper()
	var rec market.JobRecord
	var lastErr error
	defer func() {
		if c.t.Failed() {
			c.t.Logf("job %s last seen: %s; last error: %v", id, describe(&rec), lastErr)
		}
	}()
	eventually(c.t, within, fmt.Sprintf("job %s: %s", id, what), func() bool {
		r, err := c.record(id)
		if err != nil {
			lastErr = err
			return false
		}
		rec = r
		return cond(r)
	})
	return rec
}

// running waits until the job's shares all run and returns the record.
func (c *cluster) running(id string, within time.Duration) market.JobRecord {
	c.t.Helper()
	return c.waitRecord(id, within, "running", func(r market.JobRecord) bool {
		if r.State != market.JobRunning {
			return false
		}
		for _, p := range r.Live() {
			if p.State != market.PlacementRunning || p.StartedAt.IsZero() {
				return false
			}
		}
		return true
	})
}

// describe is a record in one line, for messages.
func describe(r *market.JobRecord) string {
	if r.ID == "" {
		return "nothing"
	}
	var ps []string
	for _, p := range r.Placements {
		ps = append(ps, fmt.Sprintf("s%d/e%d@%s:%s", p.Share, p.Epoch, short(p.Node), p.State))
	}
	return fmt.Sprintf("%s term %d coord %s [%s] %s", r.State, r.Term, short(r.Coordinator), strings.Join(ps, " "), r.Reason)
}

// runnersOf returns the nodes that run the job's live attempts.
func (c *cluster) runnersOf(rec market.JobRecord) []*proc {
	var out []*proc
	for _, p := range rec.Live() {
		if n := c.byID(p.Node); n != nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// crash kills a node as a machine crash does: the node and its jobs at
// once, no goodbye.
func (c *cluster) crash(p *proc, why string) {
	p.kill()
	c.down[p] = true
	c.fault("crash", "%s (%s)", p.name, why)
}

// restart starts a crashed node again with its data dir, joining the
// nodes that are up.
func (c *cluster) restart(p *proc) {
	c.t.Helper()
	var args []string
	for i := 0; i < len(p.args); i++ {
		if p.args[i] == "--join" {
			i++
			continue
		}
		args = append(args, p.args[i])
	}
	for _, q := range c.live() {
		if q != p {
			args = append(args, "--join", q.joinAddr())
		}
	}
	p.args = args
	p.start()
	delete(c.down, p)
	c.note("restarted %s", p.name)
	c.waitMembership()
}

// waitMembership waits until every live node sees exactly the live nodes
// alive.
func (c *cluster) waitMembership() {
	c.t.Helper()
	live := c.live()
	for _, p := range live {
		eventually(c.t, 30*time.Second, p.name+" sees every live node alive, and no other", func() bool {
			peers := p.peers()
			for _, q := range live {
				if peers[q.peerID].State != "alive" {
					return false
				}
			}
			return countAlive(peers) == len(live)
		})
	}
}

func countAlive(peers map[string]api.Peer) int {
	n := 0
	for _, m := range peers {
		if m.State == "alive" {
			n++
		}
	}
	return n
}

// restartAll brings every crashed node back.
func (c *cluster) restartAll() {
	c.t.Helper()
	for _, p := range c.nodes {
		if c.down[p] {
			c.restart(p)
		}
	}
}

// killDaemon kills a node's process alone (kill -9 of the daemon, its
// jobs left running: a node that crashes on a bug, or is killed by the
// OOM killer): its fence keeper stops them.
func (c *cluster) killDaemon(p *proc, why string) {
	p.signal(syscall.SIGKILL)
	<-p.done
	c.down[p] = true
	c.fault("kill", "%s (%s)", p.name, why)
}

// stall stops a node's process (not its jobs) for d: a node frozen by the
// host, a VM paused, a process swapped out. While stopped it can neither
// renew its leases nor stop its jobs.
func (c *cluster) stall(p *proc, d time.Duration) {
	p.signal(syscall.SIGSTOP)
	c.fault("stall", "%s for %v", p.name, d)
	time.Sleep(d) // the fault's length, not synchronization
	p.signal(syscall.SIGCONT)
	c.note("%s resumed", p.name)
}

// cancel cancels a job through a live node.
func (c *cluster) cancel(j *chaosJob) {
	c.t.Helper()
	j.cancelled = true
	eventually(c.t, 20*time.Second, "cancel "+j.id, func() bool {
		resp, err := c.any().do(http.MethodDelete, "/v1/jobs/"+j.id)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c.note("cancelled %s", j.id)
}
