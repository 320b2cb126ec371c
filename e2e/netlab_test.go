//go:build unix

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// netLab puts nodes in network namespaces, each joined by a veth pair to
// one bridge in the test's namespace, so that the suite can cut, heal and
// degrade the network between them: partitions and packet loss are
// nftables rules on the input hook inside each node's namespace (traffic
// from the test itself, on the bridge's address, is never touched), delay
// is tc netem where the kernel has it. The test reaches each node's API on
// the node's address, with a token.
//
// It needs root, ip(8) and nft(8); newNetLab skips the test with the
// reason when they are missing.
type netLab struct {
	t         *testing.T
	tag       string // prefix of every name the lab creates
	bridge    string
	prefix    string // "10.A.B."
	host      string // the bridge's address
	token     string
	tokenFile string
	netem     bool
	ns        map[int]string // node index → namespace
}

var labCount atomic.Int32

// labPort and labAPIPort are every lab node's mesh and API ports (each
// node has an address of its own).
const (
	labPort    = 4747
	labAPIPort = 7474
)

// newNetLab makes the bridge, or skips the test saying why it cannot.
func newNetLab(t *testing.T) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network partitions need network namespaces, which need root: run the e2e suite as root to test them")
	}
	for _, tool := range []string{"ip", "nft", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("network partitions need %s(8), not found: %v", tool, err)
		}
	}
	n := labCount.Add(1)
	pid := os.Getpid()
	l := &netLab{
		t:      t,
		tag:    fmt.Sprintf("gm%d%c", pid%100000, 'a'+n%26),
		prefix: fmt.Sprintf("10.%d.%d.", 100+pid%100, (pid/100+int(n))%250),
		ns:     map[int]string{},
		token:  "chaos-lab-token",
	}
	l.bridge = l.tag + "br"
	l.host = l.prefix + "1"
	l.tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(l.tokenFile, []byte(l.token), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.teardown)
	if err := l.sh("ip link add %s type bridge", l.bridge); err != nil {
		t.Skipf("cannot make a bridge here (%v): partitions untested", err)
	}
	l.must("ip addr add %s/24 dev %s", l.host, l.bridge)
	l.must("ip link set %s up", l.bridge)
	l.netem = l.sh("tc qdisc add dev %s root netem delay 1ms", l.bridge) == nil
	if l.netem {
		l.must("tc qdisc del dev %s root", l.bridge)
	}
	return l
}

// sh runs one ip/nft/tc command line (words split on spaces).
func (l *netLab) sh(format string, args ...any) error {
	line := fmt.Sprintf(format, args...)
	f := strings.Fields(line)
	out, err := exec.Command(f[0], f[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", line, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *netLab) must(format string, args ...any) {
	l.t.Helper()
	if err := l.sh(format, args...); err != nil {
		l.t.Fatal(err)
	}
}

// nft runs an nft script inside namespace ns.
func (l *netLab) nft(ns, script string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *netLab) teardown() {
	for _, ns := range l.ns {
		_ = l.sh("ip netns del %s", ns) // takes its end of the veth, and the host end with it
	}
	_ = l.sh("ip link del %s", l.bridge)
}

func (l *netLab) addr(i int) string { return fmt.Sprintf("%s%d", l.prefix, 10+i) }

// startNode makes namespace i with its veth and filter tables, and starts
// a node inside it listening on the namespace's address.
func (l *netLab) startNode(t testing.TB, i int, name string, extra ...string) *proc {
	t.Helper()
	ns := fmt.Sprintf("%sn%d", l.tag, i)
	host, peer := fmt.Sprintf("%sh%d", l.tag, i), fmt.Sprintf("%sc%d", l.tag, i)
	l.must("ip netns add %s", ns)
	l.ns[i] = ns
	l.must("ip link add %s type veth peer name %s", host, peer)
	l.must("ip link set %s netns %s", peer, ns)
	l.must("ip link set %s master %s up", host, l.bridge)
	l.must("ip netns exec %s ip addr add %s/24 dev %s", ns, l.addr(i), peer)
	l.must("ip netns exec %s ip link set %s up", ns, peer)
	l.must("ip netns exec %s ip link set lo up", ns)
	if err := l.nft(ns, `table inet chaos {
	set cut { type ipv4_addr; }
	chain cut { type filter hook input priority 0; policy accept; ip saddr @cut drop; }
	chain loss { type filter hook input priority 1; policy accept; }
}`); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, dataDir: t.TempDir(), p2pPort: labPort, ip: l.addr(i), token: l.token,
		prefix: []string{"ip", "netns", "exec", ns}}
	p.apiAddr = fmt.Sprintf("%s:%d", l.addr(i), labAPIPort)
	p.args = append([]string{"node",
		"--data", p.dataDir,
		"--listen", fmt.Sprintf("/ip4/%s/tcp/%d", l.addr(i), labPort),
		"--api", p.apiAddr,
		"--api-token-file", l.tokenFile,
		"--mdns=false",
		"--no-nat",
		"--isolation", "process",
		"--log-level", "debug",
	}, extra...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

// partition cuts every node of side a off from every node of side b, both
// ways. Nodes in neither side keep talking to both.
func (l *netLab) partition(a, b []int) {
	l.t.Helper()
	cut := func(from, to []int) {
		var ips []string
		for _, j := range to {
			ips = append(ips, l.addr(j))
		}
		for _, i := range from {
			if err := l.nft(l.ns[i], fmt.Sprintf("add element inet chaos cut { %s }", strings.Join(ips, ", "))); err != nil {
				l.t.Fatal(err)
			}
		}
	}
	cut(a, b)
	cut(b, a)
}

// heal removes every cut.
func (l *netLab) heal() {
	l.t.Helper()
	for _, ns := range l.ns {
		if err := l.nft(ns, "flush set inet chaos cut"); err != nil {
			l.t.Fatal(err)
		}
	}
}

// loss drops pct percent of the packets each node receives from other
// nodes (0 removes the loss).
func (l *netLab) loss(pct int) {
	l.t.Helper()
	for _, ns := range l.ns {
		script := "flush chain inet chaos loss\n"
		if pct > 0 {
			script += fmt.Sprintf("add rule inet chaos loss ip saddr != %s numgen random mod 100 < %d drop\n", l.host, pct)
		}
		if err := l.nft(ns, script); err != nil {
			l.t.Fatal(err)
		}
	}
}

// errNoNetem says the kernel has no netem qdisc (sch_netem).
var errNoNetem = errors.New("tc netem is not available in this kernel (no sch_netem): delay not injected")

// delay adds d of delay, with jitter, to every packet node i sends; 0
// removes it.
func (l *netLab) delay(i int, d, jitter time.Duration) error {
	if !l.netem {
		return errNoNetem
	}
	dev := fmt.Sprintf("%sc%d", l.tag, i)
	_ = l.sh("ip netns exec %s tc qdisc del dev %s root", l.ns[i], dev)
	if d == 0 {
		return nil
	}
	return l.sh("ip netns exec %s tc qdisc add dev %s root netem delay %dms %dms", l.ns[i], dev, d.Milliseconds(), jitter.Milliseconds())
}
