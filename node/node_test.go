package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gossipsub's own goroutines end with their context but cannot be
		// waited for (see gossip's package doc).
		goleak.IgnoreTopFunction("github.com/libp2p/go-libp2p-pubsub.(*PubSub).handleSendingMessage"),
	)
}

// simMesh is a mesh of nodes with simulated cards on an in-memory network.
type simMesh struct {
	t     *testing.T
	net   *mesh.SimNetwork
	nodes []*Node
}

func newSimMesh(t *testing.T, specs ...string) *simMesh {
	t.Helper()
	sm := &simMesh{t: t, net: mesh.NewSimNetwork(mesh.SimOptions{})}
	t.Cleanup(sm.close)
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
	cfg := Config{
		DataDir:          sm.t.TempDir(),
		Sim:              sm.net,
		Devices:          backends,
		CoordinatorAfter: time.Millisecond,
		Executor:         executor.Config{Isolation: executor.IsolationProcess, Grace: 2 * time.Second},
		Logger:           testLogger(),
	}
	if len(sm.nodes) > 0 {
		cfg.Mesh.Join = sm.nodes[0].Mesh().Addrs()
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
		n.Close()
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
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronization
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
		ID:          "job-h100",
		Cards:       2,
		Models:      []string{"h100-*"},
		MaxPriceCNY: 30,
		Command:     []string{"sh", "-c", "echo visible=$CUDA_VISIBLE_DEVICES cards=$GPUMESH_LOCAL_CARDS; sleep 1"},
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
