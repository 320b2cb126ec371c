package executor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
)

// isolator is one isolation mode of an Executor. Its methods may be called
// from any goroutine.
type isolator interface {
	// jail readies the isolation of one run. It is called once its
	// directories exist and its payload and checkpoint are unpacked, before
	// its process starts. On error it has released whatever it took.
	jail(r *Run) (jail, error)
	// capabilities says what the mode enforces.
	capabilities() Capabilities
	// close lets go of what the mode keeps open, once no run is left.
	close()
}

// jail is one run's isolation. start is called at most once, then finish
// exactly once (also when start failed); signal may be called from any
// goroutine between them.
type jail interface {
	// start starts cmd, whose Path, Args, Env, Dir, Stdout and Stderr are
	// set, inside the jail.
	start(cmd *exec.Cmd) error
	// signal sends sig to every process of the attempt still running.
	signal(sig syscall.Signal)
	// finish runs after the main process was reaped: it kills what is left
	// of the attempt and releases everything the jail holds. It tells
	// whether the kernel killed a process of the attempt for memory.
	finish() (oomKilled bool)
	// uid is the user the job runs as.
	uid() int
	// cgroupDir is the attempt's cgroup v2 directory, "" when it has none
	// (process mode, cgroup v1).
	cgroupDir() string
	// hiddenBy names the directory of the node that keeps the job from
	// seeing path (an absolute path on the node), "" when the job sees
	// it. It may be called before start.
	hiddenBy(path string) string
	// enter starts cmd (Path, Args, Env, Dir set; its streams set unless
	// tty) inside the jail as the job's user, while the job runs: in a
	// process group of its own, or with tty in a session of its own whose
	// controlling terminal is a new pseudo-terminal, returned as its
	// master. rows and cols are the terminal's first size (0: the
	// kernel's default); the caller sets it on the master as well.
	enter(cmd *exec.Cmd, tty bool, rows, cols uint16) (master *os.File, err error)
	// dial connects to addr (127.0.0.1 or the attempt's private address)
	// in the job's network.
	dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
	// private is the listener of the attempt's PrivateNet, nil without
	// one.
	private() net.Listener
}

// newIsolator picks the isolation mode cfg asks for, logging a WARNING
// when jobs will not be isolated.
func newIsolator(cfg Config) (isolator, error) {
	log := cfg.Logger
	switch cfg.Isolation {
	case IsolationProcess:
		log.Warn("executor: isolation is process: jobs are NOT sandboxed", "not_isolated", ProcessModeGaps)
		return processIsolator{}, nil
	case IsolationSandbox:
		sb, err := newSandbox(cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSandboxUnavailable, err)
		}
		return sb, nil
	case IsolationAuto:
		sb, err := newSandbox(cfg)
		if err == nil {
			return sb, nil
		}
		log.Warn("executor: isolation auto falls back to process mode: jobs are NOT sandboxed",
			"reason", err.Error(), "not_isolated", ProcessModeGaps)
		return processIsolator{reason: err.Error()}, nil
	}
	return nil, fmt.Errorf("executor: unknown isolation %q (want auto, sandbox or process)", cfg.Isolation)
}

// processIsolator runs jobs as process groups of the node's own user.
type processIsolator struct {
	reason string // why auto mode chose it
}

func (processIsolator) close() {}

func (p processIsolator) jail(r *Run) (jail, error) {
	if r.attempt.Image != nil {
		return nil, fmt.Errorf("%w: %s", ErrNoRuntime, processImagesReason)
	}
	if r.attempt.Private != nil {
		return nil, fmt.Errorf("%w: %s", ErrNetworkUnavailable, processPrivateReason)
	}
	return &processJail{}, nil
}

// processPrivateReason says why process mode gives no private network.
const processPrivateReason = "jobs share the node's network under isolation process"

// processImagesReason says why process mode runs no images.
const processImagesReason = "images run only in the sandbox (gpumesh node as root, --isolation sandbox or auto)"

func (p processIsolator) capabilities() Capabilities {
	return Capabilities{Isolation: IsolationProcess, Networks: []NetworkMode{NetworkHost}, Reason: p.reason, ImagesReason: processImagesReason,
		PrivateNetReason: processPrivateReason}
}

// processJail is a process group: Stop reaches every process that stayed
// in the job's group.
type processJail struct {
	cmd *exec.Cmd
}

func (j *processJail) start(cmd *exec.Cmd) error {
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	j.cmd = cmd
	return nil
}

func (j *processJail) signal(sig syscall.Signal) { signalGroup(j.cmd, sig) }

func (j *processJail) finish() bool {
	signalGroup(j.cmd, sigKill) // no orphan outlives its attempt
	return false
}

func (j *processJail) uid() int { return os.Geteuid() }

func (j *processJail) cgroupDir() string { return "" }

func (j *processJail) hiddenBy(string) string { return "" } // it sees the node's files

func (j *processJail) enter(cmd *exec.Cmd, tty bool, rows, cols uint16) (*os.File, error) {
	return startInGroup(cmd, tty, rows, cols)
}

func (j *processJail) dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	return dialAddr(ctx, addr)
}

func (j *processJail) private() net.Listener { return nil }
