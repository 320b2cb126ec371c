package gossip

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testNet is an in-memory libp2p network of hosts with ed25519 identities
// (as gpumesh nodes have), each on its own address.
type testNet struct {
	t         testing.TB
	mn        mocknet.Mocknet
	hosts     []host.Host
	closeOnce sync.Once
}

func newTestNet(t testing.TB) *testNet {
	tn := &testNet{t: t, mn: mocknet.New()}
	t.Cleanup(tn.close)
	return tn
}

// close closes every host and the network; it runs at cleanup if not before.
func (tn *testNet) close() {
	tn.closeOnce.Do(func() {
		for _, h := range tn.hosts {
			h.Close()
		}
		tn.mn.Close()
	})
}

// addHost adds a host linked to every host already in the network.
func (tn *testNet) addHost() host.Host {
	tn.t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tn.t.Fatal(err)
	}
	i := len(tn.hosts) + 1
	ip := net.IP{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}
	h, err := tn.mn.AddPeer(sk, ma.StringCast(fmt.Sprintf("/ip6/%s/tcp/4001", ip)))
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.hosts = append(tn.hosts, h)
	return h
}

// connect links and connects a and b.
func (tn *testNet) connect(a, b host.Host) {
	tn.t.Helper()
	if _, err := tn.mn.LinkPeers(a.ID(), b.ID()); err != nil {
		tn.t.Fatal(err)
	}
	if _, err := tn.mn.ConnectPeers(a.ID(), b.ID()); err != nil {
		tn.t.Fatal(err)
	}
}

// connectRandom connects every host to k others chosen by a seeded
// generator, after a ring that keeps the graph connected.
func (tn *testNet) connectRandom(k int, seed uint64) {
	tn.t.Helper()
	n := len(tn.hosts)
	r := mrand.New(mrand.NewPCG(seed, seed))
	linked := map[[2]int]bool{}
	link := func(i, j int) {
		if i == j {
			return
		}
		if i > j {
			i, j = j, i
		}
		if linked[[2]int{i, j}] {
			return
		}
		linked[[2]int{i, j}] = true
		tn.connect(tn.hosts[i], tn.hosts[j])
	}
	for i := range n {
		link(i, (i+1)%n)
		for range k - 1 {
			link(i, r.IntN(n))
		}
	}
}

// eventually polls cond every few milliseconds until it holds or the
// deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronization
	}
}

func startGossip(t testing.TB, h host.Host, cfg Config) *Gossip {
	t.Helper()
	if cfg.Network == "" {
		cfg.Network = "test"
	}
	g, err := New(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// testAd returns a valid ad from p issued at now.
func testAd(p peer.ID, seq uint64, now time.Time) Ad {
	now = now.Truncate(time.Millisecond)
	return Ad{
		Peer: p, Seq: seq, IssuedAt: now, ExpiresAt: now.Add(30 * time.Second),
		Region: "cn-east",
		Cards: []CardGroup{
			{Model: "h100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81559, ComputeUnits: 3.17, Free: 6, Busy: 2, PriceCNY: 17.5},
			{Model: "rtx4090-48g", Vendor: device.VendorNVIDIA, MemoryMiB: 49140, ComputeUnits: 0.53, Free: 1, Reserved: 1, PriceCNY: 3.2},
		},
		Availability: Availability{Uptime: time.Hour, MTBF: 72 * time.Hour, Sessions: 4},
	}
}

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	_, pk, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustEncode(t testing.TB, ad Ad) []byte {
	t.Helper()
	b, err := EncodeAd(ad)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
