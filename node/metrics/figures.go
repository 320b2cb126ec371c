package metrics

import (
	"fmt"
	"maps"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/node/api"
)

// reasonFuture is gossip's name for messages issued further in the future
// than its allowed clock skew.
var reasonFuture = gossip.ReasonFuture.String()

// Sample reads the gossip counters (Config.Gossip) into the rates of Fill.
// The node calls it on its ticker, about once a second; without it the rates
// read 0.
func (m *Metrics) Sample(now time.Time) {
	if m.cfg.Gossip == nil {
		return
	}
	s := m.cfg.Gossip()
	var msgs, future uint64
	for _, t := range s.Topics {
		msgs += t.Accepted + t.Rejects() + t.Ignores() + t.Duplicates
		future += t.Ignored[reasonFuture]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs.Add(now, msgs)
	m.bytesIn.Add(now, s.BytesIn)
	m.bytesOut.Add(now, s.BytesOut)
	m.future.Add(now, future)
}

// Fill sets the figures of st that Metrics keeps: the placement latencies and
// reroutes over their windows up to now, and st.Gossip. It appends a warning
// when peers' messages arrived from the future during the rate window (a
// clock, theirs or this node's, is off). The node fills the rest of st.
func (m *Metrics) Fill(now time.Time, st *api.Status) {
	m.mu.Lock()
	pq, pn := m.placements.Quantiles(now, 0.5, 0.99)
	rq, _ := m.reroutes.Quantiles(now, 0.5)
	st.Jobs.Placement = api.PlacementStatus{
		WindowSeconds: m.placements.Span().Seconds(),
		Count:         pn,
		P50Seconds:    pq[0].Seconds(),
		P99Seconds:    pq[1].Seconds(),
	}
	st.Jobs.Reroutes = api.RerouteStatus{
		WindowSeconds: m.reroutes.Span().Seconds(),
		Count:         m.reroutes.Count(now),
		MedianSeconds: rq[0].Seconds(),
	}
	g := api.GossipStatus{
		MessagesPerSecond: m.msgs.PerSecond(now),
		BytesInPerSecond:  m.bytesIn.PerSecond(now),
		BytesOutPerSecond: m.bytesOut.PerSecond(now),
		Rejected:          map[string]uint64{},
		Ignored:           map[string]uint64{},
	}
	future := m.future.Increase(now)
	m.mu.Unlock()

	if m.cfg.Gossip != nil {
		s := m.cfg.Gossip()
		for _, t := range s.Topics {
			g.MeshPeers = max(g.MeshPeers, t.MeshPeers)
			addCounts(g.Rejected, t.Rejected)
			addCounts(g.Ignored, t.Ignored)
		}
	}
	st.Gossip = g
	if future > 0 {
		st.Warnings = append(st.Warnings, fmt.Sprintf(
			"clock skew: %d gossip message(s) in the last %v were issued in the future; check NTP here and on peers",
			future, m.cfg.RateWindow))
	}
}

func addCounts(dst, src map[string]uint64) {
	for k, v := range maps.All(src) {
		dst[k] += v
	}
}
