package mesh

import (
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// byteCounter counts the bytes read and written on every stream of the
// host (every protocol: memberlist, gossip, the market's streams, data).
// It is libp2p's bandwidth Reporter reduced to two atomic totals: libp2p's
// own BandwidthCounter keeps per-peer and per-protocol rate meters on a
// global sweeper goroutine, which one node has no use for.
type byteCounter struct{ in, out atomic.Int64 }

var _ metrics.Reporter = (*byteCounter)(nil)

func (b *byteCounter) LogSentMessage(n int64)                                { b.out.Add(n) }
func (b *byteCounter) LogRecvMessage(n int64)                                { b.in.Add(n) }
func (b *byteCounter) LogSentMessageStream(int64, protocol.ID, peer.ID)      {}
func (b *byteCounter) LogRecvMessageStream(int64, protocol.ID, peer.ID)      {}
func (b *byteCounter) GetBandwidthForPeer(peer.ID) metrics.Stats             { return metrics.Stats{} }
func (b *byteCounter) GetBandwidthForProtocol(protocol.ID) metrics.Stats     { return metrics.Stats{} }
func (b *byteCounter) GetBandwidthByPeer() map[peer.ID]metrics.Stats         { return nil }
func (b *byteCounter) GetBandwidthByProtocol() map[protocol.ID]metrics.Stats { return nil }
func (b *byteCounter) Reset()                                                {}
func (b *byteCounter) TrimIdle(time.Time)                                    {}
func (b *byteCounter) GetBandwidthTotals() metrics.Stats {
	return metrics.Stats{TotalIn: b.in.Load(), TotalOut: b.out.Load()}
}

// Bytes returns the bytes this node's host has received and sent on
// every stream since it started; 0 on a host the mesh did not build.
func (m *Mesh) Bytes() (in, out uint64) {
	if m.bytes == nil {
		return 0, 0
	}
	return uint64(m.bytes.in.Load()), uint64(m.bytes.out.Load())
}
