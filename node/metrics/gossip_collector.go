package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/gossip"
)

// Bounds on the gossip label values. Topics are the few this node joins and
// reasons an enum, so the bounds only guard against a future bug.
const (
	maxTopics  = 16
	maxReasons = 32
)

var (
	gossipMessagesDesc = prometheus.NewDesc("gpumesh_gossip_messages_total",
		"Gossip messages by topic, verdict (published: authored here; accepted, rejected, ignored: peers' messages by validation; duplicate: further copies dropped before validation) and reason (why rejected or ignored; none otherwise).",
		[]string{"topic", "verdict", "reason"}, nil)
	gossipMeshPeersDesc = prometheus.NewDesc("gpumesh_gossip_mesh_peers",
		"Peers in this node's gossipsub mesh, by topic.",
		[]string{"topic"}, nil)
	gossipInDesc = prometheus.NewDesc("gpumesh_gossip_received_bytes_total",
		"Bytes of gossipsub RPCs received (messages and control), without stream framing.",
		nil, nil)
	gossipOutDesc = prometheus.NewDesc("gpumesh_gossip_sent_bytes_total",
		"Bytes of gossipsub RPCs queued for sending (messages and control), without stream framing.",
		nil, nil)
	gossipDroppedDesc = prometheus.NewDesc("gpumesh_gossip_dropped_rpcs_total",
		"Outbound gossipsub RPCs dropped because a peer's queue was full.",
		nil, nil)
	gossipSyncsDesc = prometheus.NewDesc("gpumesh_gossip_book_syncs_total",
		"Book syncs this node made (pulling a peer's capacity ads on joining).",
		nil, nil)
	networkInDesc = prometheus.NewDesc("gpumesh_network_received_bytes_total",
		"Bytes this node's host received on every protocol.",
		nil, nil)
	networkOutDesc = prometheus.NewDesc("gpumesh_network_sent_bytes_total",
		"Bytes this node's host sent on every protocol.",
		nil, nil)
)

// gossipCollector reads the gossip counters at scrape time.
type gossipCollector struct{ stats func() gossip.Stats }

func (c gossipCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gossipMessagesDesc, gossipMeshPeersDesc, gossipInDesc, gossipOutDesc, gossipDroppedDesc, gossipSyncsDesc} {
		ch <- d
	}
}

func (c gossipCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	sendCounter(ch, gossipInDesc, s.BytesIn)
	sendCounter(ch, gossipOutDesc, s.BytesOut)
	sendCounter(ch, gossipDroppedDesc, s.DroppedRPCs)
	sendCounter(ch, gossipSyncsDesc, s.Sync.Syncs)

	topics := newBounded(maxTopics)
	reasons := newBounded(maxReasons)
	msgs := map[[3]string]uint64{}
	peers := map[string]int{}
	for name, t := range s.Topics {
		topic := topics.value(name)
		msgs[[3]string{topic, "published", "none"}] += t.Published
		msgs[[3]string{topic, "accepted", "none"}] += t.Accepted
		msgs[[3]string{topic, "duplicate", "none"}] += t.Duplicates
		for r, n := range t.Rejected {
			msgs[[3]string{topic, "rejected", reasons.value(r)}] += n
		}
		for r, n := range t.Ignored {
			msgs[[3]string{topic, "ignored", reasons.value(r)}] += n
		}
		peers[topic] += t.MeshPeers
	}
	for k, n := range msgs {
		sendCounter(ch, gossipMessagesDesc, n, k[0], k[1], k[2])
	}
	for topic, n := range peers {
		ch <- prometheus.MustNewConstMetric(gossipMeshPeersDesc, prometheus.GaugeValue, float64(n), topic)
	}
}

// networkCollector reads the host's byte counters at scrape time.
type networkCollector struct{ bytes func() (in, out uint64) }

func (c networkCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- networkInDesc
	ch <- networkOutDesc
}

func (c networkCollector) Collect(ch chan<- prometheus.Metric) {
	in, out := c.bytes()
	sendCounter(ch, networkInDesc, in)
	sendCounter(ch, networkOutDesc, out)
}
