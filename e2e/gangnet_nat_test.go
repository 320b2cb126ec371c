//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/gangnet"
)

// rendezvousBinary builds node/gangnet/testdata/rendezvous (static), the
// gang's job: torchrun's rendezvous and NCCL's bootstrap over TCP.
func rendezvousBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUMESH_RENDEZVOUS_BINARY"); p != "" {
		return p
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("building the gang's job program needs go (or set GPUMESH_RENDEZVOUS_BINARY)")
	}
	out := filepath.Join(t.TempDir(), "rendezvous")
	cmd := exec.Command("go", "build", "-o", out, "../node/gangnet/testdata/rendezvous")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the rendezvous program: %v\n%s", err, b)
	}
	return out
}

// Two sandboxed suppliers, each behind a NAT of its own that lets nothing
// in, with the default policy (network at most egress), and a public
// node: a gang of two shares across them, on the default network, meets
// on its private network (the master at MASTER_ADDR:MASTER_PORT, then a
// ring on ports chosen at run time), the nodes carrying its connections
// over the mesh, relayed or hole-punched.
func TestGangPrivateNetworkAcrossNATs(t *testing.T) {
	lab := newNATLab(t)
	prog := rendezvousBinary(t)
	pubNS, pubAddr := lab.public()
	s1NS, s1Addr := lab.behindNAT(1)
	s2NS, s2Addr := lab.behindNAT(2)
	pub := lab.node(t, "pub", pubNS, pubAddr, "--reachability", "public")
	joinQUIC := fmt.Sprintf("/ip4/%s/udp/%d/quic-v1/p2p/%s", pubAddr, labPort, pub.peerID)
	var sup []*proc
	for i, lan := range []struct{ ns, addr string }{{s1NS, s1Addr}, {s2NS, s2Addr}} {
		// Entered with nsenter, not ip netns exec, which mounts a /sys of
		// the namespace's own, without the cgroups the sandbox needs.
		sup = append(sup, lab.nodeVia(t, fmt.Sprintf("s%d", i+1), []string{"nsenter", "--net=/var/run/netns/" + lan.ns}, lan.ns, lan.addr,
			"--sim", "h100-sxm-80g:1", "--join", pub.joinAddr(), "--join", joinQUIC, "--isolation", "sandbox"))
	}
	s1, s2 := sup[0], sup[1]
	waitAllSee(t, []*proc{pub, s1, s2}, 3, 2)
	// The suppliers reach each other only once the relay (and then hole
	// punching) connects them: a job's record is replicated among them,
	// and a submission before that is answered 503, try again.
	eventually(t, 40*time.Second, "s1 and s2 connected (relayed or direct)", func() bool {
		return connView(s1, s2) != "" && connView(s2, s1) != ""
	})

	ref := payloadOf(t, pub, map[string]string{"rendezvous": prog})
	rec := pub.submit(market.JobSpec{AllowSimulated: true, Cards: 2, Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 1},
		MaxPriceCNY: 50, Payload: &ref, Command: []string{"./rendezvous"}})
	done := pub.waitJob(rec.ID, 120*time.Second, market.JobSucceeded, market.JobFailed)
	if done.State != market.JobSucceeded {
		t.Fatalf("the gang %s: %s\n%s", done.State, done.Reason, describe(&done))
	}
	nodes := map[string]bool{}
	for _, p := range done.Placements {
		nodes[p.Node] = true
	}
	if !nodes[s1.peerID] || !nodes[s2.peerID] {
		t.Fatalf("the gang ran on %v, want s1 and s2", done.Placements)
	}
	master, _ := gangnet.Addr(rec.ID, 0)
	for share := range 2 {
		out, err := pub.text(fmt.Sprintf("/v1/jobs/%s/logs?share=%d", rec.ID, share))
		re := regexp.MustCompile(fmt.Sprintf(`^rank %d of 2: master %s:\d+, ring to %d at 10\.\d+\.0\.%d:\d+ ok\n$`,
			share, regexp.QuoteMeta(master.Addr().String()), 1-share, 2-share))
		if err != nil || !re.MatchString(out) {
			t.Errorf("share %d printed %q (%v), want %s", share, out, err, re)
		}
	}
	t.Logf("s1 sees s2 %s, s2 sees s1 %s", connView(s1, s2), connView(s2, s1))
}
