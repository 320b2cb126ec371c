package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/mesh"
)

var (
	membershipPacketsDesc = prometheus.NewDesc("gpumesh_membership_packets_total",
		"Membership protocol packets (probes, acks, gossip of member state) by direction: sent, or received and handed to the protocol.",
		[]string{"direction"}, nil)
	membershipBytesDesc = prometheus.NewDesc("gpumesh_membership_bytes_total",
		"Bytes of membership protocol packets by direction, and of its streams (state exchanges, fallback probes) as direction=stream.",
		[]string{"direction"}, nil)
	membershipDroppedDesc = prometheus.NewDesc("gpumesh_membership_dropped_packets_total",
		"Membership packets dropped: direction=send when a peer's send queue was full or it could not be reached, direction=receive when the protocol had not taken the packets before them. A member's news that every copy of was dropped here reaches this node only at the next state exchange.",
		[]string{"direction"}, nil)
	membershipMalformedDesc = prometheus.NewDesc("gpumesh_membership_malformed_frames_total",
		"Membership packet streams from peers reset for bad framing.",
		nil, nil)
	membershipDialFailuresDesc = prometheus.NewDesc("gpumesh_membership_dial_failures_total",
		"Connections to members that the membership protocol failed to open.",
		nil, nil)
	membershipMetaRedoneDesc = prometheus.NewDesc("gpumesh_membership_metadata_updates_redone_total",
		"Updates of this node's metadata (cards, coordinator flag) that memberlist dropped, because a refutation took a newer incarnation with the old metadata, and that were made again.",
		nil, nil)
)

// membershipCollector reads the membership transport's counters at scrape
// time.
type membershipCollector struct{ stats func() mesh.Stats }

func (c membershipCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{membershipPacketsDesc, membershipBytesDesc, membershipDroppedDesc, membershipMalformedDesc, membershipDialFailuresDesc, membershipMetaRedoneDesc} {
		ch <- d
	}
}

func (c membershipCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	sendCounter(ch, membershipPacketsDesc, s.PacketsSent, "sent")
	sendCounter(ch, membershipPacketsDesc, s.PacketsReceived, "received")
	sendCounter(ch, membershipBytesDesc, s.BytesSent, "sent")
	sendCounter(ch, membershipBytesDesc, s.BytesReceived, "received")
	sendCounter(ch, membershipBytesDesc, s.StreamBytes, "stream")
	sendCounter(ch, membershipDroppedDesc, s.SendDrops, "send")
	sendCounter(ch, membershipDroppedDesc, s.ReceiveDrops, "receive")
	sendCounter(ch, membershipMalformedDesc, s.Malformed)
	sendCounter(ch, membershipDialFailuresDesc, s.DialFailures)
	sendCounter(ch, membershipMetaRedoneDesc, s.MetaUpdatesRedone)
}
