package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/executor"
)

// outputsScript writes outputs/ in the job's working directory: a small
// file, a 2.7 MB one in a subdirectory and a link; then it prints "ready"
// and runs the rest.
const outputsScript = `mkdir -p outputs/sub && printf hello > outputs/a.txt && seq 1 400000 > outputs/sub/big.txt && ln -s a.txt outputs/link && echo ready; `

// seqText is what seq 1 n prints.
func seqText(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintln(&b, i)
	}
	return b.String()
}

// checkOutputs checks a copy of outputs/ at dir.
func checkOutputs(t *testing.T, dir string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "hello" {
		t.Errorf("a.txt: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "big.txt")); err != nil || string(b) != seqText(400000) {
		t.Errorf("sub/big.txt: %d bytes, %v", len(b), err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "link")); err != nil || l != "a.txt" {
		t.Errorf("link: %q %v", l, err)
	}
}

// threeRoles is a mesh of three nodes with the API on, each in one part:
// a coordinator, a runner of one card that never coordinates, and a node
// that only takes requests (entry), its book already holding the card.
func threeRoles(t *testing.T) (sm *simMesh, coord, runner, entry *Node) {
	t.Helper()
	sm = newSimMeshWith(t, withAPI(nil), "", "a100-80g:1", "")
	coord, runner, entry = sm.nodes[0], sm.nodes[1], sm.nodes[2]
	sm.neverCoordinate(runner, entry)
	sm.waitBook(entry, 1)
	return sm, coord, runner, entry
}

// gpumesh cp through a node that neither runs nor coordinates the job:
// from a running share's working directory as it is, and from what an
// ended share left there, which its runner keeps and the record names.
func TestCopyOutOfARunningAndAnEndedJob(t *testing.T) {
	alice, bob := testOwner(1), testOwner(2)
	_, coord, runner, entry := threeRoles(t)
	c := apiClient(t, entry, alice)
	ctx := context.Background()

	if _, err := c.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "live", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", outputsScript + "sleep 300"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the running job wrote its outputs", func() bool {
		var out strings.Builder // the attempt may not have started yet: 404
		_, err := c.Logs(ctx, api.LogRequest{Job: "live"}, &out)
		return err == nil && strings.Contains(out.String(), "ready")
	})
	dst := t.TempDir()
	where, st, err := c.CopyOut(ctx, "live", 0, "/outputs", dst)
	if err != nil {
		t.Fatal(err)
	}
	if where != filepath.Join(dst, "outputs") || !st.Dir || st.Files != 2 || st.Symlinks != 1 || st.Dirs != 1 {
		t.Errorf("copied to %s: %+v", where, st)
	}
	checkOutputs(t, where)
	// One file, into a directory that exists.
	if where, _, err := c.CopyOut(ctx, "live", 0, "outputs/a.txt", dst); err != nil || where != filepath.Join(dst, "a.txt") {
		t.Errorf("a file into %s: %s %v", dst, where, err)
	}
	// Bad requests change nothing.
	for _, bad := range []struct {
		who    *client.Client
		path   string
		status int
		want   string
	}{
		{c, "outputs/nope", http.StatusNotFound, `job live share 0: no "outputs/nope" in its working directory`},
		{c, "../../etc", http.StatusBadRequest, `path "../../etc" leaves the job's working directory`},
		{c, "outputs/link", http.StatusBadRequest, `is a symbolic link (to "a.txt")`},
		{apiClient(t, entry, bob), "outputs", http.StatusForbidden, "job live belongs to another owner"},
	} {
		empty := t.TempDir()
		_, _, err := bad.who.CopyOut(ctx, "live", 0, bad.path, empty)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != bad.status || !strings.Contains(ae.Message, bad.want) {
			t.Errorf("cp live:%s: %v; want %d saying %q", bad.path, err, bad.status, bad.want)
		}
		if left, _ := os.ReadDir(empty); len(left) != 0 {
			t.Errorf("cp live:%s left %d entries behind", bad.path, len(left))
		}
	}
	if _, err := c.Cancel(ctx, "live"); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "ended", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", outputsScript + "rm outputs/a.txt; printf bye > outputs/a.txt"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "ended", 60*time.Second, market.JobSucceeded, market.JobFailed)
	p, _ := latestPlacement(rec, 0)
	if rec.State != market.JobSucceeded || p.Outputs == "" || p.Node != runner.ID().String() {
		t.Fatalf("job %s, placement on %s with outputs %q", rec.State, p.Node, p.Outputs)
	}
	m, _ := blob.ParseDigest(p.Outputs)
	l, err := runner.blobs.Lease(outputsLease("ended", 0, p.Epoch))
	if err != nil || len(l.Manifests) != 1 || l.Manifests[0] != m || l.Expires.Sub(p.EndedAt) < 23*time.Hour {
		t.Errorf("the runner keeps %+v (%v), want %s for --keep-outputs", l, err, m.Short())
	}
	out := filepath.Join(t.TempDir(), "out")
	where, _, err = c.CopyOut(ctx, "ended", 0, "outputs", out)
	if err != nil || where != out {
		t.Fatalf("copy of an ended job's outputs to %s: %s %v", out, where, err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "a.txt")); string(b) != "bye" {
		t.Errorf("a.txt of the ended job: %q", b)
	}
	if b, err := os.ReadFile(filepath.Join(out, "sub", "big.txt")); err != nil || string(b) != seqText(400000) {
		t.Errorf("sub/big.txt: %d bytes, %v", len(b), err)
	}
	// A directory is not copied over one that exists.
	if _, _, err := c.CopyOut(ctx, "ended", 0, "outputs/sub", out); err == nil || !strings.Contains(err.Error(), "exists: remove it or name another destination") {
		t.Errorf("a copy over a directory that exists: %v", err)
	}
}

// An ended share's outputs are kept whatever the isolation, and its
// working directory then leaves the runner's disk; its output (logs)
// stays there for gpumesh logs. In sandbox mode the executor used to
// remove the working directory before the runner kept the outputs: cp of
// an ended job found nothing.
func TestAnEndedShareLeavesItsOutputsAndNotItsWorkingDirectory(t *testing.T) {
	for _, iso := range []executor.Isolation{executor.IsolationProcess, executor.IsolationSandbox} {
		t.Run(string(iso), func(t *testing.T) {
			if iso == executor.IsolationSandbox {
				requireSandbox(t)
			}
			alice := testOwner(1)
			sm := newSimMeshWith(t, withAPI(func(_ int, c *Config) { c.Executor.Isolation = iso }), "", "a100-80g:1")
			coord, runner := sm.nodes[0], sm.nodes[1]
			sm.neverCoordinate(runner)
			sm.waitBook(coord, 1)
			c := apiClient(t, coord, alice)
			ctx := context.Background()
			if _, err := c.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "ended", Cards: 1, MaxPriceCNY: 20,
				Command: []string{"sh", "-c", outputsScript + "echo done"}}); err != nil {
				t.Fatal(err)
			}
			rec := waitState(t, coord, "ended", 60*time.Second, market.JobSucceeded, market.JobFailed)
			p, _ := latestPlacement(rec, 0)
			if rec.State != market.JobSucceeded || p.Outputs == "" {
				t.Fatalf("job %s, outputs %q", rec.State, p.Outputs)
			}
			out := filepath.Join(t.TempDir(), "out")
			if _, _, err := c.CopyOut(ctx, "ended", 0, "outputs", out); err != nil {
				t.Fatalf("copy of the ended job's outputs: %v", err)
			}
			checkOutputs(t, out)
			dir := filepath.Join(runner.exec.Root(), attemptName("ended", 0, p.Epoch))
			for _, d := range []string{"work", "tmp"} {
				if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the runner still holds the attempt's %s directory: %v", d, err)
				}
			}
			var logs strings.Builder
			if _, err := c.Logs(ctx, api.LogRequest{Job: "ended"}, &logs); err != nil || logs.String() != "ready\ndone\n" {
				t.Errorf("logs of the ended job: %q %v", logs.String(), err)
			}
		})
	}
}

// A share that leaves its working directory empty keeps nothing and
// takes no lease: its outputs are the empty tree, which every node
// answers for. A copy of it gives an empty directory, through a node
// that does not run it and from the runner itself, and a path in it is
// not found.
func TestAnEmptyWorkingDirectoryIsKeptWithoutALease(t *testing.T) {
	alice := testOwner(1)
	_, coord, runner, entry := threeRoles(t)
	c := apiClient(t, entry, alice)
	ctx := context.Background()
	if _, err := c.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "empty", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "empty", 60*time.Second, market.JobSucceeded, market.JobFailed)
	p, _ := latestPlacement(rec, 0)
	if rec.State != market.JobSucceeded || p.Outputs != blob.EmptyTree().String() {
		t.Fatalf("job %s, outputs %q; want the empty tree %s", rec.State, p.Outputs, blob.EmptyTree())
	}
	if l, err := runner.blobs.Lease(outputsLease("empty", 0, p.Epoch)); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("the runner leased %+v (%v) for an empty working directory", l, err)
	}
	out := filepath.Join(t.TempDir(), "out")
	where, st, err := c.CopyOut(ctx, "empty", 0, ".", out)
	if err != nil || where != out || !st.Dir || st.Files+st.Dirs+st.Symlinks != 0 {
		t.Fatalf("copy of the empty working directory to %s: %s %+v %v", out, where, st, err)
	}
	if left, err := os.ReadDir(out); err != nil || len(left) != 0 {
		t.Errorf("the copy holds %d entries (%v), want an empty directory", len(left), err)
	}
	var ae *client.APIError
	if _, _, err := c.CopyOut(ctx, "empty", 0, "outputs", t.TempDir()); !errors.As(err, &ae) || ae.Status != http.StatusNotFound ||
		!strings.Contains(ae.Message, `job empty share 0: no "outputs" in its working directory`) {
		t.Errorf("cp empty:outputs: %v; want 404 naming the path", err)
	}
	// The runner answers for it too (a copy asked while the record still
	// shows the share running), from what its market remembers.
	if err := runner.blobs.SetLease(blob.Lease{ID: "test/files"}); err != nil {
		t.Fatal(err)
	}
	m, typ, err := runner.filesOf(ctx, filesRequest{Job: "empty", Share: 0, Epoch: p.Epoch, Path: "."}, "test/files")
	if err != nil || m != blob.EmptyTree() || typ != blob.TypeDir {
		t.Errorf("the runner's files of the ended attempt: %s %s %v; want the empty tree", m.Short(), typ, err)
	}
}
