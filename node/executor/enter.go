package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrAttemptEnded is returned by Exec and DialTCP once the attempt's
// process has exited: there is nothing left to enter.
var ErrAttemptEnded = errors.New("executor: the attempt has ended")

// ExecRequest is a command to run inside a running attempt (gpumesh exec):
// in its jail, as its user, in its work directory, with its environment.
type ExecRequest struct {
	// Command is the program and its arguments; Command[0] is looked up in
	// the job's PATH among the files the job sees, as the attempt's own
	// command is.
	Command []string
	// Env is added to the attempt's environment (TERM for a terminal).
	// Names starting with GPUMESH_ are the attempt's and cannot be changed.
	Env map[string]string
	// TTY gives the process a pseudo-terminal: it leads a session of its
	// own with the terminal as its controlling terminal and its stdin,
	// stdout and stderr. Process.TTY is the other side.
	TTY bool
	// Rows and Cols are the terminal's first size (TTY only; 0 leaves the
	// kernel's default).
	Rows, Cols uint16
	// Stdin, Stdout and Stderr are the process's streams without TTY; nil
	// is the null device.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

func (x ExecRequest) validate() error {
	switch {
	case len(x.Command) == 0 || x.Command[0] == "":
		return errors.New("executor: exec: the command is empty")
	case len(x.Command) > maxCommandArgs:
		return fmt.Errorf("executor: exec: %d arguments, at most %d", len(x.Command), maxCommandArgs)
	}
	size := 0
	for _, a := range x.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("executor: exec: an argument holds a NUL byte")
		}
		size += len(a)
	}
	for k, v := range x.Env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00"):
			return fmt.Errorf("executor: exec: environment variable %q: name must be non-empty without '=' or NUL", k)
		case strings.HasPrefix(k, "GPUMESH_"):
			return fmt.Errorf("executor: exec: %s: names starting with GPUMESH_ are the attempt's", k)
		}
		size += len(k) + len(v)
	}
	if size > maxArgBytes {
		return fmt.Errorf("executor: exec: command and environment over %d bytes", maxArgBytes)
	}
	return nil
}

// Process is a command started inside an attempt by Run.Exec. Wait must be
// called once; the other methods may be called from any goroutine.
type Process struct {
	run *Run
	cmd *exec.Cmd
	pty *os.File

	mu     sync.Mutex
	reaped bool
}

// Pid is the process's id on the node.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// TTY is the terminal's other side (its master): what the process writes
// is read from it, what is written to it is the process's input. Nil
// without ExecRequest.TTY. Reads return an error once every process that
// held the terminal is gone and its output was read; Close releases it.
func (p *Process) TTY() *os.File { return p.pty }

// Signal sends sig to the process's process group (its session's, with a
// terminal). It does nothing once the process was reaped.
func (p *Process) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		signalGroup(p.cmd, sig)
	}
}

// Resize sets the terminal's size; the process gets SIGWINCH. Without a
// terminal it does nothing.
func (p *Process) Resize(rows, cols uint16) error {
	if p.pty == nil {
		return nil
	}
	return setTTYSize(p.pty, rows, cols)
}

// Wait waits for the process to exit and returns its exit code, or -1 and
// the signal's name when a signal ended it. What is left of its process
// group is killed: an exec never leaves processes behind it (in sandbox
// mode, those that left the group end with the attempt's cgroup).
func (p *Process) Wait() (code int, signal string) {
	_ = p.cmd.Wait()
	p.mu.Lock()
	signalGroup(p.cmd, sigKill)
	p.reaped = true
	p.mu.Unlock()
	p.run.forgetExec(p)
	code = p.cmd.ProcessState.ExitCode()
	if sig := exitSignal(p.cmd.ProcessState); sig != "" {
		return -1, sig
	}
	return code, ""
}

// Exec starts a command inside the running attempt: in sandbox mode in
// its mount, network and IPC namespaces, chrooted into its tree, in its
// cgroup (so its limits count it) and as its uid; in process mode as the
// node's user. In both it runs in the attempt's work directory with the
// attempt's environment. A command that is not found is an error wrapping
// exec.ErrNotFound. Every process it starts ends when the attempt ends.
func (r *Run) Exec(x ExecRequest) (*Process, error) {
	if err := x.validate(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	j, ended := r.jail, !r.result.EndedAt.IsZero() || r.cmd == nil
	r.mu.Unlock()
	if ended || isClosed(r.done) {
		return nil, ErrAttemptEnded
	}
	var cmd *exec.Cmd
	if r.attempt.Image != nil {
		// The runtime finds the command in the image (jail.enter).
		env := r.containerEnv()
		for k, v := range x.Env {
			env[k] = v
		}
		cmd = &exec.Cmd{Path: x.Command[0], Args: x.Command, Dir: r.attempt.Image.Cwd, Env: envList(env), WaitDelay: time.Second}
	} else {
		env := r.env()
		for k, v := range x.Env {
			env[k] = v
		}
		path, err := lookPath(x.Command[0], env["PATH"], r.WorkDir(), j.hiddenBy)
		if err != nil {
			return nil, fmt.Errorf("executor: exec: %w", err)
		}
		// Its output is drained for a second after it exits, in case a stray
		// child still holds it; the process group is killed first.
		cmd = &exec.Cmd{Path: path, Args: x.Command, Dir: r.WorkDir(), Env: envList(env), WaitDelay: time.Second}
	}
	if !x.TTY {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = x.Stdin, x.Stdout, x.Stderr
	}
	p := &Process{run: r, cmd: cmd}
	// Registered before it starts, so that an end of the attempt racing
	// with the start still kills it (killExecs waits on execMu).
	r.execMu.Lock()
	defer r.execMu.Unlock()
	if r.execsDone {
		return nil, ErrAttemptEnded
	}
	master, err := j.enter(cmd, x.TTY, x.Rows, x.Cols)
	if err != nil {
		return nil, fmt.Errorf("executor: exec: starting %q: %w", x.Command[0], err)
	}
	p.pty = master
	if master != nil && (x.Rows > 0 || x.Cols > 0) {
		_ = setTTYSize(master, x.Rows, x.Cols)
	}
	if r.execs == nil {
		r.execs = map[*Process]bool{}
	}
	r.execs[p] = true
	r.cfg.Logger.Info("exec started", "job", r.attempt.JobID, "share", r.attempt.Share, "epoch", r.attempt.Epoch,
		"pid", cmd.Process.Pid, "uid", j.uid(), "tty", x.TTY)
	return p, nil
}

// Close releases the process's terminal (a blocked read of it returns).
// Call it after Wait, once what the process wrote was read.
func (p *Process) Close() error {
	if p.pty == nil {
		return nil
	}
	return p.pty.Close()
}

// forgetExec drops a reaped process.
func (r *Run) forgetExec(p *Process) {
	r.execMu.Lock()
	delete(r.execs, p)
	r.execMu.Unlock()
}

// signalExecs signals the process groups of the attempt's execs.
func (r *Run) signalExecs(sig syscall.Signal) {
	r.execMu.Lock()
	defer r.execMu.Unlock()
	for p := range r.execs {
		p.Signal(sig)
	}
	if sig == sigKill {
		r.execsDone = true // no exec starts after the attempt's end
	}
}

// DialTCP connects to port on the attempt's loopback address, from inside
// its network namespace in sandbox mode (whatever its network, none
// included), so that a port the job listens on only there is reached.
func (r *Run) DialTCP(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("executor: port %d: want 1 to 65535", port)
	}
	r.mu.Lock()
	j, ended := r.jail, !r.result.EndedAt.IsZero() || r.cmd == nil
	r.mu.Unlock()
	if ended || isClosed(r.done) {
		return nil, ErrAttemptEnded
	}
	return j.dial(ctx, netip.AddrPortFrom(loopback, uint16(port)))
}

// loopback is the address DialTCP reaches a job's port on.
var loopback = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// dialAddr connects to addr in the calling thread's network namespace.
func dialAddr(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr.String())
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
