//go:build unix

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Two owners with their own keys share a mesh through the gpumesh command:
// each reads and steers only their own jobs, through any node.
func TestOwnersAreKeptApartAcrossProcesses(t *testing.T) {
	a, b, c := threeNodes(t)
	dir := t.TempDir()
	alice, bob := filepath.Join(dir, "alice.key"), filepath.Join(dir, "bob.key")
	for _, k := range []string{alice, bob} {
		if out, err := runCLI(t, "key", "create", "--key", k); err != nil {
			t.Fatalf("key create: %v: %s", err, out)
		}
	}
	out, err := runCLI(t, "submit", "--api", b.apiAddr, "--key", alice, "--gpus", "1", "--model", "a100-*", "--max-price", "20", "--allow-simulated",
		"--", "sh", "-c", "echo alice-secret; sleep 60")
	if err != nil {
		t.Fatalf("alice's submit: %v: %s", err, out)
	}
	id := strings.TrimSpace(out)
	eventually(t, 20*time.Second, "alice's job runs", func() bool {
		out, err := runCLI(t, "job", id, "--api", a.apiAddr, "--key", alice, "--json")
		var rec market.JobRecord
		return err == nil && json.Unmarshal([]byte(out), &rec) == nil && rec.State == market.JobRunning
	})
	eventually(t, 10*time.Second, "alice reads her job's output through another node", func() bool {
		out, err := runCLI(t, "logs", id, "--api", a.apiAddr, "--key", alice)
		return err == nil && strings.Contains(out, "alice-secret")
	})
	for _, p := range []*proc{a, b, c} {
		for _, args := range [][]string{{"logs", id}, {"job", id}, {"cancel", id}, {"scale", id, "2"}} {
			out, err := runCLI(t, append(args, "--api", p.apiAddr, "--key", bob)...)
			if err == nil || !strings.Contains(out, "belongs to another owner") || strings.Contains(out, "alice-secret") {
				t.Errorf("bob's %v through %s: %v: %s", args, p.name, err, out)
			}
		}
		out, err := runCLI(t, "jobs", "--api", p.apiAddr, "--key", bob)
		if err != nil || strings.Contains(out, id) {
			t.Errorf("bob's job list through %s shows alice's job: %v: %s", p.name, err, out)
		}
	}
	if out, err := runCLI(t, "cancel", id, "--api", c.apiAddr, "--key", alice); err != nil {
		t.Fatalf("alice's cancel: %v: %s", err, out)
	}
	eventually(t, 15*time.Second, "alice's job is cancelled", func() bool {
		out, err := runCLI(t, "job", id, "--api", b.apiAddr, "--key", alice, "--json")
		var rec market.JobRecord
		return err == nil && json.Unmarshal([]byte(out), &rec) == nil && rec.State == market.JobCancelled
	})
}
