package gossip

import (
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"
)

// Stats is a snapshot of a Gossip's counters since it started. Node exports
// them to Prometheus.
type Stats struct {
	// BytesIn and BytesOut are the encoded sizes of the gossipsub RPCs
	// received and queued for sending: messages and control (GRAFT, PRUNE,
	// IHAVE, IWANT, IDONTWANT) alike, without stream framing.
	BytesIn, BytesOut uint64
	// RPCsIn and RPCsOut count those RPCs; DroppedRPCs counts outbound RPCs
	// dropped because a peer's queue was full.
	RPCsIn, RPCsOut, DroppedRPCs uint64
	// Topics holds the counters of each topic this node joined, by name.
	Topics map[string]TopicStats
	// Sync counts the book syncs this node made and the ads they brought.
	Sync SyncStats
}

// SyncStats counts book syncs (Gossip.SyncFrom) and their ads by verdict.
type SyncStats struct {
	Syncs    uint64            // completed syncs
	Applied  uint64            // ads that were new to the Book
	Rejected map[string]uint64 // ads that ended a sync, by reason
	Ignored  map[string]uint64 // ads skipped: expired, stale, duplicate
}

// TopicStats counts the messages of one topic by verdict.
type TopicStats struct {
	// Published counts the messages this node authored.
	Published uint64
	// Accepted counts peers' messages that passed validation.
	Accepted uint64
	// Rejected and Ignored count peers' messages by reason (Reason.String).
	// Reasons that never occurred are absent.
	Rejected map[string]uint64
	Ignored  map[string]uint64
	// Duplicates counts further copies of messages already seen, which
	// gossipsub drops before validation. Some are normal: every node hears
	// a message from several mesh peers.
	Duplicates uint64
	// PayloadBytesIn counts the data bytes of the first copies of peers'
	// messages (those that reached validation).
	PayloadBytesIn uint64
	// MeshPeers is the number of peers in this node's gossipsub mesh for
	// the topic now: the peers it forwards every message to.
	MeshPeers int
}

// Rejects returns the total of Rejected.
func (t TopicStats) Rejects() uint64 { return sum(t.Rejected) }

// Ignores returns the total of Ignored.
func (t TopicStats) Ignores() uint64 { return sum(t.Ignored) }

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// counters are a Gossip's live counters. Every field is updated atomically
// from pubsub's goroutines; topics is built once and only read afterwards.
type counters struct {
	self                         peer.ID
	bytesIn, bytesOut            atomic.Uint64
	rpcsIn, rpcsOut, droppedRPCs atomic.Uint64
	topics                       map[string]*topicCounters
	syncs, syncApplied           atomic.Uint64
	syncByReason                 [numReasons]atomic.Uint64

	meshMu sync.Mutex
	mesh   map[string]map[peer.ID]struct{} // topic → mesh peers
	// meshUp is closed when the first topic mesh gets its first peer.
	meshUp     chan struct{}
	meshUpOnce sync.Once
}

type topicCounters struct {
	published, accepted   atomic.Uint64
	duplicates, payloadIn atomic.Uint64
	byReason              [numReasons]atomic.Uint64
}

func newCounters(self peer.ID, topics ...string) *counters {
	c := &counters{self: self, topics: map[string]*topicCounters{}, mesh: map[string]map[peer.ID]struct{}{}, meshUp: make(chan struct{})}
	for _, t := range topics {
		c.topics[t] = new(topicCounters)
		c.mesh[t] = map[peer.ID]struct{}{}
	}
	return c
}

// verdict records the verdict on a message of topic. local marks messages
// this node authored: an accepted one counts as published, a refused one
// is the caller's error and is not counted against peers.
func (c *counters) verdict(topic string, local bool, r Reason) {
	t := c.topics[topic]
	if t == nil {
		return
	}
	switch {
	case local && r == ReasonNone:
		t.published.Add(1)
	case local:
	case r == ReasonNone:
		t.accepted.Add(1)
	default:
		t.byReason[r].Add(1)
	}
}

// synced records the verdict on one ad of a book sync.
func (c *counters) synced(r Reason) {
	if r == ReasonNone {
		c.syncApplied.Add(1)
		return
	}
	c.syncByReason[r].Add(1)
}

func (c *counters) snapshot() Stats {
	s := Stats{
		BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(),
		RPCsIn: c.rpcsIn.Load(), RPCsOut: c.rpcsOut.Load(), DroppedRPCs: c.droppedRPCs.Load(),
		Topics: make(map[string]TopicStats, len(c.topics)),
		Sync: SyncStats{Syncs: c.syncs.Load(), Applied: c.syncApplied.Load(),
			Rejected: map[string]uint64{}, Ignored: map[string]uint64{}},
	}
	for r := Reason(1); r < numReasons; r++ {
		if n := c.syncByReason[r].Load(); n > 0 && r.Verdict() == Reject {
			s.Sync.Rejected[r.String()] = n
		} else if n > 0 {
			s.Sync.Ignored[r.String()] = n
		}
	}
	for name, t := range c.topics {
		ts := TopicStats{
			Published: t.published.Load(), Accepted: t.accepted.Load(),
			Duplicates: t.duplicates.Load(), PayloadBytesIn: t.payloadIn.Load(),
			Rejected: map[string]uint64{}, Ignored: map[string]uint64{},
		}
		for r := Reason(1); r < numReasons; r++ {
			n := t.byReason[r].Load()
			if n == 0 {
				continue
			}
			if r.Verdict() == Reject {
				ts.Rejected[r.String()] = n
			} else {
				ts.Ignored[r.String()] = n
			}
		}
		c.meshMu.Lock()
		ts.MeshPeers = len(c.mesh[name])
		c.meshMu.Unlock()
		s.Topics[name] = ts
	}
	return s
}

// tracer feeds counters from gossipsub's raw trace. Gossipsub calls it
// synchronously from its event loop, so every method only bumps atomics.
type tracer struct{ c *counters }

var _ pubsub.RawTracer = tracer{}

func (t tracer) RecvRPC(rpc *pubsub.RPC) {
	t.c.rpcsIn.Add(1)
	t.c.bytesIn.Add(uint64(proto.Size(&rpc.RPC)))
}

func (t tracer) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	t.c.rpcsOut.Add(1)
	t.c.bytesOut.Add(uint64(proto.Size(&rpc.RPC)))
}

func (t tracer) DropRPC(*pubsub.RPC, peer.ID) { t.c.droppedRPCs.Add(1) }

func (t tracer) ValidateMessage(msg *pubsub.Message) {
	if tc := t.c.topics[msg.GetTopic()]; tc != nil && msg.ReceivedFrom != t.c.self {
		tc.payloadIn.Add(uint64(len(msg.GetData())))
	}
}

func (t tracer) DuplicateMessage(msg *pubsub.Message) {
	if tc := t.c.topics[msg.GetTopic()]; tc != nil {
		tc.duplicates.Add(1)
	}
}

// RejectMessage counts what gossipsub drops before or around our
// validators. Our validators' own verdicts (validation failed / ignored)
// are counted by the validators, with a finer reason.
func (t tracer) RejectMessage(msg *pubsub.Message, reason string) {
	var r Reason
	switch reason {
	case pubsub.RejectValidationFailed, pubsub.RejectValidationIgnored:
		return
	case pubsub.RejectMissingSignature:
		r = ReasonUnsigned
	case pubsub.RejectInvalidSignature:
		r = ReasonBadSignature
	case pubsub.RejectValidationQueueFull, pubsub.RejectValidationThrottled,
		pubsub.RejectBlacklstedPeer, pubsub.RejectBlacklistedSource:
		r = ReasonThrottled
	default:
		r = ReasonProtocol
	}
	t.c.verdict(msg.GetTopic(), false, r)
}

// Graft, Prune and OnClosedOutboundStream keep the mesh membership: the
// router drops a disconnected peer from its meshes without a Prune trace.
func (t tracer) Graft(p peer.ID, topic string) {
	t.c.meshMu.Lock()
	defer t.c.meshMu.Unlock()
	if m := t.c.mesh[topic]; m != nil {
		m[p] = struct{}{}
		t.c.meshUpOnce.Do(func() { close(t.c.meshUp) })
	}
}

func (t tracer) Prune(p peer.ID, topic string) {
	t.c.meshMu.Lock()
	defer t.c.meshMu.Unlock()
	if m := t.c.mesh[topic]; m != nil {
		delete(m, p)
	}
}

func (t tracer) OnClosedOutboundStream(p peer.ID) {
	t.c.meshMu.Lock()
	defer t.c.meshMu.Unlock()
	for _, m := range t.c.mesh {
		delete(m, p)
	}
}

func (tracer) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (tracer) Join(string)                                          {}
func (tracer) Leave(string)                                         {}
func (tracer) DeliverMessage(*pubsub.Message)                       {}
func (tracer) ThrottlePeer(peer.ID)                                 {}
func (tracer) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (tracer) UndeliverableMessage(*pubsub.Message)                 {}
