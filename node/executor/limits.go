package executor

import (
	"fmt"
	"path"
	"strings"

	"github.com/gpumesh/gpumesh/internal/text"
)

// NetworkMode says what network a sandboxed job gets.
type NetworkMode string

// The network modes. The zero value means the executor's default:
// NetworkNone in sandbox mode; in process mode a job always shares the
// node's network.
const (
	// NetworkNone is a network namespace of its own with only loopback up.
	NetworkNone NetworkMode = "none"
	// NetworkEgress is a network namespace with a veth to the node, NAT, and
	// IPv4 egress to public addresses only: private and special ranges
	// (BlockedNets: RFC 1918, 100.64/10, 169.254/16 with cloud metadata,
	// loopback, multicast), all IPv6 (so ULA fc00::/7 and link-local
	// fe80::/10), every address of the node itself, and Config.BlockPorts on
	// any address are refused. Needs the ip (iproute2) and nft (nftables)
	// tools on the node.
	NetworkEgress NetworkMode = "egress"
	// NetworkHost shares the node's network namespace: not isolated. For
	// jobs that must accept connections (a gang's rendezvous across nodes);
	// only when the supplier's policy allows it.
	NetworkHost NetworkMode = "host"
)

// ParseNetworkMode reads a network mode ("none", "egress" or "host").
func ParseNetworkMode(s string) (NetworkMode, error) {
	switch m := NetworkMode(s); m {
	case NetworkNone, NetworkEgress, NetworkHost:
		return m, nil
	}
	return "", fmt.Errorf("executor: unknown network mode %q (want none, egress or host)", s)
}

// Limits is what one attempt may use. The job spec declares it, the node
// caps it with the supplier's Policy (Policy.Cap), and the executor
// enforces it in sandbox mode; process mode enforces none of it (see
// Capabilities). Zero values are defaults, stated per field.
type Limits struct {
	// MemoryBytes caps the memory (RSS, page cache, tmpfs) of all the
	// attempt's processes together; past it the kernel kills a process of
	// the job (Result.OOMKilled). 0: no cap beyond the node's memory, and
	// the job is still first in line when the node runs out. At least
	// MinMemoryBytes when set.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids caps the processes and threads the attempt may have at once.
	// 0: DefaultPids. At least MinPids when set.
	Pids int `json:"pids,omitempty"`
	// CPUWeight is the attempt's share of CPU time against other attempts
	// when the CPUs are busy, 1..10000 as in cgroup v2's cpu.weight. 0:
	// DefaultCPUWeight.
	CPUWeight int `json:"cpu_weight,omitempty"`
	// Network is the attempt's network. "": NetworkNone in sandbox mode.
	Network NetworkMode `json:"network,omitempty"`
	// Devices are the device nodes the attempt may see and open, as paths
	// under /dev ("nvidia0", "nvidiactl", "dri/renderD128"; a leading
	// "/dev/" is accepted). Each must exist under Config.DevDir. The node
	// decides them from the attempt's cards (see CardDevices). Standard
	// nodes (null, zero, full, random, urandom, tty, ptmx and pts, shm) are
	// always there.
	Devices []string `json:"devices,omitempty"`
}

// Defaults and bounds of Limits.
const (
	DefaultPids      = 8192
	DefaultCPUWeight = 100
	MinPids          = 8
	MinMemoryBytes   = 8 << 20
	MaxCPUWeight     = 10000
	maxDevices       = 256
)

// Validate checks the limits; the error names the bad field.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0 || (l.MemoryBytes > 0 && l.MemoryBytes < MinMemoryBytes):
		return fmt.Errorf("executor: limits: memory %s: want 0 (no cap) or at least %s", text.Bytes(l.MemoryBytes), text.Bytes(MinMemoryBytes))
	case l.Pids < 0 || (l.Pids > 0 && l.Pids < MinPids):
		return fmt.Errorf("executor: limits: pids %d: want 0 (default %d) or at least %d", l.Pids, DefaultPids, MinPids)
	case l.CPUWeight < 0 || l.CPUWeight > MaxCPUWeight:
		return fmt.Errorf("executor: limits: cpu weight %d: want 0 (default %d) or 1..%d", l.CPUWeight, DefaultCPUWeight, MaxCPUWeight)
	case len(l.Devices) > maxDevices:
		return fmt.Errorf("executor: limits: %d devices, at most %d", len(l.Devices), maxDevices)
	}
	if l.Network != "" {
		if _, err := ParseNetworkMode(string(l.Network)); err != nil {
			return fmt.Errorf("executor: limits: %w", err)
		}
	}
	for _, d := range l.Devices {
		if _, err := deviceName(d); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults fills the zero fields the sandbox needs as numbers.
func (l Limits) withDefaults() Limits {
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = DefaultCPUWeight
	}
	if l.Network == "" {
		l.Network = NetworkNone
	}
	return l
}

// deviceName cleans a device path given in Limits.Devices to its path under
// /dev, refusing one that would leave /dev.
func deviceName(d string) (string, error) {
	name := strings.TrimPrefix(d, "/dev/")
	clean := path.Clean(name)
	switch {
	case name == "" || strings.HasPrefix(name, "/") || clean != name || clean == "." ||
		clean == ".." || strings.HasPrefix(clean, "../") || strings.ContainsAny(name, "\x00\\"):
		return "", fmt.Errorf("executor: limits: device %q: want a clean path under /dev such as nvidia0 or dri/renderD128", d)
	case isStandardDevice(clean):
		return "", fmt.Errorf("executor: limits: device %q is always present; list only the attempt's cards' nodes", d)
	}
	return clean, nil
}

// Policy is a supplier's caps on what jobs may use; the node applies it to
// each attempt's declared Limits with Cap before Start. Zero fields do not
// cap.
type Policy struct {
	// MaxMemoryBytes caps Limits.MemoryBytes, and is the value given to a
	// job that declares none. 0: no cap.
	MaxMemoryBytes int64 `json:"max_memory_bytes,omitempty"`
	// MaxPids caps Limits.Pids (a job declaring none gets min(MaxPids,
	// DefaultPids)). 0: no cap.
	MaxPids int `json:"max_pids,omitempty"`
	// MaxCPUWeight caps Limits.CPUWeight. 0: no cap.
	MaxCPUWeight int `json:"max_cpu_weight,omitempty"`
	// Networks are the network modes the supplier allows. nil: only
	// NetworkNone.
	Networks []NetworkMode `json:"networks,omitempty"`
}

// Cap returns l capped by the policy. It fails, naming the reason for the
// job's owner, when the job asks for a network mode the policy does not
// allow: a network cannot be shrunk without breaking the job, so the node
// should not bid for it.
func (p Policy) Cap(l Limits) (Limits, error) {
	if err := l.Validate(); err != nil {
		return l, err
	}
	if p.MaxMemoryBytes > 0 && (l.MemoryBytes == 0 || l.MemoryBytes > p.MaxMemoryBytes) {
		l.MemoryBytes = p.MaxMemoryBytes
	}
	if p.MaxPids > 0 {
		if l.Pids == 0 {
			l.Pids = min(p.MaxPids, DefaultPids)
		}
		l.Pids = min(l.Pids, p.MaxPids)
	}
	if p.MaxCPUWeight > 0 {
		if l.CPUWeight == 0 {
			l.CPUWeight = min(p.MaxCPUWeight, DefaultCPUWeight)
		}
		l.CPUWeight = min(l.CPUWeight, p.MaxCPUWeight)
	}
	want := l.Network
	if want == "" {
		want = NetworkNone
	}
	allowed := p.Networks
	if allowed == nil {
		allowed = []NetworkMode{NetworkNone}
	}
	for _, m := range allowed {
		if m == want {
			if err := l.Validate(); err != nil {
				return l, fmt.Errorf("executor: policy caps out of bounds: %w", err)
			}
			return l, nil
		}
	}
	return l, fmt.Errorf("executor: policy: network %q not allowed by this supplier (allowed: %v)", want, allowed)
}
