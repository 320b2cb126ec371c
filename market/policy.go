package market

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
)

// Policy is a supplier's choice of the jobs it serves. A supplier bids
// only for jobs its policy admits, judging by what the BidRequest says of
// the job, and declines the others with the reason, which the job's
// explanation shows. It judges again by the owner's signed spec when an
// award comes, and rejects an award the policy refuses. The zero Policy
// admits every job.
type Policy struct {
	// AllowOwners, when not empty, admits only jobs of these owners (owner
	// IDs, "o1..."). Default: every owner.
	AllowOwners []string
	// DenyOwners refuses jobs of these owners; it wins over AllowOwners.
	DenyOwners []string
	// MaxDuration refuses jobs that expect to run longer than this
	// (JobSpec.ExpectedDuration), and stops an attempt that has run this
	// long (CauseTimeLimit: the job fails, a service replica is placed
	// again). A job naming no duration is admitted and stopped at the
	// limit. 0: no limit.
	MaxDuration time.Duration
	// MaxNetwork is the most network a job may have (none < egress <
	// host; see JobSpec.NetworkOrDefault). "": host, no limit.
	MaxNetwork JobNetwork
	// MaxMemoryBytes refuses jobs that declare more memory per share
	// (JobSpec.MemoryBytes); the node gives it to a job that declares none.
	// 0: no cap. Else at least MinJobMemoryBytes.
	MaxMemoryBytes int64
	// MaxPids refuses jobs that declare more processes per share
	// (JobSpec.Pids); a job that declares none gets the executor's default
	// (8192) or this, the lower. 0: no cap. Else at least MinJobPids.
	MaxPids int
	// JobKinds lists the kinds of job this supplier runs: JobKindImage (an
	// OCI image under a container runtime) and JobKindHost (a command on
	// the supplier's own system). Empty: both.
	JobKinds []JobKind
	// NoImages, when set, says why this supplier cannot run images (no
	// OCI runtime, not root): it declines image jobs with that reason
	// whatever JobKinds says.
	NoImages string
	// NoPrivateNet, when set, says why this supplier cannot give a gang
	// across nodes its private network, as a clause ("the node needs nft
	// (package nftables)"): it declines such a gang unless the gang's
	// network is host.
	NoPrivateNet string
	// MaxCPUWeight refuses jobs that declare a higher CPU weight
	// (JobSpec.CPUWeight); a job that declares none gets 100 or this, the
	// lower. 0: no cap. Else 1 to MaxJobCPUWeight.
	MaxCPUWeight int
}

// JobFacts is what a policy judges a job by: the owner, how long it
// expects to run, the network it needs and the resources it declares. A
// BidRequest carries them.
type JobFacts struct {
	Owner    string
	Duration time.Duration
	Network  JobNetwork
	Resources
	// Image tells that the job runs in an OCI image (JobSpec.Images).
	Image bool
	// Gang tells that the job is a gang that may span nodes
	// (JobSpec.SpansNodes): on network none or egress it needs a private
	// network between its shares.
	Gang bool
}

// JobKind is a kind of job a supplier may choose to run (Policy.JobKinds).
type JobKind string

// The job kinds of Policy.JobKinds.
const (
	// JobKindImage is a job that names images (JobSpec.Images): it runs
	// in its image under the supplier's container runtime.
	JobKindImage JobKind = "image"
	// JobKindHost is a job without images: its command runs on the
	// supplier's own system, in the node's sandbox.
	JobKindHost JobKind = "host"
)

// ParseJobKinds reads a list of job kinds as a flag gives it ("image",
// "host"); it refuses unknown and repeated kinds and an empty list.
func ParseJobKinds(list []string) ([]JobKind, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("job kinds: name image, host or both")
	}
	var out []JobKind
	for _, k := range list {
		switch JobKind(k) {
		case JobKindImage, JobKindHost:
		default:
			return nil, fmt.Errorf("unknown job kind %q (want image or host)", k)
		}
		if slices.Contains(out, JobKind(k)) {
			return nil, fmt.Errorf("job kind %q named twice", k)
		}
		out = append(out, JobKind(k))
	}
	return out, nil
}

// runs tells whether the policy's JobKinds admit kind k.
func (p *Policy) runs(k JobKind) bool { return len(p.JobKinds) == 0 || slices.Contains(p.JobKinds, k) }

// FactsOf returns the facts of a spec.
func FactsOf(spec *JobSpec) JobFacts {
	return JobFacts{Owner: spec.Owner, Duration: spec.ExpectedDuration.Std(), Network: spec.NetworkOrDefault(), Resources: spec.Resources,
		Image: len(spec.Images) > 0, Gang: spec.SpansNodes()}
}

// Admit reports whether the policy admits a job with facts f and, when
// not, the reason, written for the job's owner.
func (p *Policy) Admit(f JobFacts) (bool, string) {
	switch {
	case slices.Contains(p.DenyOwners, f.Owner):
		return false, fmt.Sprintf("owner %s is on this supplier's deny list", owner.ID(f.Owner).Short())
	case len(p.AllowOwners) > 0 && f.Owner == "":
		return false, "this supplier serves listed owners only, and the job names no owner"
	case len(p.AllowOwners) > 0 && !slices.Contains(p.AllowOwners, f.Owner):
		return false, fmt.Sprintf("owner %s is not on this supplier's allow list", owner.ID(f.Owner).Short())
	case f.Image && !p.runs(JobKindImage):
		return false, "this supplier runs host-command jobs only, not images (gpumesh node --job-kinds host)"
	case f.Image && p.NoImages != "":
		return false, "this supplier cannot run images: " + p.NoImages
	case !f.Image && !p.runs(JobKindHost):
		return false, "this supplier runs jobs in images only (gpumesh node --job-kinds image): submit with --image"
	case p.MaxDuration > 0 && f.Duration > p.MaxDuration:
		return false, fmt.Sprintf("the job expects to run %v; this supplier runs jobs for at most %v", f.Duration, p.MaxDuration)
	case p.MaxNetwork != "" && f.Network.rank() > p.MaxNetwork.rank():
		return false, fmt.Sprintf("the job needs network %s; this supplier allows at most %s", f.Network, p.MaxNetwork)
	case f.Gang && f.Network != NetworkHost && p.NoPrivateNet != "":
		if p.MaxNetwork != "" && p.MaxNetwork != NetworkHost {
			return false, fmt.Sprintf("a gang across nodes needs network host here (no private network: %s); this supplier allows at most %s",
				p.NoPrivateNet, p.MaxNetwork)
		}
		return false, fmt.Sprintf("a gang across nodes needs network host here (no private network: %s): submit it with --net host", p.NoPrivateNet)
	}
	return p.admitResources(f.Resources)
}

// validate reports the first field of the policy that is wrong.
func (p *Policy) validate() error {
	for _, list := range []struct {
		name string
		ids  []string
	}{{"AllowOwners", p.AllowOwners}, {"DenyOwners", p.DenyOwners}} {
		for i, id := range list.ids {
			if _, err := owner.ParseID(id); err != nil {
				return fmt.Errorf("%s[%d]: %w", list.name, i, err)
			}
		}
	}
	if p.MaxDuration < 0 {
		return fmt.Errorf("MaxDuration: must not be negative, got %v", p.MaxDuration)
	}
	for i, k := range p.JobKinds {
		if k != JobKindImage && k != JobKindHost {
			return fmt.Errorf("JobKinds[%d]: unknown job kind %q (want image or host)", i, k)
		}
	}
	if p.MaxNetwork != "" {
		if _, err := ParseJobNetwork(string(p.MaxNetwork)); err != nil {
			return fmt.Errorf("MaxNetwork: %w", err)
		}
	}
	return p.validateCaps()
}

// judgeAward checks an award against what this supplier requires: the
// owner's signed spec when Config.RequireSigned, verified, matching the
// award, and admitted by the Policy, and simulated cards only for a job
// that allows them. It returns the reason to reject, or "".
func (s *supplier) judgeAward(m *Award, r *reservation) string {
	cfg := &s.n.cfg
	if sim := s.simulatedIn(m.Cards); sim > 0 && (m.Signed == nil && !r.allowSim || m.Signed != nil && !m.Signed.Spec.AllowSimulated) {
		return fmt.Sprintf("%d of the awarded cards are %s", sim, SimulatedDetail)
	}
	if m.Signed == nil {
		if cfg.RequireSigned {
			return "the award carries no signed spec: " + ErrUnsigned.Error()
		}
		return ""
	}
	if err := m.Signed.Verify(cfg.Network); err != nil {
		return err.Error()
	}
	spec := &m.Signed.Spec
	if spec.ID != m.Job {
		return fmt.Sprintf("the signed spec is of job %s", spec.ID)
	}
	if !sameExec(m.Exec, ExecOf(spec)) {
		return "the award's images, command, environment, payload, data, network, service or resources differ from the owner's signed spec"
	}
	if ok, reason := cfg.Policy.Admit(FactsOf(spec)); !ok {
		return "policy: " + reason
	}
	return ""
}

// simulatedIn counts the simulated cards among ids.
func (s *supplier) simulatedIn(ids []string) int {
	n := 0
	for _, id := range ids {
		if c := s.byID[id]; c != nil && c.card.Simulated() {
			n++
		}
	}
	return n
}

func sameExec(a, b ExecSpec) bool {
	if !slices.Equal(a.Images, b.Images) || !slices.Equal(a.Command, b.Command) || len(a.Env) != len(b.Env) || a.Network != b.Network || a.Resources != b.Resources ||
		!sameService(a.Service, b.Service) || !a.Data.Equal(b.Data) {
		return false
	}
	for k, v := range a.Env {
		if w, ok := b.Env[k]; !ok || w != v {
			return false
		}
	}
	switch {
	case a.Payload == nil || b.Payload == nil:
		return a.Payload == nil && b.Payload == nil
	}
	return *a.Payload == *b.Payload
}
