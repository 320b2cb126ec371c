package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// Bounds on the label values the status gauges take from peers' ads.
const (
	maxModels = 64 // model keys (the catalog holds a few dozen)
)

var (
	membersDesc = prometheus.NewDesc("gpumesh_members",
		"Members of the mesh as this node sees them, by state (alive, suspect, dead, left).",
		[]string{"state"}, nil)
	meshCardsDesc = prometheus.NewDesc("gpumesh_mesh_cards",
		"Cards advertised in the mesh (this node's book), by model, vendor and state (free, reserved, busy).",
		[]string{"model", "vendor", "state"}, nil)
	nodeCardsDesc = prometheus.NewDesc("gpumesh_node_cards",
		"This node's cards, by model, vendor and state (free, reserved, running, unhealthy).",
		[]string{"model", "vendor", "state"}, nil)
	jobsDesc = prometheus.NewDesc("gpumesh_jobs",
		"Jobs this node coordinates, by state; the sum over nodes counts every job once.",
		[]string{"state"}, nil)
	reachabilityDesc = prometheus.NewDesc("gpumesh_node_reachability",
		"1 for this node's reachability as AutoNAT judges it (public, private, unknown), 0 for the others.",
		[]string{"reachability"}, nil)
	warningsDesc = prometheus.NewDesc("gpumesh_warnings",
		"Warnings the node's status shows now (unhealthy cards, clock skew, flapping peers).",
		nil, nil)
	imageLayerBytesDesc = prometheus.NewDesc("gpumesh_image_layer_bytes_total",
		"Image layer bytes this node fetched, by source: peer (another node of the mesh) or registry (a registry or its mirror).",
		[]string{"source"}, nil)
	imageLayersDesc = prometheus.NewDesc("gpumesh_image_layers_total",
		"Image layers this node's pulls needed, by source: peer, registry, or cache (already stored).",
		[]string{"source"}, nil)
	imageRootfsBytesDesc = prometheus.NewDesc("gpumesh_image_rootfs_bytes",
		"Bytes of the unpacked image root file systems this node keeps (gpumesh node --image-cache-max bounds them).",
		nil, nil)
	statusTimeDesc = prometheus.NewDesc("gpumesh_status_timestamp_seconds",
		"When the node last built its status, in Unix seconds. A value falling behind time() means the node's driver is stuck.",
		nil, nil)
)

// The label values of fixed sets.
var (
	memberStates = []string{api.MemberAlive, api.MemberSuspect, api.MemberDead, api.MemberLeft}
	jobStates    = []string{
		string(market.JobPending), string(market.JobBidding), string(market.JobPlacing),
		string(market.JobRunning), string(market.JobRerouting), string(market.JobSucceeded),
		string(market.JobFailed), string(market.JobCancelled), string(market.JobMoved),
	}
	nodeCardStates = []string{"free", "reserved", "running", "unhealthy"}
	reachabilities = []string{api.ReachabilityPublic, api.ReachabilityPrivate, api.ReachabilityUnknown}
)

func vendorLabel(v string) string {
	for _, k := range device.Vendors() {
		if v == string(k) {
			return v
		}
	}
	return OtherLabel
}

// statusCollector turns the latest api.Status into gauges at scrape time.
type statusCollector struct{ m *Metrics }

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{membersDesc, meshCardsDesc, nodeCardsDesc, jobsDesc, reachabilityDesc, warningsDesc, statusTimeDesc,
		imageLayerBytesDesc, imageLayersDesc, imageRootfsBytesDesc} {
		ch <- d
	}
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.status.Load()
	if st == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if !st.At.IsZero() {
		gauge(statusTimeDesc, float64(st.At.UnixNano())/1e9)
	}
	gauge(warningsDesc, float64(len(st.Warnings)))
	if im := st.Images; im != nil {
		sendCounter(ch, imageLayerBytesDesc, im.PeerBytes, "peer")
		sendCounter(ch, imageLayerBytesDesc, im.RegistryBytes, "registry")
		sendCounter(ch, imageLayersDesc, im.PeerLayers, "peer")
		sendCounter(ch, imageLayersDesc, im.RegistryLayers, "registry")
		sendCounter(ch, imageLayersDesc, im.CachedLayers, "cache")
		gauge(imageRootfsBytesDesc, float64(im.RootfsBytes))
	}

	reach := oneOf(st.Node.Reachability, reachabilities...)
	if reach == OtherLabel {
		reach = api.ReachabilityUnknown
	}
	for _, r := range reachabilities {
		v := 0.0
		if r == reach {
			v = 1
		}
		gauge(reachabilityDesc, v, r)
	}

	mc := st.Mesh.Members
	for i, n := range []int{mc.Alive, mc.Suspect, mc.Dead, mc.Left} {
		gauge(membersDesc, float64(n), memberStates[i])
	}

	jobs := map[string]int{}
	for _, s := range jobStates {
		jobs[s] = 0
	}
	for s, n := range st.Jobs.ByState {
		jobs[oneOf(s, jobStates...)] += n
	}
	for s, n := range jobs {
		gauge(jobsDesc, float64(n), s)
	}

	// Mesh cards: the largest models keep their own label.
	rows := slices.Clone(st.Mesh.ByModel)
	slices.SortStableFunc(rows, func(a, b api.Capacity) int { return cmp.Compare(b.Free+b.Reserved+b.Busy, a.Free+a.Reserved+a.Busy) })
	models := newBounded(maxModels)
	mesh := map[[3]string]int{}
	for _, r := range rows {
		model, vendor := models.value(r.Model), vendorLabel(r.Vendor)
		mesh[[3]string{model, vendor, "free"}] += r.Free
		mesh[[3]string{model, vendor, "reserved"}] += r.Reserved
		mesh[[3]string{model, vendor, "busy"}] += r.Busy
	}
	for k, n := range mesh {
		gauge(meshCardsDesc, float64(n), k[0], k[1], k[2])
	}

	// This node's cards: the states of a model with none are 0, so that a
	// card leaving a state shows as a drop, not as a gap.
	own := map[[3]string]int{}
	ownModels := newBounded(maxModels)
	for _, card := range st.Node.Cards {
		model, vendor := ownModels.value(card.Model), vendorLabel(string(card.Vendor))
		for _, s := range nodeCardStates {
			own[[3]string{model, vendor, s}] += 0
		}
		state := oneOf(card.State, nodeCardStates...)
		if !card.Healthy {
			state = "unhealthy"
		}
		own[[3]string{model, vendor, state}]++
	}
	for k, n := range own {
		gauge(nodeCardsDesc, float64(n), k[0], k[1], k[2])
	}
}
