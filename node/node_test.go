package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/mesh/leaktest"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
)

// TestMain fails the run if goroutines outlive the tests (leaktest).
func TestMain(m *testing.M) { leaktest.VerifyMain(m) }

// simMesh is a mesh of nodes with simulated cards on an in-memory network.
type simMesh struct {
	t     *testing.T
	net   *mesh.SimNetwork
	nodes []*Node
	tweak func(*Config)
	root  string // the nodes' data dirs; removed after every node closed
	log   *slog.Logger
}

func newSimMesh(t *testing.T, specs ...string) *simMesh {
	t.Helper()
	return newSimMeshWith(t, nil, specs...)
}

// newSimMeshWith is newSimMesh with a change to every node's Config.
func newSimMeshWith(t *testing.T, tweak func(*Config), specs ...string) *simMesh {
	t.Helper()
	// The root is made before the close is registered: cleanups run last
	// first, so every node has stopped writing to its data dir (attempt
	// logs, the store) before the dirs are removed.
	sm := &simMesh{t: t, net: mesh.NewSimNetwork(mesh.SimOptions{}), tweak: tweak, root: t.TempDir()}
	t.Cleanup(sm.close)
	sm.log = meshLogger(t) // its tail is printed before the nodes close
	for i, spec := range specs {
		sm.add(i, spec)
	}
	sm.waitMembers(len(specs))
	return sm
}

func (sm *simMesh) add(i int, spec string) *Node {
	sm.t.Helper()
	cat := device.DefaultCatalog()
	var backends []device.Backend
	if spec != "" {
		s, err := device.ParseSimSpec(spec, cat)
		if err != nil {
			sm.t.Fatal(err)
		}
		sim, err := device.NewSim(s, fmt.Sprintf("node-%d", i), cat)
		if err != nil {
			sm.t.Fatal(err)
		}
		backends = []device.Backend{sim}
	} else {
		backends = []device.Backend{}
	}
	dataDir, err := os.MkdirTemp(sm.root, fmt.Sprintf("node-%d-", i))
	if err != nil {
		sm.t.Fatal(err)
	}
	cfg := Config{
		DataDir:          dataDir,
		Sim:              sm.net,
		Devices:          backends,
		CoordinatorAfter: time.Millisecond,
		Executor:         executor.Config{Isolation: executor.IsolationProcess, Grace: 2 * time.Second},
		Logger:           sm.log,
		Owner:            testOwner(0), // one owner submits and steers through every node (tenants_test.go)
	}
	if len(sm.nodes) > 0 {
		cfg.Mesh.Join = sm.nodes[0].Mesh().Addrs()
	}
	if sm.tweak != nil {
		sm.tweak(&cfg)
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		sm.t.Fatal(err)
	}
	sm.nodes = append(sm.nodes, n)
	return n
}

func (sm *simMesh) close() {
	for _, n := range sm.nodes {
		if n != nil {
			n.Close()
		}
	}
	sm.net.Close()
}

func (sm *simMesh) waitMembers(want int) {
	sm.t.Helper()
	eventually(sm.t, 20*time.Second, fmt.Sprintf("every node sees %d members alive", want), func() bool {
		for _, n := range sm.nodes {
			if n.Mesh().NumAlive() != want {
				return false
			}
		}
		return true
	})
}

// waitCards waits until node n's book offers the given number of cards in
// all.
func (sm *simMesh) waitBook(n *Node, cards int) {
	sm.t.Helper()
	eventually(sm.t, 20*time.Second, fmt.Sprintf("the book offers %d cards", cards), func() bool {
		total := 0
		for _, s := range n.gossip.Book().Snapshot(time.Now()) {
			total += s.Cards
		}
		return total == cards
	})
}

// testLogger logs to stderr when GPUMESH_TEST_LOG is set (debug, info...).
func testLogger() *slog.Logger {
	lvl := os.Getenv("GPUMESH_TEST_LOG")
	if lvl == "" {
		return nil
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(lvl))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	eventuallyWhy(t, within, what, func() string {
		if cond() {
			return ""
		}
		return what
	})
}

// eventuallyWhy is eventually for a condition that says why it does not
// hold yet (empty when it does): the failure quotes its last answer.
func eventuallyWhy(t *testing.T, within time.Duration, what string, why func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		w := why()
		if w == "" {
			return
		}
		if time.Now().After(deadline) {
			if w == what {
				t.Fatalf("after %s: %s", within, what)
			}
			t.Fatalf("after %s: %s: %s", within, what, w)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronization
	}
}

// throughout fails t, with the message failure gives, as soon as cond
// stops holding in the next d: for what must stay so (an attempt that must
// not stop), which no event confirms.
func throughout(t *testing.T, d time.Duration, cond func() bool, failure func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if !cond() {
			t.Fatal(failure())
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// attemptRuns reports whether p's attempt of job runs on n's executor.
func attemptRuns(n *Node, job string, p market.Placement) bool {
	run, ok := n.exec.Lookup(attemptName(job, p.Share, p.Epoch))
	if !ok {
		return false
	}
	select {
	case <-run.Done():
		return false
	default:
		return true
	}
}

func waitState(t *testing.T, n *Node, id string, within time.Duration, states ...market.JobState) market.JobRecord {
	t.Helper()
	var rec market.JobRecord
	defer func() {
		if t.Failed() {
			t.Logf("last record: %+v", rec)
		}
	}()
	eventually(t, within, fmt.Sprintf("job %s reaches %v", id, states), func() bool {
		var err error
		rec, err = n.Job(context.Background(), id)
		if err != nil {
			return false
		}
		for _, s := range states {
			if rec.State == s {
				return true
			}
		}
		return false
	})
	return rec
}

func TestJobLandsOnTheRightModelAndAnyPeerAnswersForIt(t *testing.T) {
	sm := newSimMesh(t, "rtx4090-24g:2", "h100-sxm-80g:2", "a100-80g:4")
	for _, n := range sm.nodes {
		sm.waitBook(n, 8)
	}
	spec := market.JobSpec{
		AllowSimulated: true,
		ID:             "job-h100",
		Cards:          2,
		Models:         []string{"h100-*"},
		MaxPriceCNY:    30,
		Command:        []string{"sh", "-c", "echo visible=$CUDA_VISIBLE_DEVICES cards=$GPUMESH_LOCAL_CARDS; sleep 1"},
	}
	rec, err := sm.nodes[0].Submit(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != "job-h100" {
		t.Fatalf("submit returned %+v", rec)
	}
	rec = waitState(t, sm.nodes[2], "job-h100", 30*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded {
		t.Fatalf("job ended %s: %s", rec.State, rec.Reason)
	}
	h100 := sm.nodes[1].ID().String()
	for _, p := range rec.Placements {
		if p.State == market.PlacementExited && p.Node != h100 {
			t.Errorf("share %d ran on %s, not the H100 node", p.Share, p.Node)
		}
	}
	if rec.CostCNY <= 0 || rec.CardSeconds < 1.5 {
		t.Errorf("bill: %v CNY for %v card-seconds; want > 0 for ~2 card-seconds", rec.CostCNY, rec.CardSeconds)
	}
	var out bytes.Buffer
	if err := sm.nodes[2].Logs(context.Background(), api.LogRequest{Job: "job-h100"}, &out, func() {}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "visible=GPU-") || !strings.Contains(out.String(), "cards=2") {
		t.Errorf("logs read through another node: %q", out.String())
	}
}

// A gang on network host (process-mode nodes give no private network)
// meets at its master node's own address.
func TestGangJobSpansNodesWithOneRendezvous(t *testing.T) {
	sm := newSimMesh(t, "a100-80g:4", "a100-80g:4", "rtx4090-24g:1")
	for _, n := range sm.nodes {
		sm.waitBook(n, 9)
	}
	spec := market.JobSpec{
		AllowSimulated: true,
		ID:             "gang-8",
		Cards:          8,
		Layout:         market.Layout{Mode: market.LayoutPerNode, PerNode: 4},
		MaxPriceCNY:    20,
		Network:        market.NetworkHost,
		Command:        []string{"sh", "-c", "echo rank=$NODE_RANK nnodes=$NNODES master=$MASTER_ADDR:$MASTER_PORT world=$WORLD_SIZE"},
	}
	if _, err := sm.nodes[2].Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, sm.nodes[0], "gang-8", 30*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded {
		t.Fatalf("gang ended %s: %s", rec.State, rec.Reason)
	}
	var masters []string
	ranks := map[string]bool{}
	for share := range 2 {
		var out bytes.Buffer
		if err := sm.nodes[2].Logs(context.Background(), api.LogRequest{Job: "gang-8", Share: share}, &out, func() {}); err != nil {
			t.Fatal(err)
		}
		line := strings.TrimSpace(out.String())
		var rank, nnodes, world int
		var master string
		if _, err := fmt.Sscanf(line, "rank=%d nnodes=%d master=%s world=%d", &rank, &nnodes, &master, &world); err != nil {
			t.Fatalf("share %d printed %q: %v", share, line, err)
		}
		if nnodes != 2 || world != 8 {
			t.Errorf("share %d: nnodes=%d world=%d, want 2 and 8", share, nnodes, world)
		}
		ranks[fmt.Sprint(rank)] = true
		masters = append(masters, master)
	}
	if !ranks["0"] || !ranks["1"] || masters[0] != masters[1] || strings.HasPrefix(masters[0], ":") {
		t.Errorf("ranks %v, masters %v: want ranks 0 and 1 with one master address", ranks, masters)
	}
}

func TestCancelStopsEveryShare(t *testing.T) {
	sm := newSimMesh(t, "l40s-48g:2", "l40s-48g:2")
	for _, n := range sm.nodes {
		sm.waitBook(n, 4)
	}
	spec := market.JobSpec{AllowSimulated: true, ID: "long", Cards: 4, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	if _, err := sm.nodes[0].Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	waitState(t, sm.nodes[1], "long", 30*time.Second, market.JobRunning)
	start := time.Now()
	if _, err := sm.nodes[1].Cancel(context.Background(), "long"); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, sm.nodes[0], "long", 10*time.Second, market.JobCancelled)
	for _, n := range sm.nodes {
		eventually(t, 5*time.Second, "no attempt left running", func() bool { return len(n.exec.Running()) == 0 })
	}
	t.Logf("cancelled in %v; bill %.4f CNY", time.Since(start), rec.CostCNY)
}

func TestBadSpecNamesTheField(t *testing.T) {
	sm := newSimMesh(t, "a100-80g:1")
	_, err := sm.nodes[0].Submit(context.Background(), market.JobSpec{AllowSimulated: true, Cards: 0, MaxPriceCNY: 1, Command: []string{"true"}})
	var he *api.HTTPError
	if !errors.As(err, &he) || he.Status != 400 || he.Field != "cards" {
		t.Fatalf("err = %#v, want 400 naming cards", err)
	}
	if _, err := sm.nodes[0].Job(context.Background(), "nosuchjob"); !isNotFound(err) {
		t.Fatalf("unknown job: err = %v, want 404", err)
	}
}

func TestCoordinatorRestartKeepsJobsAndBills(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:2")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.waitBook(coord, 2)
	// Only the node without cards is eligible to coordinate once the runner
	// says it never coordinates.
	if err := runner.SetCoordinator(context.Background(), CoordinatorNever); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the runner stops offering to coordinate, and sees the other node offer", func() bool {
		m, ok := coord.Mesh().Member(runner.ID())
		c, ok2 := runner.Mesh().Member(coord.ID())
		return ok && !m.Coordinator && ok2 && c.Coordinator
	})
	spec := market.JobSpec{AllowSimulated: true, ID: "survivor", Cards: 2, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	if _, err := runner.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	before := waitState(t, coord, "survivor", 30*time.Second, market.JobRunning)
	if before.Coordinator != coord.ID().String() {
		t.Fatalf("coordinated by %s, want %s", before.Coordinator, coord.ID())
	}
	eventually(t, 10*time.Second, "the bill grows", func() bool {
		rec, _ := coord.Job(context.Background(), "survivor")
		return rec.CostCNY > 0
	})
	before, _ = coord.Job(context.Background(), "survivor")
	dir := coord.cfg.DataDir
	coord.Close()
	sm.nodes[0] = nil

	cfg := coord.cfg
	cfg.Mesh.Join = runner.Mesh().Addrs()
	restarted, err := Start(context.Background(), Config{DataDir: dir, Sim: sm.net, Devices: []device.Backend{}, CoordinatorAfter: time.Millisecond,
		Mesh: cfg.Mesh, Executor: executor.Config{Isolation: executor.IsolationProcess}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sm.nodes[0] = restarted
	if restarted.ID() != coord.ID() {
		t.Fatalf("restarted as %s, was %s", restarted.ID(), coord.ID())
	}
	rec, err := restarted.Job(context.Background(), "survivor")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State.Terminal() || rec.CostCNY < before.CostCNY || rec.Epoch < before.Epoch {
		t.Fatalf("after restart: %s, %.5f CNY, epoch %d; before: %s, %.5f CNY, epoch %d",
			rec.State, rec.CostCNY, rec.Epoch, before.State, before.CostCNY, before.Epoch)
	}
	waitState(t, restarted, "survivor", 30*time.Second, market.JobRunning)
}

// neverCoordinate turns coordination off on the given nodes and waits until
// every node agrees on who coordinates.
func (sm *simMesh) neverCoordinate(nodes ...*Node) {
	sm.t.Helper()
	never := map[*Node]bool{}
	for _, n := range nodes {
		never[n] = true
		if err := n.SetCoordinator(context.Background(), CoordinatorNever); err != nil {
			sm.t.Fatal(err)
		}
	}
	sm.agreeCoordinators(never)
}

// agreeCoordinators waits until every node sees every other as a
// coordinator, but those in never as neither a coordinator nor a standby:
// a test that picks a job ID by its HRW order among the coordinators, or
// counts a job's group, needs every node to compute the same (a node's
// flags reach the others with its next summary; a node joins as a
// standby, and one set to never coordinate stops being one only then).
func (sm *simMesh) agreeCoordinators(never map[*Node]bool) {
	sm.t.Helper()
	eventuallyWhy(sm.t, 10*time.Second, "every node agrees who coordinates", func() string {
		for _, a := range sm.nodes {
			for _, b := range sm.nodes {
				if a == b || a == nil || b == nil {
					continue
				}
				m, ok := a.Mesh().Member(b.ID())
				if !ok || m.Coordinator == never[b] || never[b] && m.Standby {
					return fmt.Sprintf("%s sees %s (known %v, state %v, coordinator %v, standby %v); %s sets its own coordinator %v, standby %v",
						a.ID().ShortString(), b.ID().ShortString(), ok, m.State, m.Coordinator, m.Standby, b.ID().ShortString(), b.coordNow.Load(), b.standby.Load())
				}
			}
		}
		return ""
	})
}

// peerIDs are the nodes' peer IDs, as market.Coordinators takes them.
func peerIDs(nodes []*Node) []string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID().String()
	}
	return ids
}

// firstID is the first of prefix-0, prefix-1, … that ok accepts: a job ID
// whose HRW order a test needs.
func firstID(prefix string, ok func(id string) bool) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); ok(id) {
			return id
		}
	}
}

func (sm *simMesh) byID(id string) *Node {
	for _, n := range sm.nodes {
		if n != nil && n.ID().String() == id {
			return n
		}
	}
	return nil
}

func livePlacement(rec market.JobRecord) (market.Placement, bool) {
	for _, p := range rec.Placements {
		if p.State == market.PlacementRunning {
			return p, true
		}
	}
	return market.Placement{}, false
}

// oneCardJobOnTwoRunners starts a coordinator (node 0) and two runners of
// one card each, and runs a one-card job of the given ID: it returns the
// mesh, the job's first placement and the runner that holds it.
func oneCardJobOnTwoRunners(t *testing.T, id string) (*simMesh, market.Placement, *Node) {
	t.Helper()
	sm := newSimMesh(t, "", "a100-80g:1", "a100-80g:1")
	sm.neverCoordinate(sm.nodes[1], sm.nodes[2])
	sm.waitBook(sm.nodes[0], 2)
	if _, err := sm.nodes[0].Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, sm.nodes[0], id, 20*time.Second, market.JobRunning)
	first, _ := livePlacement(rec)
	return sm, first, sm.byID(first.Node)
}

func TestRunnerCrashMovesTheShare(t *testing.T) {
	sm, first, runner := oneCardJobOnTwoRunners(t, "moving")
	coord := sm.nodes[0]
	var rec market.JobRecord
	start := time.Now()
	if err := sm.net.Crash(runner.ID()); err != nil {
		t.Fatal(err)
	}
	var moved market.Placement
	eventually(t, 15*time.Second, "the share runs on the other node under a higher epoch", func() bool {
		rec, _ = coord.Job(context.Background(), "moving")
		p, ok := livePlacement(rec)
		moved = p
		return ok && p.Node != first.Node && p.Epoch > first.Epoch && p.StartedAt.After(start)
	})
	t.Logf("share moved in %v (epoch %d → %d)", moved.StartedAt.Sub(start).Round(time.Millisecond), first.Epoch, moved.Epoch)
	// The cut-off runner fenced itself: its process is gone.
	eventually(t, 10*time.Second, "the cut-off runner stopped its attempt", func() bool { return len(runner.exec.Running()) == 0 })
}

func TestCoordinatorCrashSuccessorTakesOver(t *testing.T) {
	sm := newSimMesh(t, "", "", "a100-80g:1")
	runner := sm.nodes[2]
	rec, old, successor := runOnTheRunner(t, sm, "orphan")
	eventually(t, 10*time.Second, "the other coordinator holds a replica", func() bool {
		r, ok := successor.view.Job("orphan")
		return ok && r.State == market.JobRunning
	})
	start := time.Now()
	if err := sm.net.Crash(old.ID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the successor coordinates the job", func() bool {
		r, err := runner.Job(context.Background(), "orphan")
		return err == nil && r.Coordinator == successor.ID().String() && r.Term > rec.Term
	})
	took := time.Since(start)
	after, _ := runner.Job(context.Background(), "orphan")
	if p, ok := livePlacement(after); !ok {
		t.Errorf("no share running after the takeover: %+v", after.Placements)
	} else {
		t.Logf("successor took over in %v; share epoch %d (was %d)", took.Round(time.Millisecond), p.Epoch, rec.Epoch)
	}
	cancelled, err := runner.Cancel(context.Background(), "orphan")
	if err != nil {
		t.Fatalf("cancel through the successor: %v", err)
	}
	if cancelled.Coordinator != successor.ID().String() {
		t.Errorf("cancel answered by %s", cancelled.Coordinator)
	}
	waitState(t, runner, "orphan", 10*time.Second, market.JobCancelled)
}

// runOnTheRunner has the last node of sm, which never coordinates, submit
// a 1-card sleeping job and waits until it runs there. It returns the
// job's record, its coordinator and another of the coordinators (the
// nodes before the runner), nil if there is only one.
func runOnTheRunner(t *testing.T, sm *simMesh, id string) (rec market.JobRecord, coord, other *Node) {
	t.Helper()
	runner := sm.nodes[len(sm.nodes)-1]
	coords := sm.nodes[:len(sm.nodes)-1]
	sm.neverCoordinate(runner)
	for _, n := range coords {
		sm.waitBook(n, 1)
	}
	if _, err := runner.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	rec = waitState(t, runner, id, 20*time.Second, market.JobRunning)
	coord = sm.byID(rec.Coordinator)
	for _, n := range coords {
		if n != coord {
			return rec, coord, n
		}
	}
	return rec, coord, nil
}

// Cancelling a job that has ended is answered with its record, also once
// its coordinator has restarted and holds the job only as a record, not in
// its market: a retried cancel (the first answer was lost) must not look
// like a lost job.
func TestCancelOfAnEndedJobAfterItsCoordinatorRestarted(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.waitBook(coord, 1)
	sm.neverCoordinate(runner)
	if _, err := runner.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "done", Cards: 1, MaxPriceCNY: 20, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, "done", 30*time.Second, market.JobSucceeded)
	dir, cfg := coord.cfg.DataDir, coord.cfg
	coord.Close()
	sm.nodes[0] = nil
	cfg.Mesh.Join = runner.Mesh().Addrs()
	restarted, err := Start(context.Background(), Config{DataDir: dir, Sim: sm.net, Devices: []device.Backend{}, CoordinatorAfter: time.Millisecond,
		Mesh: cfg.Mesh, Executor: executor.Config{Isolation: executor.IsolationProcess}, Logger: testLogger(), Owner: testOwner(0)})
	if err != nil {
		t.Fatal(err)
	}
	sm.nodes[0] = restarted
	rec, err := restarted.Cancel(context.Background(), "done")
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if rec.State != market.JobSucceeded {
		t.Errorf("cancel answered %s, want the job's end, succeeded", rec.State)
	}
}

// A coordinator that restarts while a cancelled job's share is still
// stopping (its process ignores SIGTERM for the grace period) takes the job
// up again to finish the stop: the share ends, and the job shows no share
// left stopping. (The project's CI saw such a job stay "stopping" for good:
// the restarted coordinator refused to adopt a job that had ended, and no
// other member would, since it still answered for the job.)
func TestACancelledJobStillStoppingIsFinishedAfterItsCoordinatorRestarts(t *testing.T) {
	sm := newSimMeshWith(t, func(c *Config) { c.Executor.Grace = 4 * time.Second }, "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.waitBook(coord, 1)
	sm.neverCoordinate(runner)
	const id = "slow-stop"
	if _, err := runner.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", `trap "" TERM; sleep 300`}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, id, 30*time.Second, market.JobRunning)
	p, _ := livePlacement(rec)
	eventually(t, 10*time.Second, "the job's process runs", func() bool { return attemptRuns(runner, id, p) })
	if _, err := coord.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	stopping := func(r market.JobRecord) bool {
		for _, pl := range r.Placements {
			if pl.State == market.PlacementStopping {
				return true
			}
		}
		return false
	}
	rec, err := coord.Job(context.Background(), id)
	if err != nil || rec.State != market.JobCancelled || !stopping(rec) {
		t.Fatalf("after the cancel: %s, %s (err %v); want cancelled with its share stopping", rec.State, describePlacements(rec), err)
	}
	dir, cfg := coord.cfg.DataDir, coord.cfg
	coord.Close()
	sm.nodes[0] = nil
	cfg.Mesh.Join = runner.Mesh().Addrs()
	restarted, err := Start(context.Background(), Config{DataDir: dir, Sim: sm.net, Devices: []device.Backend{}, CoordinatorAfter: time.Millisecond,
		Mesh: cfg.Mesh, Executor: cfg.Executor, Logger: cfg.Logger, Owner: testOwner(0)})
	if err != nil {
		t.Fatal(err)
	}
	sm.nodes[0] = restarted
	eventuallyWhy(t, 30*time.Second, "the share stops and the job shows it", func() string {
		r, err := restarted.Job(context.Background(), id)
		if err != nil {
			return err.Error()
		}
		if r.State != market.JobCancelled || len(r.Live()) > 0 {
			return fmt.Sprintf("%s, %s", r.State, describePlacements(r))
		}
		return ""
	})
	eventually(t, 10*time.Second, "the job's process is gone", func() bool { return !attemptRuns(runner, id, p) })
}
