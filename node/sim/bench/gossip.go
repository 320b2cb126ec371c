package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/node/sim"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// Shape of the gossip mesh.
const (
	// gossipLinks is how many random links each node adds (after a ring
	// that keeps the graph connected): about 2×gossipLinks connections per
	// node.
	gossipLinks = 10
	// gossipTrials is how many ads are followed to every node.
	gossipTrials = 21
	// meshRefreshRate, minRefresh and maxRefresh are
	// gossip.AdvertiserConfig's defaults: every node refreshes its ad
	// every N/MeshRefreshRate seconds, within [MinRefresh, MaxRefresh].
	meshRefreshRate = 0.4
	minRefresh      = 10 * time.Second
	maxRefresh      = 40 * time.Minute
)

// refreshRate is the ads per second a mesh of n idle nodes publishes with
// the advertisers' defaults: 0.4 from 4 nodes up to 960,000.
func refreshRate(n int) float64 {
	every := min(max(time.Duration(float64(n)/meshRefreshRate*float64(time.Second)), minRefresh), maxRefresh)
	return float64(n) / every.Seconds()
}

// gossipMesh is n gossip nodes (no market, no membership) on one
// in-memory libp2p network, with a hook that follows one ad.
type gossipMesh struct {
	mn     mocknet.Mocknet
	hosts  []host.Host
	nodes  []*gossip.Gossip
	seqs   []uint64
	target atomic.Pointer[adTarget]
}

// adTarget is the ad being followed: how many nodes applied it, and when
// 99% and all had.
type adTarget struct {
	peer        peer.ID
	seq         uint64
	start       time.Time
	need, all   int64
	reached     atomic.Int64
	at99, atAll atomic.Int64
	done        chan struct{}
}

// runGossip measures the capacity topic on a GossipNodes mesh: the time
// for a new ad to reach 99% and all of the nodes (median of 21 ads, each
// published by a random node), the bytes each node receives and sends per
// second while the mesh refreshes at the advertisers' steady rate, and the
// memory per node: the growth of the process's resident set while the
// mesh was built (held to the target), and the Go heap and stacks.
func runGossip(ctx context.Context, r *runner) error {
	n := r.cfg.GossipNodes
	r.cfg.Progress(fmt.Sprintf("gossip: building %d nodes", n))
	m0, rss0 := memBaseline()
	t0 := time.Now()
	g, err := newGossipMesh(ctx, n, r.cfg.Seed)
	if g != nil {
		defer g.close()
	}
	if err != nil {
		return err
	}
	built := time.Since(t0)
	heapPerNode := float64(heapInUse()-m0) / float64(n)
	c := fmt.Sprintf("%d nodes, ~%d links each", n, 2*gossipLinks)
	r.row(Row{Scenario: ScenarioGossip, Case: c, Clock: ClockReal, Metric: "build", Value: ms(built), Unit: "ms"})
	if rss1 := rssBytes(); rss0 > 0 && rss1 > 0 {
		rssPerNode := float64(rss1-rss0) / float64(n)
		r.row(target(Row{Scenario: ScenarioGossip, Case: c, Metric: "RSS/node", Value: rssPerNode / 1e6, Unit: "MB",
			Note: "growth of the process's resident set (VmRSS) while the mesh was built, divided by the nodes; MB = 10^6 bytes"},
			"< 1 MB", rssPerNode < 1e6))
	} else {
		r.note("gossip: RSS per node not measured: this system has no /proc/self/status")
	}
	r.row(Row{Scenario: ScenarioGossip, Case: c, Metric: "heap+stacks/node", Value: heapPerNode / (1 << 20), Unit: "MiB",
		Note: "Go heap and goroutine stacks after a collection (libp2p host, gossipsub and the Book, with its links); the RSS row also counts the runtime's spare and unreturned pages"})

	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 7))
	var to99, toAll []time.Duration
	for range r.cfg.samples(gossipTrials, 3) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a, b, err := g.propagate(rng.IntN(n), 30*time.Second)
		if err != nil {
			return err
		}
		to99, toAll = append(to99, a), append(toAll, b)
	}
	l99, lAll := sim.LatencyOf("", to99), sim.LatencyOf("", toAll)
	r.row(target(Row{Scenario: ScenarioGossip, Case: c + ", ad to 99%", Clock: ClockReal, Metric: "median", Value: ms(l99.P50), Unit: "ms", N: l99.Count},
		"< 500 ms", l99.P50 < 500*time.Millisecond))
	r.row(Row{Scenario: ScenarioGossip, Case: c + ", ad to 99%", Clock: ClockReal, Metric: "p90", Value: ms(l99.P90), Unit: "ms", N: l99.Count})
	r.row(Row{Scenario: ScenarioGossip, Case: c + ", ad to all", Clock: ClockReal, Metric: "median", Value: ms(lAll.P50), Unit: "ms", N: lAll.Count})

	// Let the trials' IHAVE gossip age out of gossipsub's message cache
	// (3 heartbeats of 1 s) before measuring the steady state.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(4 * time.Second): // waiting out gossipsub's history window
	}
	window := time.Duration(r.cfg.GossipWindow * float64(time.Second))
	rate := refreshRate(n)
	in, out, ads, err := g.traffic(ctx, window, rate, rng)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d ads refreshed in %.0f s (%.2f/s mesh-wide, the advertisers' steady rate)", ads, window.Seconds(), rate)
	r.row(target(Row{Scenario: ScenarioGossip, Case: c + ", idle", Clock: ClockReal, Metric: "bytes in/node", Value: in, Unit: "B/s", Note: note}, "< 2000 B/s", in < 2000))
	r.row(target(Row{Scenario: ScenarioGossip, Case: c + ", idle", Clock: ClockReal, Metric: "bytes out/node", Value: out, Unit: "B/s"}, "< 2000 B/s", out < 2000))
	return nil
}

// newGossipMesh starts n hosts with gossip on each, links them in a ring
// plus gossipLinks-1 random links per node, and waits until every node
// has a gossipsub mesh on the capacity topic. On error it returns what it
// built, for the caller to close.
func newGossipMesh(ctx context.Context, n int, seed uint64) (*gossipMesh, error) {
	g := &gossipMesh{mn: mocknet.New(), seqs: make([]uint64, n)}
	for i := range n {
		sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return g, err
		}
		ip := net.IP{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte((i + 1) >> 24), byte((i + 1) >> 16), byte((i + 1) >> 8), byte(i + 1)}
		h, err := g.mn.AddPeer(sk, ma.StringCast(fmt.Sprintf("/ip6/%s/tcp/4001", ip)))
		if err != nil {
			return g, err
		}
		g.hosts = append(g.hosts, h)
	}
	for i, h := range g.hosts {
		gs, err := gossip.New(h, gossip.Config{Network: "bench", OnAd: g.onAd})
		if err != nil {
			return g, err
		}
		g.nodes = append(g.nodes, gs)
		g.seqs[i] = 1
		if i%64 == 0 && ctx.Err() != nil {
			return g, ctx.Err()
		}
	}
	r := mrand.New(mrand.NewPCG(seed, 42))
	linked := map[[2]int]bool{}
	link := func(i, j int) error {
		if i == j {
			return nil
		}
		if i > j {
			i, j = j, i
		}
		if linked[[2]int{i, j}] {
			return nil
		}
		linked[[2]int{i, j}] = true
		if _, err := g.mn.LinkPeers(g.hosts[i].ID(), g.hosts[j].ID()); err != nil {
			return err
		}
		_, err := g.mn.ConnectPeers(g.hosts[i].ID(), g.hosts[j].ID())
		return err
	}
	for i := range n {
		if err := link(i, (i+1)%n); err != nil {
			return g, err
		}
		for range gossipLinks - 1 {
			if err := link(i, r.IntN(n)); err != nil {
				return g, err
			}
		}
	}
	deadline := time.After(2 * time.Minute)
	for i, gs := range g.nodes {
		select {
		case <-gs.MeshReady():
		case <-deadline:
			return g, fmt.Errorf("node %d has no gossipsub mesh after 2 min", i)
		case <-ctx.Done():
			return g, ctx.Err()
		}
	}
	return g, nil
}

func (g *gossipMesh) close() {
	for _, n := range g.nodes {
		n.Close()
	}
	for _, h := range g.hosts {
		h.Close()
	}
	g.mn.Close()
}

func (g *gossipMesh) onAd(ad gossip.Ad) {
	t := g.target.Load()
	if t == nil || ad.Peer != t.peer || ad.Seq != t.seq {
		return
	}
	n := t.reached.Add(1)
	if n == t.need {
		t.at99.Store(int64(time.Since(t.start)))
	}
	if n == t.all {
		t.atAll.Store(int64(time.Since(t.start)))
		close(t.done)
	}
}

// benchAd is a valid ad from p: a node of 8 H100s, 6 free.
func benchAd(p peer.ID, seq uint64, now time.Time) gossip.Ad {
	now = now.Truncate(time.Millisecond)
	return gossip.Ad{
		Peer: p, Seq: seq, IssuedAt: now, ExpiresAt: now.Add(time.Hour), Region: "bench",
		Cards:        []gossip.CardGroup{{Model: "h100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81559, ComputeUnits: 3.17, Free: 6, Busy: 2, PriceCNY: 17.5}},
		Availability: gossip.Availability{Uptime: time.Hour, MTBF: 72 * time.Hour, Sessions: 4},
	}
}

func (g *gossipMesh) publish(ctx context.Context, i int) (peer.ID, uint64, error) {
	id, seq := g.hosts[i].ID(), g.seqs[i]
	g.seqs[i]++
	if err := g.nodes[i].PublishAd(ctx, benchAd(id, seq, time.Now())); err != nil {
		return "", 0, fmt.Errorf("node %d publishes: %w", i, err)
	}
	return id, seq, nil
}

// propagate publishes a new ad from node i and returns how long it took
// to be applied by 99% of the nodes and by all of them (the author
// applies its own ad too).
func (g *gossipMesh) propagate(i int, timeout time.Duration) (p99, all time.Duration, err error) {
	n := int64(len(g.nodes))
	t := &adTarget{peer: g.hosts[i].ID(), seq: g.seqs[i], need: int64(math.Ceil(0.99 * float64(n))), all: n, done: make(chan struct{})}
	g.target.Store(t)
	defer g.target.Store(nil)
	t.start = time.Now()
	if _, _, err := g.publish(context.Background(), i); err != nil {
		return 0, 0, err
	}
	select {
	case <-t.done:
	case <-time.After(timeout):
		return 0, 0, fmt.Errorf("after %v the ad of node %d reached %d of %d nodes", timeout, i, t.reached.Load(), n)
	}
	return time.Duration(t.at99.Load()), time.Duration(t.atAll.Load()), nil
}

func (g *gossipMesh) totals() (in, out uint64) {
	for _, n := range g.nodes {
		st := n.Stats()
		in += st.BytesIn
		out += st.BytesOut
	}
	return in, out
}

// traffic runs the mesh for window while publishing adsPerSec ads a second
// from random nodes at even intervals, and returns the bytes each node
// received and sent per second on average, and the ads published.
func (g *gossipMesh) traffic(ctx context.Context, window time.Duration, adsPerSec float64, r *mrand.Rand) (in, out float64, ads int, err error) {
	in0, out0 := g.totals()
	start := time.Now()
	every := time.Duration(float64(time.Second) / adsPerSec)
	for next := start.Add(every / 2); next.Before(start.Add(window)); next = next.Add(every) {
		select {
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		case <-time.After(time.Until(next)): // pacing the load
		}
		if _, _, err := g.publish(ctx, r.IntN(len(g.nodes))); err != nil {
			return 0, 0, 0, err
		}
		ads++
	}
	select {
	case <-ctx.Done():
		return 0, 0, 0, ctx.Err()
	case <-time.After(time.Until(start.Add(window))): // the end of the window
	}
	in1, out1 := g.totals()
	secs := time.Since(start).Seconds() * float64(len(g.nodes))
	return float64(in1-in0) / secs, float64(out1-out0) / secs, ads, nil
}
