package mesh

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A real node serves libp2p's own metrics but not the resource manager's,
// which it does not feed (libp2pmetrics.go), and its traffic still passes
// the resource manager's limits.
func TestRealNodeServesNoResourceManagerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := realNode(t, Config{Registerer: reg})
	b := realNode(t, Config{Join: a.Addrs()})
	waitFor(t, 20*time.Second, "2 real nodes alive", func() bool { return allSee([]*Mesh{a, b}, StateAlive) })
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	libp2p := 0
	for _, f := range fams {
		switch name := f.GetName(); {
		case strings.HasPrefix(name, rcmgrNamespace):
			t.Errorf("resource manager metric %s served", name)
		case strings.HasPrefix(name, "libp2p_"):
			libp2p++
		}
	}
	if libp2p == 0 {
		t.Errorf("no libp2p metric among the %d served", len(fams))
	}
}

// ofRcmgr tells the resource manager's collectors from others by name.
func TestOfRcmgr(t *testing.T) {
	for _, c := range []struct {
		coll prometheus.Collector
		want bool
	}{
		{prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "libp2p_rcmgr", Name: "connections"}), true},
		{prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "libp2p_rcmgr", Name: "streams"}, []string{"dir"}), true},
		{prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "libp2p_swarm", Name: "connections_opened_total"}), false},
		{prometheus.NewGauge(prometheus.GaugeOpts{Name: "libp2p_rcmgrx"}), false},
		{prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpumesh", Name: "libp2p_rcmgr_copy"}), false},
	} {
		if got := ofRcmgr(c.coll); got != c.want {
			t.Errorf("ofRcmgr(%v) = %v, want %v", c.coll, got, c.want)
		}
	}
}
