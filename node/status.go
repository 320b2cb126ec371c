package node

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/libp2p/go-libp2p/core/network"
)

// statusEvery is how often the driver rebuilds the status and the gauges.
const statusEvery = time.Second

// observer is the driver's bookkeeping for metrics: when jobs started
// rerouting, what they had been billed, which peers flap, and the latest
// status. What this node earned is the ledger's (earnings.go).
type observer struct {
	m         *metrics.Metrics
	flaps     *metrics.Flaps
	rerouting map[string]time.Time // job → when it started rerouting
	billed    map[string]billed    // job → what AddBilling has counted
	status    atomic.Pointer[api.Status]
	built     time.Time
}

type billed struct{ cardSeconds, cny float64 }

func newObserver(m *metrics.Metrics) *observer {
	return &observer{
		m:         m,
		flaps:     metrics.NewFlaps(10*time.Minute, 6),
		rerouting: map[string]time.Time{},
		billed:    map[string]billed{},
	}
}

// newMetrics builds the node's metrics over its gossip counters.
func (n *Node) newMetrics() error {
	cfg := metrics.DefaultConfig()
	if n.cfg.Version != "" {
		cfg.Version = n.cfg.Version
	}
	cfg.Gossip = n.gossip.Stats
	cfg.Network = n.mesh.Bytes
	cfg.Membership = n.mesh.Stats
	m, err := metrics.New(cfg)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.obs = newObserver(m)
	return nil
}

// observeNote records placement and reroute latencies and auction
// outcomes from the market's notifications. It runs on the driver.
func (n *Node) observeNote(note market.Notification) {
	n.stages.Noted(note)
	o := n.obs
	switch note.To {
	case market.JobRerouting:
		o.rerouting[note.Job] = note.At
	case market.JobRunning:
		if start, ok := o.rerouting[note.Job]; ok {
			o.m.ObserveReroute(note.At, note.At.Sub(start))
			delete(o.rerouting, note.Job)
		} else if note.From != market.JobRunning {
			if rec, ok := n.mk.Job(note.Job); ok && !rec.SubmittedAt.IsZero() && rec.Restarts == 0 {
				o.m.ObservePlacement(note.At, note.At.Sub(rec.SubmittedAt))
			}
		}
	case market.JobPlacing:
		o.m.CountAuction(metrics.OutcomeCleared)
	case market.JobFailed, market.JobSucceeded, market.JobCancelled:
		delete(o.rerouting, note.Job)
	}
	if note.From == market.JobBidding && note.To == market.JobPending {
		o.m.CountAuction(metrics.OutcomeShort)
	}
}

// observeBill counts what a record's bill grew by since the last time.
// A job it sees first with a bill already (one this node took over from a
// coordinator that was lost, was handed, or held before this node
// restarted) counts from there: what it was billed before was counted by
// the coordinator of the time. Counting it again made the mesh's charged
// counters add up to many times what owners were billed after the
// takeovers of a burst.
func (n *Node) observeBill(rec market.JobRecord) {
	o := n.obs
	old, seen := o.billed[rec.ID]
	if !seen {
		if !rec.State.Terminal() {
			o.billed[rec.ID] = billed{rec.CardSeconds, rec.CostCNY}
		}
		return
	}
	if d := rec.CostCNY - old.cny; d > 0 {
		_ = o.m.AddBilling(metrics.SideCharged, max(0, rec.CardSeconds-old.cardSeconds), d)
		o.billed[rec.ID] = billed{rec.CardSeconds, rec.CostCNY}
	}
	if rec.State.Terminal() {
		delete(o.billed, rec.ID)
	}
}

// forgetBill drops what observeBill counted of a job another node now
// coordinates: if this node coordinates it again later, it counts from
// then, not from what it saw last (the other node counted between).
func (n *Node) forgetBill(job string) { delete(n.obs.billed, job) }

// refreshStatus rebuilds the status on the driver when it is older than
// statusEvery.
func (n *Node) refreshStatus(now time.Time) {
	if now.Sub(n.obs.built) < statusEvery {
		return
	}
	n.obs.built = now
	n.accrue(now)
	st := n.buildStatus(now)
	n.obs.m.Sample(now)
	n.obs.m.Fill(now, st)
	n.obs.m.SetStatus(st)
	n.obs.status.Store(st)
}

// buildStatus assembles what this node knows; it runs on the driver.
func (n *Node) buildStatus(now time.Time) *api.Status {
	st := &api.Status{At: now, Warnings: []string{}}
	st.Node = api.NodeStatus{
		PeerID:        n.self,
		Version:       n.cfg.Version,
		StartedAt:     n.started,
		UptimeSeconds: now.Sub(n.started).Seconds(),
		Reachability:  n.reachability(),
		Region:        n.cfg.Region,
		Coordinator:   n.coordNow.Load(),
	}
	for _, a := range n.mesh.Addrs() {
		st.Node.Addrs = append(st.Node.Addrs, a.String())
	}
	st.Images = n.imagesStatus()
	for _, s := range n.mk.Cards() {
		st.Node.Cards = append(st.Node.Cards, api.Card{Card: s.Card, Simulated: s.Card.Simulated(), Healthy: s.Card.Health.Healthy, State: string(s.State), Job: s.Job, Share: s.Share, Epoch: s.Epoch})
	}
	st.Warnings = append(st.Warnings, metrics.CardWarnings(st.Node.Cards)...)

	for _, m := range n.mesh.Members() {
		st.Mesh.Members.Add(m.State.String())
		if m.State == mesh.StateAlive {
			st.Mesh.AddRegion(m.Region, m.Cards)
		}
	}
	// The mesh's cards are the Book's: membership takes a dead member's
	// out at once (Hide) and a departed one's for good (Forget).
	for _, s := range n.gossip.Book().Snapshot(now) {
		ad, ok := n.gossip.Book().Get(s.Peer, now)
		if !ok {
			continue
		}
		for _, g := range ad.Cards {
			st.Mesh.AddCards(api.Capacity{Model: g.Model, Vendor: string(g.Vendor), Free: g.Free, Reserved: g.Reserved, Busy: g.Busy})
		}
	}
	st.Jobs.ByState = map[string]int{}
	for state, count := range n.mk.JobCounts() {
		st.Jobs.ByState[string(state)] = count
	}
	st.Warnings = append(st.Warnings, n.obs.flaps.Warnings(now)...)
	st.Earnings = n.ledger.summary(now)
	st.Warnings = append(st.Warnings, versionWarnings(n.versions.Newer(now.Add(-newerPeerWindow)))...)
	for _, m := range n.mesh.Members() {
		if m.Version > mesh.MetaVersion && (m.State == mesh.StateAlive || m.State == mesh.StateSuspect) {
			st.Warnings = append(st.Warnings, fmt.Sprintf("peer %s runs a newer gpumesh (membership version %d; this node writes %d): upgrade gpumesh on this node",
				m.ID, m.Version, mesh.MetaVersion))
		}
	}
	return st
}

// newerPeerWindow is how long status keeps warning of a peer heard with a
// newer wire version.
const newerPeerWindow = time.Hour

// versionWarnings says, for each peer heard with a newer wire version,
// that its messages are refused and what to do.
func versionWarnings(peers []gossip.NewerPeer) []string {
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		out = append(out, fmt.Sprintf("peer %s speaks %s wire version %d; this node reads %d and refuses its messages: upgrade gpumesh on this node",
			p.Peer, p.Protocol, p.Version, p.Reads))
	}
	return out
}

// reachability is AutoNAT's verdict on this node, as far as the host
// exposes it.
func (n *Node) reachability() string {
	type reacher interface{ Reachability() network.Reachability }
	if r, ok := n.mesh.Host().(reacher); ok {
		switch r.Reachability() {
		case network.ReachabilityPublic:
			return api.ReachabilityPublic
		case network.ReachabilityPrivate:
			return api.ReachabilityPrivate
		}
	}
	return api.ReachabilityUnknown
}

// Status implements api.Backend: the latest status, rebuilt at most once a
// second.
func (n *Node) Status(ctx context.Context) (any, error) {
	if st := n.obs.status.Load(); st != nil && time.Since(st.At) < 2*statusEvery {
		return st, nil
	}
	var st *api.Status
	err := n.do(ctx, func() {
		n.obs.built = time.Time{}
		n.refreshStatus(time.Now())
		st = n.obs.status.Load()
	})
	return st, err
}

// Metrics implements api.Backend.
func (n *Node) Metrics() http.Handler { return n.obs.m.Handler() }
