package gossip

import (
	"context"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"
)

// synctestRun runs f in a synctest bubble, where time is virtual: it moves
// only when every goroutine in the bubble is blocked. Under the race
// detector it pins GOMAXPROCS to 1, as go-libp2p-pubsub's own tests do, to
// step around a runtime bug with bubble timers and TSan
// (https://github.com/golang/go/issues/78156).
func synctestRun(t *testing.T, f func(t *testing.T)) {
	if raceEnabled {
		prev := runtime.GOMAXPROCS(1)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	synctest.Test(t, f)
}

// simHosts returns n libp2p hosts on go-libp2p's simulated network (QUIC
// over simnet), every link with the given one-way latency and 20 Mbit/s.
func simHosts(t *testing.T, n int, latency time.Duration) []host.Host {
	link := simnet.LinkSettings{BitsPerSecond: 20 * simlibp2p.OneMbps}
	net, meta, err := simlibp2p.SimpleLibp2pNetwork(
		[]simlibp2p.NodeLinkSettingsAndCount{{LinkSettings: simnet.NodeBiDiLinkSettings{Downlink: link, Uplink: link}, Count: n}},
		simnet.StaticLatency(latency),
		simlibp2p.NetworkSettings{},
	)
	if err != nil {
		t.Fatal(err)
	}
	net.Start()
	t.Cleanup(func() {
		for _, h := range meta.Nodes {
			h.Close()
		}
		net.Close()
	})
	return meta.Nodes
}

// In protocol time on a simulated network with 10 ms links, a new ad
// reaches all 24 nodes of a random mesh within a few link latencies per
// hop, and the first ads of a node that starts late reach everyone once
// the mesh has formed. Virtual time makes the figures exact and the test
// fast: it measures the protocol, not this machine.
func TestPropagationInProtocolTime(t *testing.T) {
	synctestRun(t, func(t *testing.T) {
		const n, latency = 24, 10 * time.Millisecond
		hosts := simHosts(t, n, latency)
		ctx := context.Background()

		var mu sync.Mutex
		heard := map[peer.ID]time.Time{} // node → when it applied the tracked ad
		var tracked peer.ID
		var trackedSeq uint64
		var gs []*Gossip
		for _, h := range hosts {
			self := h.ID()
			g, err := New(h, Config{Network: "sim", OnAd: func(ad Ad) {
				mu.Lock()
				defer mu.Unlock()
				if ad.Peer == tracked && ad.Seq == trackedSeq {
					heard[self] = time.Now()
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			gs = append(gs, g)
		}
		r := mrand.New(mrand.NewPCG(5, 5))
		for i, h := range hosts {
			for _, j := range []int{(i + 1) % n, r.IntN(n), r.IntN(n)} {
				if j == i {
					continue
				}
				if err := h.Connect(ctx, peer.AddrInfo{ID: hosts[j].ID(), Addrs: hosts[j].Addrs()}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A few heartbeats for gossipsub to build its mesh.
		time.Sleep(3 * time.Second) // virtual time: returns when the bubble has run 3 s of protocol
		synctest.Wait()
		for i, g := range gs {
			select {
			case <-g.MeshReady():
			default:
				t.Fatalf("node %d has no mesh after 3 s", i)
			}
		}

		mu.Lock()
		tracked, trackedSeq = hosts[0].ID(), 1
		mu.Unlock()
		start := time.Now()
		if err := gs[0].PublishAd(ctx, testAd(hosts[0].ID(), 1, start)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		if len(heard) != n {
			t.Fatalf("%d of %d nodes applied the ad within 2 s of protocol time", len(heard), n)
		}
		var last time.Duration
		for _, at := range heard {
			last = max(last, at.Sub(start))
		}
		// A hop costs one link latency plus the QUIC/stream overhead of a
		// send; the random graph is a few hops across.
		if last > 20*latency {
			t.Errorf("the ad took %s of protocol time to reach every node; want within 20 link latencies (%s)", last, 20*latency)
		}
		t.Logf("protocol time to reach all %d nodes over %s links: %s", n, latency, last)
		for _, g := range gs {
			if s := g.Stats().Topics[g.Topics().Capacity]; s.Rejects() != 0 {
				t.Errorf("rejects on an honest mesh: %+v", s)
			}
		}
	})
}
