package node

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/executor"
	ma "github.com/multiformats/go-multiaddr"
)

// What a job may use on this node besides its cards. The job's spec
// declares memory, pids and CPU weight (market.Resources); the supplier's
// Policy caps them (a job declaring more is not bid for, see market.Policy);
// attemptOf fills what the spec leaves zero from the caps (jobCaps) and the
// executor enforces the result in sandbox mode.

// Defaults of the supplier's caps that gpumesh node starts with.
const (
	// DefaultMaxJobPids is the pids cap gpumesh node gives jobs by
	// default: the executor's own default, so that a job declaring none
	// gets it and one declaring more is refused.
	DefaultMaxJobPids = executor.DefaultPids
	// jobMemoryReserve* bound what AutoJobMemory keeps for the system and
	// the node: a tenth of the machine, within these.
	jobMemoryReserveMin = 1 << 30
	jobMemoryReserveMax = 16 << 30
)

// errHostMemoryUnknown is AutoJobMemory's error where the machine's memory
// cannot be read.
var errHostMemoryUnknown = errors.New("this machine's memory cannot be read here (Linux only)")

// AutoJobMemory is the memory cap gpumesh node gives each job by default
// (--max-job-memory auto): this machine's physical memory less a reserve
// for the system and the node of a tenth of it, at least 1 GiB and at most
// 16 GiB. A job that declares no memory gets it as its limit, so an
// out-of-memory job is killed inside its cgroup before the node runs
// short. (Jobs together may still exceed the machine; then the kernel
// kills a job first, as the executor marks them, not the node.) It fails
// where the memory cannot be read (off Linux), where the sandbox that
// would enforce it does not exist either.
func AutoJobMemory() (int64, error) {
	total, err := hostMemory()
	if err != nil {
		return 0, err
	}
	return jobMemoryOf(total), nil
}

// jobMemoryOf is AutoJobMemory for a machine of total bytes; a machine too
// small for the reserve gives half its memory, never less than the least
// a job may have.
func jobMemoryOf(total int64) int64 {
	reserve := min(max(total/10, jobMemoryReserveMin), jobMemoryReserveMax)
	capped := total - reserve
	if capped < total/2 {
		capped = total / 2
	}
	capped &^= 1<<20 - 1 // whole MiB
	return max(capped, market.MinJobMemoryBytes)
}

// jobCaps is the supplier's policy as the executor applies it: the
// resource caps. The network is not judged here: the market's
// Policy.MaxNetwork judged it before the node bid.
func jobCaps(p market.Policy) executor.Policy {
	return executor.Policy{
		MaxMemoryBytes: p.MaxMemoryBytes,
		MaxPids:        p.MaxPids,
		MaxCPUWeight:   p.MaxCPUWeight,
		Networks:       []executor.NetworkMode{executor.NetworkNone, executor.NetworkEgress, executor.NetworkHost},
	}
}

// limitsOf is what an attempt of e may use: the spec's declared resources
// and network, its cards' device nodes, capped by the supplier's policy.
func (n *Node) limitsOf(e market.Execution, devices []string) (executor.Limits, error) {
	declared := executor.Limits{
		MemoryBytes: e.Exec.MemoryBytes,
		Pids:        e.Exec.Pids,
		CPUWeight:   e.Exec.CPUWeight,
		Network:     executor.NetworkMode(e.Exec.Network), // as the owner signed it; the policy admitted it
		Devices:     devices,
	}
	l, err := jobCaps(n.cfg.Policy).Cap(declared)
	if err != nil {
		return l, fmt.Errorf("limits: %w", err)
	}
	return l, nil
}

// nodePorts are the ports a job must not reach on any address: the API's
// and every port the mesh listens on (TCP, and UDP for QUIC), sorted, each
// once.
func nodePorts(api net.Listener, listen []ma.Multiaddr) []int {
	var ports []int
	if api != nil {
		if a, ok := api.Addr().(*net.TCPAddr); ok && a.Port > 0 {
			ports = append(ports, a.Port)
		}
	}
	for _, a := range listen {
		for _, code := range []int{ma.P_TCP, ma.P_UDP} {
			v, err := a.ValueForProtocol(code)
			if err != nil {
				continue
			}
			if p, err := strconv.Atoi(v); err == nil && p > 0 && p <= 65535 {
				ports = append(ports, p)
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}
