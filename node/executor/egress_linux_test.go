package executor

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// greeter serves "hello" to every connection on ln until ln is closed.
func greeter(t *testing.T, ln net.Listener) int {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

func hostListener(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return greeter(t, ln)
}

// probeScript tries a TCP connection to each "ip:port" and prints OPEN
// when it got the greeting, CLOSED otherwise.
func probeScript(targets ...string) string {
	var b strings.Builder
	for _, tg := range targets {
		ip, port, _ := strings.Cut(tg, ":")
		fmt.Fprintf(&b, `if timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%s; head -c 5 <&3' 2>/dev/null | grep -q hello; then echo "OPEN %s"; else echo "CLOSED %s"; fi
`, ip, port, tg, tg)
	}
	return b.String()
}

// hostAddr is one of the node's own non-loopback IPv4 addresses.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("the node has no non-loopback IPv4 address to probe")
	return ""
}

func expectProbes(t *testing.T, out string, want map[string]string) {
	t.Helper()
	for target, state := range want {
		if !strings.Contains(out, state+" "+target+"\n") {
			t.Errorf("%s should be %s; the job saw:\n%s", target, state, out)
		}
	}
}

func TestSandboxNetworkNoneReachesNothing(t *testing.T) {
	ex := sandboxed(t, nil)
	loop := hostListener(t, "127.0.0.1:0")
	api := hostListener(t, "0.0.0.0:0")
	host := hostAddr(t)
	targets := map[string]string{
		"127.0.0.1:" + strconv.Itoa(loop): "CLOSED",
		host + ":" + strconv.Itoa(api):    "CLOSED",
		"10.0.0.1:80":                     "CLOSED",
		"169.254.169.254:80":              "CLOSED",
	}
	var list []string
	for tg := range targets {
		list = append(list, tg)
	}
	_, out, _ := runScript(t, ex, Attempt{JobID: "offline"}, probeScript(list...)+
		`echo "interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"`)
	expectProbes(t, out, targets)
	if !strings.Contains(out, "interfaces: lo \n") {
		t.Errorf("network none has other interfaces than lo:\n%s", out)
	}
	// Control: the same probe from a job on the node's network gets through.
	_, out, _ = runScript(t, ex, Attempt{JobID: "online", Limits: Limits{Network: NetworkHost}},
		probeScript("127.0.0.1:"+strconv.Itoa(loop), host+":"+strconv.Itoa(api)))
	expectProbes(t, out, map[string]string{"127.0.0.1:" + strconv.Itoa(loop): "OPEN", host + ":" + strconv.Itoa(api): "OPEN"})
}

// fakeInternet is a network namespace routed from the node that answers at
// a public address (198.51.100.10, TEST-NET-2), at 10.0.0.1 and at
// 169.254.169.254, so that only the sandbox's rules can keep a job from
// the last two.
type fakeInternet struct {
	public            string
	port, blockedPort int
}

func newFakeInternet(t *testing.T) *fakeInternet {
	t.Helper()
	ipTool, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("egress tests need the ip tool (apt-get install iproute2)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("egress tests need the nft tool (apt-get install nftables)")
	}
	for _, dst := range []string{"10.0.0.1", "169.254.169.254", "198.51.100.10"} {
		if out, _ := exec.Command(ipTool, "-4", "route", "show", dst+"/32").Output(); len(strings.TrimSpace(string(out))) > 0 {
			t.Skipf("the node already has a route to %s: %s", dst, out)
		}
	}
	ns := fmt.Sprintf("gpumesh-test-inet-%d", os.Getpid())
	veth := fmt.Sprintf("gmti%d", os.Getpid()%100000)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipTool, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() {
		exec.Command(ipTool, "link", "del", veth).Run() // takes its routes along
		exec.Command(ipTool, "netns", "del", ns).Run()
	})
	run("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run("addr", "add", "198.51.100.1/24", "dev", veth)
	run("link", "set", veth, "up")
	for _, a := range []string{"198.51.100.10/24", "10.0.0.1/32", "169.254.169.254/32"} {
		run("-n", ns, "addr", "add", a, "dev", "eth0")
	}
	run("-n", ns, "link", "set", "eth0", "up")
	run("-n", ns, "link", "set", "lo", "up")
	run("-n", ns, "route", "add", "default", "via", "198.51.100.1")
	run("route", "add", "10.0.0.1/32", "via", "198.51.100.10")
	run("route", "add", "169.254.169.254/32", "via", "198.51.100.10")
	return &fakeInternet{public: "198.51.100.10", port: greeter(t, listenIn(t, ns)), blockedPort: greeter(t, listenIn(t, ns))}
}

// listenIn listens on all addresses of the named network namespace.
func listenIn(t *testing.T, ns string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies in the other namespace
		fd, err := unix.Open(filepath.Join(netnsDir, ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			res <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			res <- result{err: err}
			return
		}
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		res <- result{ln, err}
	}()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}

func TestSandboxNetworkEgressReachesOnlyThePublicInternet(t *testing.T) {
	requireSandbox(t)
	inet := newFakeInternet(t)
	api := hostListener(t, "0.0.0.0:0")   // the node's API port: listed in BlockPorts
	other := hostListener(t, "0.0.0.0:0") // some other service of the node: not listed
	host := hostAddr(t)
	ex := sandboxed(t, func(c *Config) {
		c.BlockPorts = []int{api, inet.blockedPort}
		c.Nameservers = []netip.Addr{netip.MustParseAddr("198.51.100.53")}
	})
	if !ex.Capabilities().Provides(NetworkEgress) {
		t.Fatalf("capabilities %+v lack egress although ip and nft are here", ex.Capabilities())
	}
	port := strconv.Itoa(inet.port)
	a := Attempt{JobID: "egress", Limits: Limits{Network: NetworkEgress}}
	gateway, _, err := ex.iso.(*sandbox).net.link(ex.cfg.UIDMin) // the node's end of the first link
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		inet.public + ":" + port:                           "OPEN",
		"10.0.0.1:" + port:                                 "CLOSED",
		"169.254.169.254:" + port:                          "CLOSED",
		inet.public + ":" + strconv.Itoa(inet.blockedPort): "CLOSED", // a blocked port, even on a public address
		host + ":" + strconv.Itoa(api):                     "CLOSED",
		host + ":" + strconv.Itoa(other):                   "CLOSED",
		gateway.String() + ":" + strconv.Itoa(other):       "CLOSED",
		"127.0.0.1:" + strconv.Itoa(other):                 "CLOSED",
	}
	var list []string
	for tg := range want {
		list = append(list, tg)
	}
	r, err := ex.Start(Attempt{JobID: a.JobID, Limits: a.Limits, Command: []string{"bash", "-c",
		probeScript(list...) + "grep nameserver /etc/resolv.conf"}})
	if err != nil {
		t.Fatal(err)
	}
	uid := uint32(r.UID())
	waitDone(t, r, 60*time.Second)
	out := readAll(t, ex, a.Name(), Stdout)
	expectProbes(t, out, want)
	if !strings.Contains(out, "nameserver 198.51.100.53\n") {
		t.Errorf("the job's resolv.conf lacks the configured nameserver:\n%s", out)
	}
	// Nothing of the attempt's network is left on the node.
	n := ex.iso.(*sandbox).net
	if n.present(uid) {
		t.Errorf("netns %s or veth %s left behind", n.netns(uid), n.hostIf(uid))
	}
	if exec.Command(n.nft, "list", "table", "inet", n.table(uid)).Run() == nil {
		t.Errorf("nft table %s left behind", n.table(uid))
	}

	// Control: with no network, even the public address is out of reach.
	_, out, _ = runScript(t, ex, Attempt{JobID: "none"}, probeScript(inet.public+":"+port))
	expectProbes(t, out, map[string]string{inet.public + ":" + port: "CLOSED"})
}
