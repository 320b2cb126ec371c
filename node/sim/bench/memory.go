package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory a run needs, measured on linux/amd64 with Go 1.25 (heap, stacks
// and the runtime's overhead, rounded up).
const (
	// FullNodeMiB is one full node of the in-process mesh (node.Start on
	// mesh.SimNetwork: libp2p host, memberlist, gossipsub, market, bbolt)
	// plus its share of the links.
	FullNodeMiB = 10
	// GossipNodeMiB is one node of the gossip-only mesh with about 20 links.
	GossipNodeMiB = 1
	// VirtualNodeKiB is one node of the virtual-time market mesh.
	VirtualNodeKiB = 64
	// baseMiB is the process itself.
	baseMiB = 100
)

// ErrTooBig is wrapped by CheckMemory when a run would not fit.
var ErrTooBig = errors.New("not enough memory")

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
// the memory available now. Where the available memory is unknown (no
// /proc/meminfo) it lets the run go.
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
	if float64(need) > 0.8*float64(avail) {
		return fmt.Errorf("%w: %d full nodes × %d MiB, %d gossip nodes × %d MiB: about %d MiB at the peak, and %d MiB is available (at most 80%% of it is used); ask for fewer nodes (at most about %d full nodes here)",
			ErrTooBig, cfg.Nodes, FullNodeMiB, cfg.GossipNodes, GossipNodeMiB, need, avail, maxFullNodes(avail))
	}
	return nil
}

func maxFullNodes(availMiB uint64) uint64 {
	budget := 0.8*float64(availMiB) - baseMiB
	if budget < 0 {
		return 0
	}
	return uint64(budget) / FullNodeMiB
}

// memInfo reads the machine's total and available memory in MiB from
// /proc/meminfo; zeros where it cannot.
func memInfo() (total, avail uint64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v / 1024
		case "MemAvailable:":
			avail = v / 1024
		}
	}
	return total, avail
}

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
