package mesh

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profile holds memberlist's timing and sizing: how often members probe each
// other, how long a failed probe stays a suspicion, how gossip spreads. It is
// a value; derive variants from the constructors below.
//
// Lifeguard (memberlist's local health awareness and suspicion confirmations)
// is on in every profile: AwarenessMaxMultiplier and SuspicionMaxTimeoutMult
// are above 1.
//
// Failure detection takes about ProbeInterval × (members probed in turn) to
// reach a dead node, then SuspicionMult × log10(N+1) × ProbeInterval of
// suspicion (shortened by confirmations from other members), then gossip.
type Profile struct {
	// Name identifies the profile in logs.
	Name string

	// ProbeInterval is the time between two probes of a random member.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before the
	// member is probed indirectly; set it near the 99th percentile of the
	// round-trip time between members.
	ProbeTimeout time.Duration
	// IndirectChecks is how many members are asked to probe a member that
	// did not answer a direct probe.
	IndirectChecks int
	// SuspicionMult scales the time a suspect member has to refute before
	// it is declared dead.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion time when no other member
	// confirms the suspicion (Lifeguard).
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier is how far a node that sees itself struggling
	// stretches its own probe interval (Lifeguard).
	AwarenessMaxMultiplier int

	// GossipInterval is the time between two rounds of gossip, each to
	// GossipNodes random members. Gossip is sent only while there is news.
	GossipInterval time.Duration
	GossipNodes    int
	// GossipToTheDeadTime is how long a dead member still receives gossip,
	// so that it can refute.
	GossipToTheDeadTime time.Duration
	// RetransmitMult scales how many times each piece of news is gossiped:
	// RetransmitMult × log10(N+1).
	RetransmitMult int
	// PushPullInterval is the base interval of full state exchanges with a
	// random member (anti-entropy); memberlist stretches it by log2 of the
	// member count above 32. Zero disables them.
	PushPullInterval time.Duration

	// StreamTimeout bounds a state exchange or fallback probe over a stream.
	StreamTimeout time.Duration
	// PacketSize is the largest packet memberlist builds. Packets travel in
	// frames over libp2p streams, not UDP datagrams, so they need not fit an
	// MTU: larger packets carry more news per gossip round. At most 64 KiB.
	PacketSize int
	// HandoffQueueDepth bounds memberlist's queue of received news waiting
	// to be applied; news beyond it is dropped (and comes again by gossip or
	// the next state exchange).
	HandoffQueueDepth int
	// Compress turns on memberlist's LZW compression of every packet and
	// stream. It saves a third of the bytes of state exchanges but little on
	// probes, and costs much CPU and allocation: off in every profile here.
	Compress bool
}

// FastProfile is the default: failure detection tuned for a mesh whose
// members answer within 100 ms, with Lifeguard on. Measured here on an
// in-memory mesh of 100 nodes sharing two cores, a crashed node is seen
// dead by all others in 2.8 s median, p90 3.2 s (in the same run:
// memberlist's LAN defaults 10.9 s; the suspicion multiplier of 3 this
// profile had before, 1.7 s; `GPUMESH_BENCH_KILLS=8 go test -run '^$'
// -bench CrashDetection -benchtime 1x ./mesh/`).
//
// Its timings: probe every 200 ms, probe timeout 100 ms, 3 indirect checks,
// suspicion multiplier 5. memberlist expects SuspicionMult − 2
// confirmations, so a suspect is declared dead at the base suspicion time
// (5 × log10(N+1) × 200 ms: 1.6 s at 40 members, 2 s at 100) only once
// three other members suspect it too, and has up to 6× that to refute
// while fewer do. A crashed member is suspected by every member that
// probes it, so the confirmations come within a few probe rounds; a member
// slow to answer some probers (its machine or theirs starved of CPU) is
// not declared dead for that alone.
//
// The multiplier was 2, then 3. With 2 memberlist expects no confirmation:
// on 2 cores shared by 40 node processes a burst of placements made members
// flap by the hundreds, and the flapping fed the load. With 3, one
// confirmation brought a suspect to the 1 s base time, and under the same
// burst (`gpumesh bench --scenario burst`) 24–567 members were still
// declared dead from the burst on, 1–70 of them after the last cancel, in
// four runs; each such death moves the jobs that member coordinates. With
// 5: 0–46 from the burst on, and none after the last cancel, in five runs
// interleaved with those (with 4: 5–353, and none after the last cancel,
// in four).
//
// Gossip news every 100 ms to 3 members (a suspicion reaches 100 members in
// about half a second), news retransmitted 4 × log10(N+1) times, full state
// exchange every 60 s (stretched with size: 6 min at 1000 members; each
// carries the whole member list, so it dominates idle traffic in large
// meshes), 16 KiB packets, no compression. Gossip rounds with no news send
// nothing, so the shorter gossip interval costs only when something
// happens.
func FastProfile() Profile {
	return Profile{
		Name:                    "fast",
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           5,
		SuspicionMaxTimeoutMult: 6,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             3,
		GossipToTheDeadTime:     30 * time.Second,
		RetransmitMult:          4,
		PushPullInterval:        60 * time.Second,
		StreamTimeout:           10 * time.Second,
		PacketSize:              16 << 10,
		HandoffQueueDepth:       4096,
	}
}

// LANProfile is memberlist's DefaultLANConfig timing (probe every 1 s, probe
// timeout 500 ms, suspicion multiplier 4) with the mesh's packet size. It is
// the baseline the fast profile is measured against.
func LANProfile() Profile {
	return fromMemberlist("lan", memberlist.DefaultLANConfig())
}

// WANProfile is memberlist's DefaultWANConfig timing (probe every 5 s, probe
// timeout 3 s, suspicion multiplier 6), for members far apart.
func WANProfile() Profile {
	return fromMemberlist("wan", memberlist.DefaultWANConfig())
}

func fromMemberlist(name string, c *memberlist.Config) Profile {
	return Profile{
		Name:                    name,
		ProbeInterval:           c.ProbeInterval,
		ProbeTimeout:            c.ProbeTimeout,
		IndirectChecks:          c.IndirectChecks,
		SuspicionMult:           c.SuspicionMult,
		SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		AwarenessMaxMultiplier:  c.AwarenessMaxMultiplier,
		GossipInterval:          c.GossipInterval,
		GossipNodes:             c.GossipNodes,
		GossipToTheDeadTime:     c.GossipToTheDeadTime,
		RetransmitMult:          c.RetransmitMult,
		PushPullInterval:        c.PushPullInterval,
		StreamTimeout:           c.TCPTimeout,
		PacketSize:              FastProfile().PacketSize,
		HandoffQueueDepth:       FastProfile().HandoffQueueDepth,
	}
}

// maxPacketSize is the largest Profile.PacketSize: memberlist's compound
// messages count part lengths in 16 bits.
const maxPacketSize = 64 << 10

// Validate reports the first field out of range.
func (p Profile) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(p.ProbeInterval > 0, "profile %q: ProbeInterval %v must be positive", p.Name, p.ProbeInterval)
	check(p.ProbeTimeout > 0 && p.ProbeTimeout < p.ProbeInterval,
		"profile %q: ProbeTimeout %v must be positive and below ProbeInterval %v", p.Name, p.ProbeTimeout, p.ProbeInterval)
	check(p.IndirectChecks >= 0, "profile %q: IndirectChecks %d must not be negative", p.Name, p.IndirectChecks)
	check(p.SuspicionMult >= 1, "profile %q: SuspicionMult %d must be at least 1", p.Name, p.SuspicionMult)
	check(p.SuspicionMaxTimeoutMult >= 1, "profile %q: SuspicionMaxTimeoutMult %d must be at least 1", p.Name, p.SuspicionMaxTimeoutMult)
	check(p.AwarenessMaxMultiplier >= 1, "profile %q: AwarenessMaxMultiplier %d must be at least 1", p.Name, p.AwarenessMaxMultiplier)
	check(p.GossipInterval > 0, "profile %q: GossipInterval %v must be positive", p.Name, p.GossipInterval)
	check(p.GossipNodes >= 1, "profile %q: GossipNodes %d must be at least 1", p.Name, p.GossipNodes)
	check(p.GossipToTheDeadTime >= 0, "profile %q: GossipToTheDeadTime %v must not be negative", p.Name, p.GossipToTheDeadTime)
	check(p.RetransmitMult >= 1, "profile %q: RetransmitMult %d must be at least 1", p.Name, p.RetransmitMult)
	check(p.PushPullInterval >= 0, "profile %q: PushPullInterval %v must not be negative", p.Name, p.PushPullInterval)
	check(p.StreamTimeout > 0, "profile %q: StreamTimeout %v must be positive", p.Name, p.StreamTimeout)
	check(p.PacketSize >= 1024 && p.PacketSize <= maxPacketSize,
		"profile %q: PacketSize %d must be between 1024 and %d", p.Name, p.PacketSize, maxPacketSize)
	check(p.HandoffQueueDepth >= 16, "profile %q: HandoffQueueDepth %d must be at least 16", p.Name, p.HandoffQueueDepth)
	return errors.Join(errs...)
}

// apply copies the profile onto a memberlist configuration.
func (p Profile) apply(c *memberlist.Config) {
	c.ProbeInterval = p.ProbeInterval
	c.ProbeTimeout = p.ProbeTimeout
	c.IndirectChecks = p.IndirectChecks
	c.SuspicionMult = p.SuspicionMult
	c.SuspicionMaxTimeoutMult = p.SuspicionMaxTimeoutMult
	c.AwarenessMaxMultiplier = p.AwarenessMaxMultiplier
	c.GossipInterval = p.GossipInterval
	c.GossipNodes = p.GossipNodes
	c.GossipToTheDeadTime = p.GossipToTheDeadTime
	c.RetransmitMult = p.RetransmitMult
	c.PushPullInterval = p.PushPullInterval
	c.TCPTimeout = p.StreamTimeout
	c.UDPBufferSize = p.PacketSize
	c.HandoffQueueDepth = p.HandoffQueueDepth
	c.EnableCompression = p.Compress
}
