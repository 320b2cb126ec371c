package market

import (
	"fmt"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Resources is what one share of a job may use on the node that runs it,
// besides its cards: the job spec declares it, a supplier whose policy
// caps less declines to bid (Policy.MaxMemoryBytes and the rest), and the
// node's executor enforces it (in sandbox mode) after filling what the spec
// leaves zero from the supplier's policy. Zero fields mean "the supplier's
// default".
//
// It is embedded in JobSpec, ExecSpec and BidRequest so that its fields
// stay at the top level of their JSON, omitted when zero: a spec that
// declares no resources encodes, and so signs, as it did before they
// existed.
type Resources struct {
	// MemoryBytes caps the memory (RSS, page cache, tmpfs) of all the
	// share's processes together; past it the kernel kills the job. 0: the
	// supplier's cap (gpumesh node --max-job-memory). Else
	// MinJobMemoryBytes to MaxJobMemoryBytes.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids caps the share's processes and threads at once. 0: the
	// supplier's default. Else MinJobPids to MaxJobPids.
	Pids int `json:"pids,omitempty"`
	// CPUWeight is the share's part of the CPUs against other jobs on its
	// node when they are busy, 1 to MaxJobCPUWeight as cgroup v2's
	// cpu.weight (100 is what a job that declares none gets).
	CPUWeight int `json:"cpu_weight,omitempty"`
}

// Bounds of Resources. They equal the executor's (node/executor.Limits),
// so a spec that validates here starts there.
const (
	MinJobMemoryBytes = 8 << 20
	MaxJobMemoryBytes = 1 << 50 // 1 PiB: far above any machine, far from overflow
	MinJobPids        = 8
	MaxJobPids        = 1 << 22 // Linux's PID_MAX_LIMIT
	MaxJobCPUWeight   = 10000
)

// IsZero reports whether no resource is declared.
func (r Resources) IsZero() bool { return r == Resources{} }

// validate returns a *SpecError naming the first field out of bounds.
func (r Resources) validate() error {
	switch {
	case r.MemoryBytes != 0 && (r.MemoryBytes < MinJobMemoryBytes || r.MemoryBytes > MaxJobMemoryBytes):
		return specErr("memory_bytes", "want 0 (the supplier's cap) or %s to %s, got %s",
			text.Bytes(MinJobMemoryBytes), text.Bytes(MaxJobMemoryBytes), text.Bytes(r.MemoryBytes))
	case r.Pids != 0 && (r.Pids < MinJobPids || r.Pids > MaxJobPids):
		return specErr("pids", "want 0 (the supplier's default) or %d to %d, got %d", MinJobPids, MaxJobPids, r.Pids)
	case r.CPUWeight != 0 && (r.CPUWeight < 1 || r.CPUWeight > MaxJobCPUWeight):
		return specErr("cpu_weight", "want 0 (the default, 100) or 1 to %d, got %d", MaxJobCPUWeight, r.CPUWeight)
	}
	return nil
}

// admitResources is the part of Policy.Admit that judges declared
// resources against the caps.
func (p *Policy) admitResources(r Resources) (bool, string) {
	switch {
	case p.MaxMemoryBytes > 0 && r.MemoryBytes > p.MaxMemoryBytes:
		return false, fmt.Sprintf("the job asks for %s of memory; this supplier gives a job at most %s",
			text.Bytes(r.MemoryBytes), text.Bytes(p.MaxMemoryBytes))
	case p.MaxPids > 0 && r.Pids > p.MaxPids:
		return false, fmt.Sprintf("the job asks for %d processes; this supplier gives a job at most %d", r.Pids, p.MaxPids)
	case p.MaxCPUWeight > 0 && r.CPUWeight > p.MaxCPUWeight:
		return false, fmt.Sprintf("the job asks for CPU weight %d; this supplier gives a job at most %d", r.CPUWeight, p.MaxCPUWeight)
	}
	return true, ""
}

// validateCaps reports the first resource cap of the policy out of
// bounds.
func (p *Policy) validateCaps() error {
	switch {
	case p.MaxMemoryBytes < 0 || (p.MaxMemoryBytes > 0 && p.MaxMemoryBytes < MinJobMemoryBytes):
		return fmt.Errorf("MaxMemoryBytes: want 0 (no cap) or at least %s, got %s", text.Bytes(MinJobMemoryBytes), text.Bytes(p.MaxMemoryBytes))
	case p.MaxPids < 0 || (p.MaxPids > 0 && p.MaxPids < MinJobPids):
		return fmt.Errorf("MaxPids: want 0 (no cap) or at least %d, got %d", MinJobPids, p.MaxPids)
	case p.MaxCPUWeight < 0 || p.MaxCPUWeight > MaxJobCPUWeight:
		return fmt.Errorf("MaxCPUWeight: want 0 (no cap) or 1 to %d, got %d", MaxJobCPUWeight, p.MaxCPUWeight)
	}
	return nil
}
