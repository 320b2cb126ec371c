package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/gangnet"
)

// rendezvousPayload is a payload directory holding gangnet's test
// program (node/gangnet/testdata/rendezvous) as ./rendezvous.
func rendezvousPayload(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "rendezvous"), "./gangnet/testdata/rendezvous")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the rendezvous program: %v\n%s", err, out)
	}
	return dir
}

// A gang of two shares on two sandboxed suppliers with the default
// network (none): its ranks meet on the job's private network, the
// worker at MASTER_ADDR:MASTER_PORT (rank 0's address) and both on ports
// chosen at run time, as torchrun's store and NCCL's sockets do.
func TestGangMeetsOnItsPrivateNetwork(t *testing.T) {
	requireSandbox(t)
	if ex, err := executor.New(executor.Config{Root: t.TempDir(), Isolation: executor.IsolationSandbox}); err == nil {
		c := ex.Capabilities()
		ex.Close()
		if !c.PrivateNet {
			t.Skipf("no private networks here: %s", c.PrivateNetReason)
		}
	}
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(func(_ int, c *Config) {
		c.Executor.Isolation = executor.IsolationSandbox
		c.Policy.MaxNetwork = market.NetworkEgress // a supplier's default
	}), "", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 2)
	st, err := upload(t, coord, alice, rendezvousPayload(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "gang-private", Cards: 2, Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 1},
		MaxPriceCNY: 50, Command: []string{"./rendezvous"}, Payload: &st.Ref}
	if _, err := apiClient(t, coord, alice).Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, spec.ID, 120*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded {
		t.Fatalf("the gang %s: %s", rec.State, rec.Reason)
	}
	nodes := map[string]bool{}
	for _, p := range rec.Placements {
		nodes[p.Node] = true
	}
	if len(nodes) != 2 {
		t.Fatalf("the gang ran on %d nodes, want 2: %+v", len(nodes), rec.Placements)
	}
	master, _ := gangnet.Addr(spec.ID, 0)
	for share := range 2 {
		var out bytes.Buffer
		if _, err := apiClient(t, coord, alice).Logs(ctx, api.LogRequest{Job: spec.ID, Share: share}, &out); err != nil {
			t.Fatal(err)
		}
		// The ranks are in share order.
		re := regexp.MustCompile(fmt.Sprintf(`^rank %d of 2: master %s:\d+, ring to %d at 10\.\d+\.0\.%d:\d+ ok\n$`,
			share, regexp.QuoteMeta(master.Addr().String()), 1-share, 2-share))
		if !re.MatchString(out.String()) {
			t.Errorf("share %d printed %q, want %s", share, out.String(), re)
		}
	}
}

// Suppliers that cannot give a gang a private network (here: process
// isolation) decline a gang across nodes on the default network, and the
// job's reason says why; on network host (which they allow) it runs.
func TestGangWithoutAPrivateNetworkSaysWhy(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		if i == 1 {
			c.Policy.MaxNetwork = market.NetworkEgress
		}
	}), "", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 2)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "gang-declined", Cards: 2, Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 1},
		MaxPriceCNY: 50, Command: []string{"true"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	const why = "policy: a gang across nodes needs network host here (no private network: jobs share the node's network under isolation process)"
	var last string
	t.Cleanup(func() { t.Logf("the last reason: %s", last) })
	eventually(t, 20*time.Second, "both suppliers decline, saying why", func() bool {
		rec, _ := coord.Job(ctx, spec.ID)
		last = rec.Reason
		return rec.State == market.JobPending && strings.Contains(rec.Reason, "2 of 2 suppliers asked declined") &&
			strings.Contains(rec.Reason, why+"; this supplier allows at most egress (1)") &&
			strings.Contains(rec.Reason, why+": submit it with --net host (1)")
	})
	spec.ID, spec.Network = "gang-host", market.NetworkHost
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec, _ := coord.Job(ctx, "gang-declined")
	t.Logf("reason: %s", rec.Reason)
	if _, err := coord.Cancel(ctx, "gang-declined"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the supplier that allows host bids for the gang on host; the other declines it for its network alone", func() bool {
		rec, _ := coord.Job(ctx, "gang-host")
		return rec.State == market.JobPending && strings.Contains(rec.Reason, "1 of 2 suppliers asked declined: policy: the job needs network host; this supplier allows at most egress (1)")
	})
}
