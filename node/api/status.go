package api

import (
	"cmp"
	"slices"
	"time"
)

// Status is the body of GET /v1/status: the operator's one screen, the mesh
// as this node sees it at At. The node builds it; `gpumesh status` and the
// dashboard render it; node/metrics turns it into gauges.
type Status struct {
	At     time.Time    `json:"at"`
	Node   NodeStatus   `json:"node"`
	Mesh   MeshStatus   `json:"mesh"`
	Jobs   JobsStatus   `json:"jobs"`
	Gossip GossipStatus `json:"gossip"`
	// Earnings is what this node's cards earned; nil from a node that
	// does not count it.
	Earnings *Earnings `json:"earnings,omitempty"`
	// Images is what this node did for jobs in images; nil from a node
	// that keeps no image cache.
	Images *ImagesStatus `json:"images,omitempty"`
	// Warnings are short sentences an operator should act on ("card
	// GPU-1234 unhealthy: Xid 79", "clock skew: ...", "peer 12D3… flapping:
	// 6 state changes in 10m"). Empty, never null, when all is well.
	Warnings []string `json:"warnings"`
}

// ImagesStatus is a node's images: whether it runs them, and where the
// layers it pulled came from.
type ImagesStatus struct {
	// Runtime is the OCI runtime that runs jobs in images; "" when this
	// node runs none, NoImages then says why.
	Runtime  string `json:"runtime,omitempty"`
	NoImages string `json:"no_images,omitempty"`
	// PeerBytes and RegistryBytes are the layer bytes fetched from peers
	// and from registries (or their mirrors); PeerLayers and
	// RegistryLayers count those layers, CachedLayers the layers a pull
	// found stored already.
	PeerBytes      int64 `json:"peer_bytes"`
	RegistryBytes  int64 `json:"registry_bytes"`
	PeerLayers     int64 `json:"peer_layers"`
	RegistryLayers int64 `json:"registry_layers"`
	CachedLayers   int64 `json:"cached_layers"`
	// Pulls counts images pulled; Unpacks, root file systems unpacked;
	// RootfsBytes is the size of those kept.
	Pulls       int64 `json:"pulls"`
	Unpacks     int64 `json:"unpacks"`
	RootfsBytes int64 `json:"rootfs_bytes"`
	// Cards says, per vendor of the node's cards (simulated ones aside),
	// how they enter jobs in images.
	Cards []CardPath `json:"cards,omitempty"`
}

// CardPath is how a vendor's cards enter jobs in images on a node.
type CardPath struct {
	Vendor string `json:"vendor"`
	// Via is "cdi" (the supplier's CDI specs) or "built-in" (gpumesh's
	// rules for the vendor).
	Via string `json:"via"`
	// Detail is, via CDI, the devices and the spec files they come from;
	// built in, why not via CDI.
	Detail string `json:"detail"`
}

// The values of NodeStatus.Reachability, AutoNAT's verdict on this node.
const (
	ReachabilityUnknown = "unknown" // not determined yet (the default)
	ReachabilityPublic  = "public"  // peers can dial this node directly
	ReachabilityPrivate = "private" // behind NAT: reached through relays or hole punching
)

// NodeStatus is this node.
type NodeStatus struct {
	PeerID  string `json:"peer_id"`
	Version string `json:"version"`
	// StartedAt is when the node started; UptimeSeconds is At − StartedAt.
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Reachability is one of the Reachability constants; "" reads as
	// unknown.
	Reachability string   `json:"reachability"`
	Region       string   `json:"region,omitempty"`
	Addrs        []string `json:"addrs,omitempty"`
	// Coordinator says whether this node coordinates jobs.
	Coordinator bool `json:"coordinator"`
	// Cards are this node's cards, their health and what they do.
	Cards []Card `json:"cards"`
}

// The values of a member's state (MeshStatus.Members, Peer.State).
const (
	MemberAlive   = "alive"
	MemberSuspect = "suspect"
	MemberDead    = "dead"
	MemberLeft    = "left"
)

// MemberCounts counts the mesh's members by state, this node included.
type MemberCounts struct {
	Alive   int `json:"alive"`
	Suspect int `json:"suspect"`
	Dead    int `json:"dead"`
	Left    int `json:"left"`
}

// Total is the number of members in every state.
func (m MemberCounts) Total() int { return m.Alive + m.Suspect + m.Dead + m.Left }

// Add counts one member in state (one of the Member constants); it reports
// false, counting nothing, for any other state.
func (m *MemberCounts) Add(state string) bool {
	switch state {
	case MemberAlive:
		m.Alive++
	case MemberSuspect:
		m.Suspect++
	case MemberDead:
		m.Dead++
	case MemberLeft:
		m.Left++
	default:
		return false
	}
	return true
}

// Capacity counts cards by state: those of one model (Model set) or one
// vendor (Model empty), or all of them.
type Capacity struct {
	Model    string `json:"model,omitempty"`
	Vendor   string `json:"vendor,omitempty"`
	Total    int    `json:"total"` // Free + Reserved + Busy
	Free     int    `json:"free"`
	Reserved int    `json:"reserved"` // held under a bid's lease
	Busy     int    `json:"busy"`
}

func (c *Capacity) add(o Capacity) {
	c.Free += o.Free
	c.Reserved += o.Reserved
	c.Busy += o.Busy
	c.Total = c.Free + c.Reserved + c.Busy
}

// RegionCount is the members and cards of one region.
type RegionCount struct {
	Region  string `json:"region"` // "" for members that name none
	Members int    `json:"members"`
	Cards   int    `json:"cards"`
}

// MeshStatus is the mesh as this node sees it: members from the membership
// view, cards from the capacity ads in its book.
type MeshStatus struct {
	Members MemberCounts `json:"members"`
	// Cards totals every advertised card; ByModel and ByVendor break it
	// down, sorted by key.
	Cards    Capacity      `json:"cards"`
	ByModel  []Capacity    `json:"by_model"`
	ByVendor []Capacity    `json:"by_vendor"`
	Regions  []RegionCount `json:"regions"`
}

// AddCards counts c (a group of cards of one model and vendor) into Cards,
// ByModel and ByVendor, keeping the rows sorted.
func (m *MeshStatus) AddCards(c Capacity) {
	m.Cards.add(c)
	i, found := slices.BinarySearchFunc(m.ByModel, c, func(a, b Capacity) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Vendor, b.Vendor))
	})
	if !found {
		m.ByModel = slices.Insert(m.ByModel, i, Capacity{Model: c.Model, Vendor: c.Vendor})
	}
	m.ByModel[i].add(c)
	j, found := slices.BinarySearchFunc(m.ByVendor, c.Vendor, func(a Capacity, v string) int {
		return cmp.Compare(a.Vendor, v)
	})
	if !found {
		m.ByVendor = slices.Insert(m.ByVendor, j, Capacity{Vendor: c.Vendor})
	}
	m.ByVendor[j].add(Capacity{Free: c.Free, Reserved: c.Reserved, Busy: c.Busy})
}

// AddRegion counts one member of region holding cards cards, keeping Regions
// sorted.
func (m *MeshStatus) AddRegion(region string, cards int) {
	i, found := slices.BinarySearchFunc(m.Regions, region, func(r RegionCount, s string) int {
		return cmp.Compare(r.Region, s)
	})
	if !found {
		m.Regions = slices.Insert(m.Regions, i, RegionCount{Region: region})
	}
	m.Regions[i].Members++
	m.Regions[i].Cards += cards
}

// JobsStatus is the jobs this node coordinates and how fast it places them.
type JobsStatus struct {
	// ByState counts the jobs this node coordinates by market.JobState
	// ("running": 3); summed over the mesh's nodes, it counts every job
	// once.
	ByState   map[string]int  `json:"by_state"`
	Reroutes  RerouteStatus   `json:"reroutes"`
	Placement PlacementStatus `json:"placement"`
}

// RerouteStatus is the shares moved off lost peers in the last hour.
type RerouteStatus struct {
	WindowSeconds float64 `json:"window_seconds"` // 3600
	Count         int     `json:"count"`
	// MedianSeconds is the median time from a share's loss to its running
	// again; 0 when Count is 0.
	MedianSeconds float64 `json:"median_seconds"`
}

// PlacementStatus is how long jobs took from submission to running, over the
// last five minutes.
type PlacementStatus struct {
	WindowSeconds float64 `json:"window_seconds"` // 300
	Count         int     `json:"count"`
	// P50Seconds and P99Seconds are 0 when Count is 0.
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
}

// GossipStatus is this node's gossip traffic. Rates are per second over the
// last minute; counts are since the node started.
type GossipStatus struct {
	// MeshPeers is the number of peers in this node's gossipsub mesh
	// (the largest over its topics).
	MeshPeers         int     `json:"mesh_peers"`
	MessagesPerSecond float64 `json:"messages_per_second"`
	BytesInPerSecond  float64 `json:"bytes_in_per_second"`
	BytesOutPerSecond float64 `json:"bytes_out_per_second"`
	// Rejected counts peers' messages rejected (blamed on the sender), by
	// reason; Ignored those dropped without blame (expired, from the future,
	// stale). Reasons that never occurred are absent.
	Rejected map[string]uint64 `json:"rejected"`
	Ignored  map[string]uint64 `json:"ignored"`
}
