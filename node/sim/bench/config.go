package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// The scenarios, in the order a run takes them.
const (
	ScenarioPlacement  = "placement"
	ScenarioThroughput = "throughput"
	ScenarioScaleup    = "scaleup"
	ScenarioFailover   = "failover"
	ScenarioGossip     = "gossip"
	ScenarioQuality    = "quality"
)

// Scenarios lists every scenario in the order a run takes them.
func Scenarios() []string {
	return []string{ScenarioPlacement, ScenarioThroughput, ScenarioScaleup, ScenarioFailover, ScenarioGossip, ScenarioQuality}
}

// Defaults of Config.
const (
	// DefaultNodes is the size of the in-process mesh of full nodes: what
	// starts and forms in well under a minute on 2 cores.
	DefaultNodes = 100
	// DefaultCardsPerNode is how many cards each supplier of the meshes
	// holds (the 1000-node × 4-card mesh).
	DefaultCardsPerNode = 4
	// DefaultVirtualNodes is the size of the virtual-time market mesh.
	DefaultVirtualNodes = 1000
	// DefaultGossipNodes is the size of the gossip mesh.
	DefaultGossipNodes = 1000
	// DefaultQualityNodes and DefaultQualityJobs size the quality
	// workload: jobs placed one after the other on one mesh, each keeping
	// its cards, so later jobs compete for what is left.
	DefaultQualityNodes = 200
	DefaultQualityJobs  = 150
	// MaxNodes bounds Nodes, GossipNodes, VirtualNodes and QualityNodes
	// whatever the memory (CheckMemory refuses less where it can tell).
	MaxNodes = 10000
)

// Config configures Run. Zero values take the defaults stated.
type Config struct {
	// Scenarios to run, in any order (they run in Scenarios() order).
	// Default: all.
	Scenarios []string `json:"scenarios,omitempty"`
	// Nodes is the number of full nodes (node.Start on mesh.SimNetwork) of
	// the in-process mesh used for real-time figures, controllers
	// included. Default 100.
	Nodes int `json:"nodes"`
	// CardsPerNode is each supplier's card count. Default 4.
	CardsPerNode int `json:"cards_per_node"`
	// VirtualNodes is the size of the virtual-time market mesh. Default 1000.
	VirtualNodes int `json:"virtual_nodes"`
	// GossipNodes is the size of the gossip-only mesh. Default 1000.
	GossipNodes int `json:"gossip_nodes"`
	// QualityNodes and QualityJobs size the quality scenario. Default 200
	// and 150.
	QualityNodes int `json:"quality_nodes"`
	QualityJobs  int `json:"quality_jobs"`
	// Samples scales how many times each figure is measured: 1 (the
	// default) takes the counts each scenario states; tests pass less
	// through Tiny.
	Samples float64 `json:"samples"`
	// GossipWindow is how long idle gossip traffic is measured, in
	// seconds. Default 20.
	GossipWindow float64 `json:"gossip_window_s"`
	// Seed decides the suppliers, prices and workloads. Default 1.
	Seed uint64 `json:"seed"`
	// Dir holds the full nodes' data; default a temporary directory,
	// removed at the end.
	Dir string `json:"-"`
	// Progress, when set, receives a line on what the run is doing now.
	Progress func(string) `json:"-"`
	// Logger receives the nodes' logs. Default: discard.
	Logger *slog.Logger `json:"-"`
}

// Tiny returns a configuration for tests: every scenario on meshes of a
// few nodes, with few samples and a short traffic window.
func Tiny() Config {
	return Config{Nodes: 8, VirtualNodes: 40, GossipNodes: 12, QualityNodes: 30, QualityJobs: 20, Samples: 0.2, GossipWindow: 1}
}

// ErrUnknownScenario is wrapped by ParseScenarios for a name it does not know.
var ErrUnknownScenario = errors.New("unknown scenario")

// ParseScenarios checks names (each may also be a comma-separated list)
// and returns them in run order without repeats. No name means all.
func ParseScenarios(names []string) ([]string, error) {
	want := map[string]bool{}
	for _, arg := range names {
		for _, n := range strings.Split(arg, ",") {
			n = strings.TrimSpace(strings.ToLower(n))
			if n == "" {
				continue
			}
			if n == "all" {
				for _, s := range Scenarios() {
					want[s] = true
				}
				continue
			}
			if !slices.Contains(Scenarios(), n) {
				return nil, fmt.Errorf("%w %q: known are %s (or all)", ErrUnknownScenario, n, strings.Join(Scenarios(), ", "))
			}
			want[n] = true
		}
	}
	var out []string
	for _, s := range Scenarios() {
		if len(want) == 0 || want[s] {
			out = append(out, s)
		}
	}
	return out, nil
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Nodes, DefaultNodes)
	def(&c.CardsPerNode, DefaultCardsPerNode)
	def(&c.VirtualNodes, DefaultVirtualNodes)
	def(&c.GossipNodes, DefaultGossipNodes)
	def(&c.QualityNodes, DefaultQualityNodes)
	def(&c.QualityJobs, DefaultQualityJobs)
	if c.Samples == 0 {
		c.Samples = 1
	}
	if c.GossipWindow == 0 {
		c.GossipWindow = 20
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// Validate checks the configuration after defaults: sizes must be
// positive, the full-node mesh at least 4 nodes (3 controllers and a
// supplier), and every scenario known.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Nodes < 4 || c.Nodes > MaxNodes:
		return fmt.Errorf("bench: %d nodes: want 4 (3 coordinators and a supplier) to %d", c.Nodes, MaxNodes)
	case c.CardsPerNode < 1 || c.CardsPerNode > 16:
		return fmt.Errorf("bench: %d cards per node: want 1 to 16", c.CardsPerNode)
	case c.VirtualNodes < 2 || c.GossipNodes < 2 || c.QualityNodes < 2:
		return fmt.Errorf("bench: virtual, gossip and quality meshes need at least 2 nodes")
	case c.VirtualNodes > MaxNodes || c.GossipNodes > MaxNodes || c.QualityNodes > MaxNodes:
		return fmt.Errorf("bench: virtual, gossip and quality meshes take at most %d nodes", MaxNodes)
	case c.QualityJobs < 1:
		return fmt.Errorf("bench: %d quality jobs: want at least 1", c.QualityJobs)
	case !(c.Samples > 0) || !(c.GossipWindow > 0):
		return fmt.Errorf("bench: samples and gossip window must be more than 0")
	}
	_, err := ParseScenarios(c.Scenarios)
	return err
}

// samples scales a count by Config.Samples, to at least min.
func (c Config) samples(n, least int) int {
	return max(int(float64(n)*c.Samples+0.5), least)
}

func (c Config) has(s string) bool {
	return len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, s)
}
