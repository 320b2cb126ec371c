package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/api"
)

// benchStatus is a large mesh: 40 models, 1000 members, a node with 8 cards.
func benchStatus() *api.Status {
	st := fixtureStatus(time.Now())
	st.Mesh = api.MeshStatus{Members: api.MemberCounts{Alive: 990, Suspect: 5, Dead: 5}}
	for i := range 40 {
		st.Mesh.AddCards(api.Capacity{Model: fmt.Sprintf("model-%02d", i), Vendor: "nvidia", Free: 100 + i, Reserved: 3, Busy: 50})
	}
	st.Node.Cards = nil
	for range 8 {
		st.Node.Cards = append(st.Node.Cards, api.Card{Card: device.Card{Model: "h100-sxm-80g", Vendor: "nvidia"}, Healthy: true, State: "running"})
	}
	return st
}

// naiveGauges is the obvious way to keep the same gauges: GaugeVecs set by
// the driver on every status, reset first so that models that left vanish.
type naiveGauges struct {
	members, meshCards, nodeCards, jobs *prometheus.GaugeVec
}

func newNaiveGauges(reg *prometheus.Registry) *naiveGauges {
	n := &naiveGauges{
		members:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "n_members", Help: "h"}, []string{"state"}),
		meshCards: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "n_mesh_cards", Help: "h"}, []string{"model", "vendor", "state"}),
		nodeCards: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "n_node_cards", Help: "h"}, []string{"model", "vendor", "state"}),
		jobs:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "n_jobs", Help: "h"}, []string{"state"}),
	}
	reg.MustRegister(n.members, n.meshCards, n.nodeCards, n.jobs)
	return n
}

func (n *naiveGauges) set(st *api.Status) {
	mc := st.Mesh.Members
	n.members.WithLabelValues("alive").Set(float64(mc.Alive))
	n.members.WithLabelValues("suspect").Set(float64(mc.Suspect))
	n.members.WithLabelValues("dead").Set(float64(mc.Dead))
	n.members.WithLabelValues("left").Set(float64(mc.Left))
	n.meshCards.Reset()
	for _, r := range st.Mesh.ByModel {
		n.meshCards.WithLabelValues(r.Model, r.Vendor, "free").Set(float64(r.Free))
		n.meshCards.WithLabelValues(r.Model, r.Vendor, "reserved").Set(float64(r.Reserved))
		n.meshCards.WithLabelValues(r.Model, r.Vendor, "busy").Set(float64(r.Busy))
	}
	n.nodeCards.Reset()
	for _, c := range st.Node.Cards {
		n.nodeCards.WithLabelValues(c.Model, string(c.Vendor), c.State).Inc()
	}
	n.jobs.Reset()
	for s, v := range st.Jobs.ByState {
		n.jobs.WithLabelValues(s).Set(float64(v))
	}
}

// BenchmarkStatusUpdate measures what the node's driver goroutine pays per
// status to keep the gauges current: SetStatus (one pointer store; the
// gauges are computed at scrape) against setting GaugeVecs directly. It
// reports both in ns/update and their ratio.
func BenchmarkStatusUpdate(b *testing.B) {
	st := benchStatus()
	m, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	naive := newNaiveGauges(prometheus.NewRegistry())
	const rounds = 2000
	start := time.Now()
	for range rounds {
		naive.set(st)
	}
	naiveNs := float64(time.Since(start).Nanoseconds()) / rounds
	b.ResetTimer()
	for b.Loop() {
		m.SetStatus(st)
	}
	b.StopTimer()
	ours := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(naiveNs, "naive-ns/update")
	b.ReportMetric(naiveNs/max(ours, 0.01), "naive/ours")
}

// BenchmarkScrape measures one scrape of the gpumesh_* families (no
// runtime collectors) with the large mesh of benchStatus: the cost SetStatus
// moves off the driver onto Prometheus's request.
func BenchmarkScrape(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Runtime = false
	fg := newFakeGossip()
	cfg.Gossip = fg.stats
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	m.SetStatus(benchStatus())
	for b.Loop() {
		if _, err := m.Gatherer().Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
