package executor

import (
	"errors"
	"fmt"
)

// Isolation names how an Executor keeps a job away from the node, from the
// other jobs on the node and from the supplier's machine.
//
// The contract of each mode:
//
//   - IsolationProcess runs the job as a process group of the node's own
//     user, in a private 0700 attempt directory, with only its own
//     environment. Nothing else is isolated: see ProcessModeGaps.
//
//   - IsolationSandbox (Linux, root) runs each attempt as its own
//     unprivileged uid/gid, allocated from Config.UIDMin..UIDMax and never
//     shared by two running attempts, with the attempt's Limits enforced by
//     a cgroup (memory, pids, CPU weight; OOM kills the job, never the
//     node), a private mount namespace (read-only, nosuid system; /root,
//     /home, /run, the attempts root and Config.HideDirs hidden; a fresh /dev
//     with only the standard nodes and Limits.Devices; its own /proc showing
//     only its own processes; private /tmp and /dev/shm), its own IPC
//     namespace, and a network namespace per Limits.Network. Stop and the
//     end of the attempt kill every process in its cgroup, whatever process
//     group or session it moved to. Its tmp directory is removed when it
//     ends, and its work directory, given to root, when the node has kept
//     its outputs (Executor.Tidy), unless Config.KeepAttemptDirs.
//
//   - IsolationAuto is IsolationSandbox where this node can provide it
//     (Linux, running as root, namespaces and cgroup controllers available)
//     and IsolationProcess otherwise, with a WARNING log saying why and what
//     is not isolated.
type Isolation string

// The isolation modes. The zero value of Config.Isolation is
// IsolationProcess, what the executor always did, so existing callers keep
// their behaviour; the node's --isolation flag defaults to IsolationAuto.
const (
	IsolationAuto    Isolation = "auto"
	IsolationSandbox Isolation = "sandbox"
	IsolationProcess Isolation = "process"
)

// ParseIsolation reads an isolation mode as written in a flag or config
// file ("auto", "sandbox" or "process").
func ParseIsolation(s string) (Isolation, error) {
	switch i := Isolation(s); i {
	case IsolationAuto, IsolationSandbox, IsolationProcess:
		return i, nil
	}
	return "", fmt.Errorf("executor: unknown isolation %q (want auto, sandbox or process)", s)
}

// ProcessModeGaps says what a job run under IsolationProcess can do that the
// sandbox would stop. The executor logs it as a WARNING when it runs in that
// mode.
const ProcessModeGaps = "jobs run as the node's own user: they can read and write whatever the node can " +
	"(its data dir and identity key, other jobs' directories, /root and /home), see and use every device node " +
	"(all GPUs), reach any network address (cloud metadata 169.254.169.254, private networks, the node's own API " +
	"and mesh ports), and are not limited in memory, processes or CPU, so one job can take the node down"

// ErrSandboxUnavailable is wrapped by New when Config.Isolation is
// IsolationSandbox and this node cannot provide it; the error says why.
var ErrSandboxUnavailable = errors.New("executor: sandbox unavailable")

// ErrNoUID is returned by Start when every uid of Config.UIDMin..UIDMax is
// held by a running attempt (or used by some other process on the host).
var ErrNoUID = errors.New("executor: no free sandbox uid")

// ErrNetworkUnavailable is returned by Start in sandbox mode when the
// attempt asks for a network mode this executor cannot provide (egress
// without the ip and nft tools; see Capabilities.Networks).
var ErrNetworkUnavailable = errors.New("executor: network mode unavailable")

// Capabilities says what an Executor enforces, for the node's policy and
// for `gpumesh job --explain`.
type Capabilities struct {
	// Isolation is the mode in effect: IsolationSandbox or IsolationProcess,
	// never IsolationAuto.
	Isolation Isolation `json:"isolation"`
	// Limits tells whether Attempt.Limits' memory, pids and CPU weight are
	// enforced (sandbox mode).
	Limits bool `json:"limits"`
	// Cgroup is "v2", "v1" or "" (process mode).
	Cgroup string `json:"cgroup,omitempty"`
	// Networks lists the network modes this executor enforces. In process
	// mode it is just NetworkHost: a job has the node's network whatever it
	// asks for.
	Networks []NetworkMode `json:"networks"`
	// Reason says why auto mode fell back to process mode ("" otherwise).
	Reason string `json:"reason,omitempty"`
	// PrivateNet tells whether attempts may have a PrivateNet (sandbox
	// mode with the ip and nft tools); PrivateNetReason says why not, as
	// a clause ("the node needs nft (package nftables)").
	PrivateNet       bool   `json:"private_net,omitempty"`
	PrivateNetReason string `json:"private_net_reason,omitempty"`
	// Runtime is the OCI runtime that runs attempts in images (Attempt.Image),
	// "" when this executor runs none; ImagesReason then says why.
	Runtime      string `json:"runtime,omitempty"`
	ImagesReason string `json:"images_reason,omitempty"`
}

// Provides tells whether a job that asks for network mode m gets exactly
// that ("" always: it means the executor's default).
func (c Capabilities) Provides(m NetworkMode) bool {
	if m == "" {
		return true
	}
	for _, n := range c.Networks {
		if n == m {
			return true
		}
	}
	return false
}
