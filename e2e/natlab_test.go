//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// natLab is a small internet in network namespaces: an "inet" namespace
// holds a bridge, the wide area; a public node sits on it with an address
// of its own; each supplier sits on a LAN behind a router namespace that
// masquerades (nftables) and, like a home router, lets in only what
// answers a connection from inside. Nothing of it touches the test's own
// network namespace: the namespaces have no route out, and the test
// reaches each node's API on 127.0.0.1 inside the node's namespace
// (nsHTTPClient), so the lab's wide-area addresses can look public (libp2p
// only relays through, and hole-punches to, public addresses) without
// ever meeting the real internet.
//
// It needs root, ip(8) and nft(8); newNATLab skips the test with the
// reason when they are missing.
type natLab struct {
	t   *testing.T
	tag string
	ns  []string // every namespace made, for teardown
}

// The wide area's addresses: 44.250.<lab>.0/24 inside the lab only.
// Routers are .21, .22, ...; the public node is .10. LAN i is
// 10.201.i.0/24 with its router at .1 and its supplier at .2.
const natAPIPort = 7474

var natLabCount atomic.Int32

func newNATLab(t *testing.T) *natLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the NAT lab needs network namespaces, which need root: run the e2e suite as root to test NAT traversal")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the NAT lab needs %s(8), not found: %v", tool, err)
		}
	}
	n := natLabCount.Add(1)
	l := &natLab{t: t, tag: fmt.Sprintf("gn%d%c", os.Getpid()%100000, 'a'+n%26)}
	t.Cleanup(l.teardown)
	inet := l.netns("inet")
	l.must("ip -n %s link add wan type bridge", inet)
	l.must("ip -n %s link set wan up", inet)
	return l
}

func (l *natLab) wanAddr(host int) string {
	return fmt.Sprintf("44.250.%d.%d", natLabCount.Load()%250, host)
}

func (l *natLab) sh(format string, args ...any) error {
	line := fmt.Sprintf(format, args...)
	f := strings.Fields(line)
	out, err := exec.Command(f[0], f[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", line, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *natLab) must(format string, args ...any) {
	l.t.Helper()
	if err := l.sh(format, args...); err != nil {
		l.t.Fatal(err)
	}
}

// netns makes namespace name (prefixed with the lab's tag) with its
// loopback up.
func (l *natLab) netns(name string) string {
	l.t.Helper()
	ns := l.tag + name
	if err := l.sh("ip netns add %s", ns); err != nil {
		l.t.Skipf("cannot make a network namespace here (%v): NAT traversal untested", err)
	}
	l.ns = append(l.ns, ns)
	l.must("ip -n %s link set lo up", ns)
	return ns
}

// onWAN puts namespace ns on the wide area as interface "wan" with addr.
func (l *natLab) onWAN(ns, port, addr string) {
	l.t.Helper()
	inet := l.tag + "inet"
	l.must("ip -n %s link add %s type veth peer name wan netns %s", inet, port, ns)
	l.must("ip -n %s link set %s master wan up", inet, port)
	l.must("ip -n %s addr add %s/24 dev wan", ns, addr)
	l.must("ip -n %s link set wan up", ns)
}

func (l *natLab) nft(ns, script string) {
	l.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in %s: %v: %s", ns, err, out)
	}
}

// public makes the public host's namespace on the wide area and returns
// it and its address.
func (l *natLab) public() (ns, addr string) {
	ns = l.netns("pub")
	addr = l.wanAddr(10)
	l.onWAN(ns, "pub", addr)
	return ns, addr
}

// behindNAT makes LAN i: a router namespace on the wide area that
// masquerades the LAN and lets in only answers, and a host namespace on
// the LAN. Like a home router it answers nothing from the wide area
// itself: what is not an answer is dropped, not refused. It returns the
// host's namespace and address.
func (l *natLab) behindNAT(i int) (ns, addr string) {
	l.t.Helper()
	router := l.netns(fmt.Sprintf("r%d", i))
	l.onWAN(router, fmt.Sprintf("r%d", i), l.wanAddr(20+i))
	ns = l.netns(fmt.Sprintf("s%d", i))
	lan := fmt.Sprintf("10.201.%d.", i)
	addr = lan + "2"
	l.must("ip -n %s link add lan type veth peer name eth0 netns %s", router, ns)
	l.must("ip -n %s addr add %s1/24 dev lan", router, lan)
	l.must("ip -n %s link set lan up", router)
	l.must("ip -n %s addr add %s/24 dev eth0", ns, addr)
	l.must("ip -n %s link set eth0 up", ns)
	l.must("ip -n %s route add default via %s1", ns, lan)
	if out, err := exec.Command("ip", "netns", "exec", router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward").CombinedOutput(); err != nil {
		l.t.Fatalf("forwarding in %s: %v: %s", router, err, out)
	}
	l.nft(router, `table ip nat {
	chain post { type nat hook postrouting priority srcnat; policy accept; oifname "wan" masquerade; }
}
table inet fw {
	chain input { type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname { "lo", "lan" } accept
	}
	chain forward { type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan" oifname "wan" accept
	}
}`)
	return ns, addr
}

func (l *natLab) teardown() {
	for i := len(l.ns) - 1; i >= 0; i-- {
		_ = l.sh("ip netns del %s", l.ns[i])
	}
}

// node starts a gpumesh node in namespace ns listening on addr (TCP and
// QUIC), with NAT traversal on (the default), its API on 127.0.0.1 inside
// the namespace.
func (l *natLab) node(t *testing.T, name, ns, addr string, extra ...string) *proc {
	t.Helper()
	return l.nodeVia(t, name, []string{"ip", "netns", "exec", ns}, ns, addr, extra...)
}

// nodeVia is node, started under prefix (a command that enters ns).
func (l *natLab) nodeVia(t *testing.T, name string, prefix []string, ns, addr string, extra ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, dataDir: t.TempDir(), p2pPort: labPort, ip: addr,
		prefix: prefix, httpc: nsHTTPClient(ns)}
	p.apiAddr = fmt.Sprintf("127.0.0.1:%d", natAPIPort)
	p.args = append([]string{"node",
		"--data", p.dataDir,
		"--listen", fmt.Sprintf("/ip4/%s/tcp/%d", addr, labPort),
		"--listen", fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", addr, labPort),
		"--api", p.apiAddr,
		"--mdns=false",
		"--isolation", "process",
		"--checkpoint-interval", "300ms",
		"--log-level", "debug",
	}, extra...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

// nsHTTPClient is an HTTP client whose connections are made inside
// network namespace ns: each dial runs on an OS thread of its own that
// enters ns and is never reused (a goroutine that ends locked to its
// thread ends the thread), and a socket stays in the namespace it was
// made in.
func nsHTTPClient(ns string) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: nsDialer(ns), DisableKeepAlives: true}}
}

// nsDialer dials from inside network namespace ns (see nsHTTPClient).
func nsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			f, err := os.Open("/run/netns/" + ns)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("entering %s: %w", ns, err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// runCLIIn runs the gpumesh binary inside namespace ns and returns its
// standard output; a run that does not end within 60 s fails the test.
func runCLIIn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, binary}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("gpumesh %s in %s: %v: %s", strings.Join(args, " "), ns, ctx.Err(), stderr.String())
	}
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("gpumesh %s in %s: %v", strings.Join(args, " "), ns, err)
	}
	return string(out)
}
