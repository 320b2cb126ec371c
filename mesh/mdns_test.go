package mesh

import (
	"net"
	"testing"
	"time"
)

// multicastLoopback reports whether this machine has a multicast-capable
// interface mDNS can use (containers often have none).
func multicastLoopback() bool {
	ifaces, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagMulticast != 0 {
			return true
		}
	}
	return false
}

// Two nodes with no bootstrap address find each other by mDNS; a third of
// another network name does not join them.
func TestRealMDNSDiscovery(t *testing.T) {
	if !multicastLoopback() {
		t.Skip("no up, multicast-capable network interface for mDNS")
	}
	a := realNode(t, Config{MDNS: true, Network: "mdns-test"})
	b := realNode(t, Config{MDNS: true, Network: "mdns-test"})
	other := realNode(t, Config{MDNS: true, Network: "mdns-other"})
	waitFor(t, 30*time.Second, "found by mDNS", func() bool { return allSee([]*Mesh{a, b}, StateAlive) })
	if other.NumAlive() != 1 || a.NumAlive() != 2 {
		t.Fatalf("networks mixed: other sees %d, a sees %d", other.NumAlive(), a.NumAlive())
	}
}

func TestMDNSServiceNameIsShortAndPerNetwork(t *testing.T) {
	a, b := mdnsServiceName("cafe-a"), mdnsServiceName("cafe-b")
	if a == b {
		t.Fatal("two networks share an mDNS service name")
	}
	// DNS-SD service names: "_" + at most 15 characters, then "._udp".
	if len(a) > len("_")+15+len("._udp") {
		t.Fatalf("service name %q too long", a)
	}
}
