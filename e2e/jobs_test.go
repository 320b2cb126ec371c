//go:build unix

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// fourNodes starts a mesh of four nodes with different simulated cards.
func fourNodes(t *testing.T) []*proc {
	t.Helper()
	a := startNode(t, "a", "--sim", "rtx4090-24g:2")
	// b and c run the gang job, whose ranks reach each other: their
	// policy allows host network (the default allows egress at most).
	b := startNode(t, "b", "--sim", "h100-sxm-80g:4", "--join", a.joinAddr(), "--job-network", "host")
	c := startNode(t, "c", "--sim", "h100-sxm-80g:4", "--join", a.joinAddr(), "--job-network", "host")
	// d supplies and never coordinates: a job that runs on it is billed
	// by another node, from the receipts d signs.
	d := startNode(t, "d", "--sim", "l40s-48g:2", "--join", a.joinAddr(), "--coordinator", "never")
	procs := []*proc{a, b, c, d}
	waitAllSee(t, procs, 4, 12)
	return procs
}

func TestJobLifecycleAcrossProcesses(t *testing.T) {
	procs := fourNodes(t)
	a, b, c, d := procs[0], procs[1], procs[2], procs[3]
	byID := map[string]*proc{}
	for _, p := range procs {
		byID[p.peerID] = p
	}

	// A 2-card L40S job submitted to a lands on d; its logs are read
	// through c; its bill grows while it runs; its exit code comes back.
	rec := a.submit(market.JobSpec{
		AllowSimulated: true,
		Cards:          2, Models: []string{"l40s-*"}, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", "echo visible=$CUDA_VISIBLE_DEVICES; sleep 2; exit 3"},
	})
	running := c.waitJob(rec.ID, 20*time.Second, market.JobRunning)
	if n := running.Placements[0].Node; n != d.peerID {
		t.Fatalf("the L40S job runs on %s, not d (%s)", short(n), short(d.peerID))
	}
	var cost1 float64
	eventually(t, 10*time.Second, "a bill accrues", func() bool {
		r, err := b.job(rec.ID)
		cost1 = r.CostCNY
		return err == nil && r.CostCNY > 0
	})
	ended := b.waitJob(rec.ID, 30*time.Second, market.JobFailed, market.JobSucceeded)
	if ended.ExitCode == nil || *ended.ExitCode != 3 || ended.State != market.JobFailed {
		t.Fatalf("job ended %s with exit code %v, want failed with 3", ended.State, ended.ExitCode)
	}
	if ended.CostCNY <= cost1 {
		t.Errorf("bill did not grow with run time: %.5f then %.5f CNY", cost1, ended.CostCNY)
	}
	logs, err := c.text("/v1/jobs/" + rec.ID + "/logs")
	if err != nil || !strings.HasPrefix(logs, "visible=GPU-") || strings.Count(logs, "GPU-") != 2 {
		t.Fatalf("logs through c: %q, %v", logs, err)
	}
	// Its bill, asked of a node that neither coordinated nor ran it,
	// verifies from the signed receipts alone, and they add up to the
	// card-seconds the record bills.
	key := filepath.Join(t.TempDir(), "owner.key")
	text, err := testOwner().MarshalText()
	if err != nil || os.WriteFile(key, text, 0o600) != nil {
		t.Fatalf("owner key: %v", err)
	}
	asker := a
	for _, p := range procs {
		if p.peerID != ended.Coordinator && p.peerID != d.peerID {
			asker = p
		}
	}
	if ended.Coordinator == d.peerID {
		t.Fatalf("the job was coordinated by its runner d, which never coordinates")
	}
	code, out, errOut := runCLIStatus(t, "bill", rec.ID, "--verify", "--api", asker.apiAddr, "--key", key)
	sum := fmt.Sprintf(": the bill is the sum of its receipts (%.2f CNY, %.1f card-seconds)", ended.CostCNY, ended.CardSeconds)
	if code != 0 || !strings.Contains(out, "\nVERIFIED ") || !strings.Contains(out, sum) {
		t.Fatalf("gpumesh bill --verify through %s: exit %d, want %q\n%s%s", asker.name, code, sum, out, errOut)
	}

	// An 8-card gang job with 4 per node spans b and c.
	gang := d.submit(market.JobSpec{
		AllowSimulated: true,
		Cards:          8, Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 4}, MaxPriceCNY: 30,
		Network: market.NetworkHost, // process-mode nodes give no private network: the gang meets on theirs
		Command: []string{"sh", "-c", "echo rank=$NODE_RANK nnodes=$NNODES master=$MASTER_ADDR world=$WORLD_SIZE local=$GPUMESH_LOCAL_CARDS"},
	})
	done := a.waitJob(gang.ID, 30*time.Second, market.JobSucceeded, market.JobFailed)
	if done.State != market.JobSucceeded {
		t.Fatalf("gang job %s: %s", done.State, done.Reason)
	}
	nodes := map[string]bool{}
	var lines []string
	for share := range 2 {
		out, err := a.text(fmt.Sprintf("/v1/jobs/%s/logs?share=%d", gang.ID, share))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(out))
	}
	for _, p := range done.Placements {
		if p.State == market.PlacementExited {
			nodes[p.Node] = true
		}
	}
	if !nodes[b.peerID] || !nodes[c.peerID] || len(nodes) != 2 {
		t.Errorf("gang ran on %v, want b and c", nodes)
	}
	want0 := "rank=0 nnodes=2 master=127.0.0.1 world=8 local=4"
	want1 := "rank=1 nnodes=2 master=127.0.0.1 world=8 local=4"
	if !(lines[0] == want0 && lines[1] == want1 || lines[0] == want1 && lines[1] == want0) {
		t.Errorf("gang shares printed %q", lines)
	}
}

func TestCancelStopsAllSharesWithinGrace(t *testing.T) {
	procs := fourNodes(t)
	a, b := procs[0], procs[1]
	rec := a.submit(market.JobSpec{AllowSimulated: true, Cards: 8, Models: []string{"h100-*"}, MaxPriceCNY: 30, Command: []string{"sleep", "600"}})
	a.waitJob(rec.ID, 20*time.Second, market.JobRunning)
	start := time.Now()
	resp, err := b.do(http.MethodDelete, "/v1/jobs/"+rec.ID)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	a.waitJob(rec.ID, 15*time.Second, market.JobCancelled)
	eventually(t, 15*time.Second, "every share's process gone", func() bool {
		for _, p := range procs {
			var cards struct {
				Cards []struct{ State string } `json:"cards"`
			}
			if err := p.get("/v1/cards", &cards); err != nil {
				return false
			}
			for _, c := range cards.Cards {
				if c.State != "free" {
					return false
				}
			}
		}
		return true
	})
	if took := time.Since(start); took > 12*time.Second {
		t.Errorf("cancel took %v, more than the 10 s grace", took)
	}
}

func TestCoordinatorRestartLosesNothing(t *testing.T) {
	procs := fourNodes(t)
	a := procs[0]
	rec := a.submit(market.JobSpec{AllowSimulated: true, Cards: 1, Models: []string{"rtx4090-*"}, MaxPriceCNY: 5, Command: []string{"sleep", "600"}})
	running := a.waitJob(rec.ID, 20*time.Second, market.JobRunning)
	var coord *proc
	for _, p := range procs {
		if p.peerID == running.Coordinator {
			coord = p
		}
	}
	if coord == nil {
		t.Fatalf("coordinator %s is not one of the nodes", running.Coordinator)
	}
	var before market.JobRecord
	eventually(t, 10*time.Second, "the bill grows", func() bool {
		before, _ = coord.job(rec.ID)
		return before.CostCNY > 0
	})
	coord.kill()
	coord.start()
	after, err := coord.job(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != rec.ID || after.CostCNY < before.CostCNY || after.Epoch < before.Epoch || after.State.Terminal() {
		t.Fatalf("after restart: %s epoch %d cost %.5f; before: %s epoch %d cost %.5f",
			after.State, after.Epoch, after.CostCNY, before.State, before.Epoch, before.CostCNY)
	}
	coord.waitJob(rec.ID, 30*time.Second, market.JobRunning)
}
