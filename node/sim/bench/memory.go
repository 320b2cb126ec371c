package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/node/sim"
)

// Memory a run needs, measured on linux/amd64 with Go 1.25 (heap, stacks
// and the runtime's overhead, rounded up). gpumesh demo refuses a mesh by
// the same figures (sim.CheckDemoMemory).
const (
	// FullNodeMiB is one full node of the in-process mesh (node.Start on
	// mesh.SimNetwork: libp2p host, memberlist, gossipsub, market, bbolt)
	// plus its share of the links: sim.FullNodeMiB.
	FullNodeMiB = sim.FullNodeMiB
	// GossipNodeMiB is one node of the gossip-only mesh with about 20 links.
	GossipNodeMiB = 1
	// VirtualNodeKiB is one node of the virtual-time market mesh.
	VirtualNodeKiB = 64
	// baseMiB is the process itself.
	baseMiB = sim.BaseMiB
)

// ErrTooBig is wrapped by CheckMemory when a run would not fit
// (sim.ErrTooBig).
var ErrTooBig = sim.ErrTooBig

// EstimateMiB estimates the memory a run of cfg needs at its peak: the
// biggest of the meshes it builds (they are built one after another).
func EstimateMiB(cfg Config) uint64 {
	cfg = cfg.withDefaults()
	var peak uint64
	for _, s := range cfg.Scenarios {
		var need uint64
		switch s {
		case ScenarioPlacement, ScenarioThroughput, ScenarioScaleup, ScenarioFailover:
			need = uint64(cfg.Nodes) * FullNodeMiB
			if s == ScenarioPlacement || s == ScenarioScaleup {
				need += uint64(cfg.VirtualNodes) * VirtualNodeKiB / 1024
			}
		case ScenarioGossip:
			need = uint64(cfg.GossipNodes) * GossipNodeMiB
		case ScenarioQuality:
			need = uint64(cfg.QualityNodes) * VirtualNodeKiB / 1024
		}
		peak = max(peak, need)
	}
	return baseMiB + peak
}

// CheckMemory refuses a run whose estimate (EstimateMiB) is above 80% of
// the memory available now (sim.MemoryShare). Where the available memory
// is unknown (no /proc/meminfo) it lets the run go.
func CheckMemory(cfg Config) error {
	cfg = cfg.withDefaults()
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = Scenarios()
	}
	_, avail := memInfo()
	if avail == 0 {
		return nil
	}
	need := EstimateMiB(cfg)
	if !sim.Fits(need, avail) {
		return fmt.Errorf("%w: %d full nodes × %d MiB, %d gossip nodes × %d MiB: about %d MiB at the peak, and %d MiB is available (at most 80%% of it is used); ask for fewer nodes (at most about %d full nodes here)",
			ErrTooBig, cfg.Nodes, FullNodeMiB, cfg.GossipNodes, GossipNodeMiB, need, avail, sim.MaxFullNodes(avail))
	}
	return nil
}

// memInfo is the machine's total and available memory in MiB
// (sim.MemInfo).
func memInfo() (total, avail uint64) { return sim.MemInfo() }

// rssBytes is this process's resident set size (VmRSS of
// /proc/self/status), 0 where unknown.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
