//go:build linux

package transfer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multiaddr"
)

// TestFetchAcrossALossyLinkThatIsCut fetches from a holder in a network
// namespace of its own (this test binary run again inside it, see
// holder_process_test.go), joined to the test's namespace by a veth pair.
// Every packet between the two is lost with a chance of 5%, each way
// (nftables in the holder's namespace, the way the e2e suite's netLab
// makes loss: this kernel need not have tc netem). The fetch asks for one
// batch of two chunks at a time; as the holder takes its fourth request
// (the manifest, then two batches arrived), the link is cut both ways: the
// fetch stalls, drops the holder after its Timeout and ends incomplete,
// keeping what it stored. The link heals (the loss stays); a second fetch
// brings only the rest, and the tree restores byte for byte.
//
// It needs root, ip(8) and nft(8), and skips saying so without them.
func TestFetchAcrossALossyLinkThatIsCut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a link cut and packet loss need network namespaces, which need root: run this test as root to test them")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("a link cut and packet loss need %s(8), not found: %v", tool, err)
		}
	}
	link := newLossyLink(t)
	src := tree(t, 80, 6*mib, 5*mib, 1000)
	holder := startHolder(t, link, src, func(n int) {
		if n == 4 {
			link.cut()
		}
	})

	h := tcpHostOn(t, "/ip4/"+link.near+"/tcp/0")
	st, err := blob.Open(blob.Config{Dir: filepath.Join(t.TempDir(), "blobs"), Limit: blob.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// A step of a fetch may wait out TCP's retransmissions of a packet
	// lost several times in a row; 10 s is some 5 losses of one packet.
	svc, err := New(h, Config{Protocol: testProto, Store: st, Auth: &testAuth{}, Timeout: 10 * time.Second, HolderStreams: 1, Pipeline: 1, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	a := &testNode{h: h, store: st, svc: svc}
	if err := h.Connect(testCtx(t), holder.info); err != nil {
		t.Fatal(err)
	}

	id := lease(t, a, "fetch")
	first, err := svc.Fetch(testCtx(t), holder.manifest, []peer.ID{holder.info.ID}, id)
	var ie *IncompleteError
	if !errors.As(err, &ie) || !errors.Is(ie.Holders[holder.info.ID], os.ErrDeadlineExceeded) {
		t.Fatalf("Fetch over a link cut midway = %v, want an *IncompleteError naming the holder's stall", err)
	}
	if first.Fetched != 4 || ie.Chunks != first.Chunks-4 {
		t.Fatalf("before the cut: %+v (%d left); want the 4 chunks of 2 requests in", first, ie.Chunks)
	}
	link.heal()
	second, err := svc.Fetch(testCtx(t), holder.manifest, []peer.ID{holder.info.ID}, id)
	if err != nil {
		t.Fatal(err)
	}
	if second.Present != 4 || second.Fetched != first.Chunks-4 {
		t.Fatalf("after the link healed: %+v; want the 4 chunks kept and the rest fetched", second)
	}
	sameFiles(t, a, holder.manifest, src)
	lost := link.lost()
	if lost == 0 {
		t.Fatal("the link lost no packet: the loss was not applied")
	}
	t.Logf("%d chunks: %d before the cut, %d after, across 5%% loss each way (%d packets lost)", first.Chunks, first.Fetched, second.Fetched, lost)
}

// lossyLink is a veth pair from the test's namespace (near) to a
// namespace of its own (far), losing 5% of the packets each way, which a
// test can cut and heal.
type lossyLink struct {
	t         *testing.T
	ns        string
	near, far string // addresses
}

func newLossyLink(t *testing.T) *lossyLink {
	pid := os.Getpid()
	l := &lossyLink{
		t:    t,
		ns:   fmt.Sprintf("gmx%dn", pid%100000),
		near: fmt.Sprintf("10.%d.%d.1", 200+pid%50, (pid/50)%250),
		far:  fmt.Sprintf("10.%d.%d.2", 200+pid%50, (pid/50)%250),
	}
	nearDev, farDev := fmt.Sprintf("gmx%da", pid%100000), fmt.Sprintf("gmx%db", pid%100000)
	if err := l.sh("ip netns add %s", l.ns); err != nil {
		t.Skipf("cannot make a network namespace here (%v): a cut link is untested", err)
	}
	t.Cleanup(func() { _ = l.sh("ip netns del %s", l.ns) }) // takes the veth pair with it
	for _, line := range []string{
		"ip link add %[2]s type veth peer name %[3]s",
		"ip link set %[3]s netns %[1]s",
		"ip addr add %[4]s/30 dev %[2]s",
		"ip link set %[2]s up",
		"ip netns exec %[1]s ip addr add %[5]s/30 dev %[3]s",
		"ip netns exec %[1]s ip link set %[3]s up",
		"ip netns exec %[1]s ip link set lo up",
	} {
		if err := l.sh(line, l.ns, nearDev, farDev, l.near, l.far); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.nft(fmt.Sprintf(`table inet gmtest {
	set cut { type ipv4_addr; }
	counter lost { }
	chain in { type filter hook input priority 0; policy accept; ip saddr @cut drop; ip saddr %[1]s numgen random mod 100 < 5 counter name lost drop; }
	chain out { type filter hook output priority 0; policy accept; ip daddr @cut drop; ip daddr %[1]s numgen random mod 100 < 5 counter name lost drop; }
}`, l.near)); err != nil {
		t.Skipf("cannot filter packets in a namespace here (%v): a cut link is untested", err)
	}
	return l
}

// sh runs one command line (words split on spaces).
func (l *lossyLink) sh(format string, args ...any) error {
	line := fmt.Sprintf(format, args...)
	f := strings.Fields(line)
	if out, err := exec.Command(f[0], f[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", line, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nft runs an nft script in the far namespace.
func (l *lossyLink) nft(script string) error {
	cmd := exec.Command("ip", "netns", "exec", l.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", l.ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// lost returns how many packets the loss dropped so far.
func (l *lossyLink) lost() int {
	out, err := exec.Command("ip", "netns", "exec", l.ns, "nft", "list", "counter", "inet", "gmtest", "lost").CombinedOutput()
	if err != nil {
		l.t.Fatalf("reading the loss counter: %v: %s", err, out)
	}
	_, rest, _ := strings.Cut(string(out), "packets ")
	var n int
	if _, err := fmt.Sscanf(rest, "%d", &n); err != nil {
		l.t.Fatalf("reading the loss counter from %q: %v", out, err)
	}
	return n
}

// cut drops every packet between the two ends.
func (l *lossyLink) cut() {
	if err := l.nft(fmt.Sprintf("add element inet gmtest cut { %s }", l.near)); err != nil {
		l.t.Error(err)
	}
}

// heal undoes cut; the loss stays.
func (l *lossyLink) heal() {
	if err := l.nft("flush set inet gmtest cut"); err != nil {
		l.t.Error(err)
	}
}

// holderProc is a holder process at the far end of a link.
type holderProc struct {
	info     peer.AddrInfo
	manifest blob.Digest
}

// startHolder starts a holder process serving tree in l's far namespace;
// onRead runs at its Nth request to read, before it answers it.
func startHolder(t *testing.T, l *lossyLink, tree string, onRead func(n int)) *holderProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", l.ns, exe)
	cmd.Env = append(os.Environ(),
		holderEnv+"=/ip4/"+l.far+"/tcp/0",
		holderTreeEnv+"="+tree,
		holderStoreEnv+"="+t.TempDir(),
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	hp := &holderProc{}
	answered := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close() // the holder ends
		<-answered
		if err := cmd.Wait(); err != nil {
			t.Errorf("holder process: %v: %s", err, stderr.String())
		}
	})
	if !lines.Scan() {
		stdin.Close()
		close(answered)
		t.Fatalf("holder process said nothing: %v: %s", lines.Err(), stderr.String())
	}
	var id, addr, man string
	if _, err := fmt.Sscanf(lines.Text(), "ready %s %s %s", &id, &addr, &man); err != nil {
		stdin.Close()
		close(answered)
		t.Fatalf("holder process said %q: %v", lines.Text(), err)
	}
	if hp.info.ID, err = peer.Decode(id); err == nil {
		var ma multiaddr.Multiaddr
		if ma, err = multiaddr.NewMultiaddr(addr); err == nil {
			hp.info.Addrs = []multiaddr.Multiaddr{ma}
			hp.manifest, err = blob.ParseDigest(man)
		}
	}
	if err != nil {
		stdin.Close()
		close(answered)
		t.Fatalf("holder process said %q: %v", lines.Text(), err)
	}
	// Answer each read, after onRead, until the holder ends.
	go func() {
		defer close(answered)
		for lines.Scan() {
			var n int
			if _, err := fmt.Sscanf(lines.Text(), "read %d", &n); err != nil {
				t.Errorf("holder process said %q", lines.Text())
				continue
			}
			onRead(n)
			if _, err := io.WriteString(stdin, "ok\n"); err != nil {
				return
			}
		}
	}()
	return hp
}
