//go:build unix

package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// behindNAT puts a node behind a masquerading router: a namespace with one
// leg on the lab's bridge (address index i) and one on a private /24 that
// only it routes, where the node lives. Nodes on the bridge cannot dial it;
// it dials out to them. The test itself reaches its API through a route
// on the host, which the other nodes do not have.
func (l *netLab) behindNAT(t *testing.T, i int, name string, extra ...string) *proc {
	t.Helper()
	router, inside := l.tag+"rt", l.tag+"pv"
	private := fmt.Sprintf("172.30.%d.", os.Getpid()%250)
	rBr, rHost := l.tag+"rb", l.tag+"rh" // router ↔ bridge
	rIn, sIn := l.tag+"ri", l.tag+"si"   // router ↔ the node
	l.must("ip netns add %s", router)
	l.ns[i] = router
	l.must("ip netns add %s", inside)
	l.ns[i+100] = inside
	l.must("ip link add %s type veth peer name %s", rHost, rBr)
	l.must("ip link set %s netns %s", rBr, router)
	l.must("ip link set %s master %s up", rHost, l.bridge)
	l.must("ip netns exec %s ip addr add %s/24 dev %s", router, l.addr(i), rBr)
	l.must("ip netns exec %s ip link set %s up", router, rBr)
	l.must("ip link add %s type veth peer name %s", rIn, sIn)
	l.must("ip link set %s netns %s", rIn, router)
	l.must("ip link set %s netns %s", sIn, inside)
	l.must("ip netns exec %s ip addr add %s1/24 dev %s", router, private, rIn)
	l.must("ip netns exec %s ip link set %s up", router, rIn)
	l.must("ip netns exec %s ip addr add %s2/24 dev %s", inside, private, sIn)
	l.must("ip netns exec %s ip link set %s up", inside, sIn)
	l.must("ip netns exec %s ip link set lo up", inside)
	l.must("ip netns exec %s ip route add default via %s1", inside, private)
	l.must("ip netns exec %s sysctl -q -w net.ipv4.ip_forward=1", router)
	if err := l.nft(router, fmt.Sprintf(`table ip nat {
	chain post { type nat hook postrouting priority 100; oifname "%s" masquerade; }
}`, rBr)); err != nil {
		t.Fatal(err)
	}
	l.must("ip route add %s0/24 via %s", private, l.addr(i))
	t.Cleanup(func() { _ = l.sh("ip route del %s0/24", private) })

	p := &proc{t: t, name: name, dataDir: t.TempDir(), p2pPort: labPort, ip: private + "2", token: l.token,
		prefix: []string{"ip", "netns", "exec", inside}}
	p.apiAddr = fmt.Sprintf("%s2:%d", private, labAPIPort)
	p.args = append([]string{"node",
		"--data", p.dataDir,
		"--listen", fmt.Sprintf("/ip4/%s2/tcp/%d", private, labPort),
		"--api", p.apiAddr,
		"--api-token-file", l.tokenFile,
		"--mdns=false",
		"--isolation", "process",
		"--log-level", "debug",
	}, extra...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

// dialsFrom reports whether namespace ns can open a TCP connection to
// addr:port.
func dialsFrom(ns, addr string, port int) bool {
	err := exec.Command("ip", "netns", "exec", ns, "timeout", "3", "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", addr, port)).Run()
	return err == nil
}

func TestExecAndPortForwardReachASupplierBehindNAT(t *testing.T) {
	needReplica(t)
	l := newNetLab(t)
	// The lab's side of the NAT is "the internet": addresses libp2p takes
	// for public (the lab's own are private, and a relay is sought only
	// among members with public addresses). The range is one nobody routes
	// here, on the lab's bridge alone.
	l.prefix = fmt.Sprintf("11.%d.%d.", 100+os.Getpid()%100, labCount.Load()%250)
	l.host = l.prefix + "1"
	l.must("ip addr add %s/24 dev %s", l.host, l.bridge)
	relay := l.startNode(t, 0, "relay", "--no-nat=false")
	front := l.startNode(t, 1, "front", "--no-nat=false", "--join", relay.joinAddr())
	supplier := l.behindNAT(t, 5, "natted", "--sim", "h100-sxm-80g:1", "--join", relay.joinAddr())
	waitAllSee(t, []*proc{relay, front, supplier}, 3, 1)
	eventually(t, 90*time.Second, "the supplier behind the NAT has a relayed address", func() bool {
		self := supplier.peers()[supplier.peerID]
		for _, a := range self.Addrs {
			if strings.Contains(a, "/p2p-circuit") {
				return true
			}
		}
		return false
	})
	if dialsFrom(l.ns[1], supplier.ip, labPort) {
		t.Fatal("the front node can dial the supplier: it is not behind the NAT")
	}
	if !dialsFrom(l.ns[105], l.addr(1), labPort) {
		t.Fatal("the supplier cannot dial out through its NAT")
	}

	t.Setenv("GPUMESH_API_TOKEN", l.token) // the lab's APIs listen beyond loopback
	alice, bob := tunnelOwners(t)
	port := 8000
	common := []string{"--api", front.apiAddr}
	id := cliJob(t, front.apiAddr, alice, "--", replicaBinary, "serve", fmt.Sprint(port))

	code, out, errOut := runCLIStatus(t, append(append([]string{"exec", id}, common...), "--key", alice, "--",
		"sh", "-c", "echo behind the NAT in $GPUMESH_JOB_ID; exit 4")...)
	if code != 4 || out != "behind the NAT in "+id+"\n" {
		t.Errorf("exec through the front node: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := runCLIStatus(t, append(append([]string{"exec", id}, common...), "--key", bob, "--", "true")...); code != 1 || !strings.Contains(errOut, "another owner") {
		t.Errorf("bob's exec: exit %d, %q", code, errOut)
	}

	_, addrs := startForward(t, 1, append(append([]string{id}, common...), "--key", alice, fmt.Sprintf("0:%d", port))...)
	eventually(t, 15*time.Second, "the job's HTTP server answers through the NAT", func() bool {
		resp, err := client.Get("http://" + addrs[0] + "/natted")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b) == "hello from share 0: GET /natted "
	})
}
