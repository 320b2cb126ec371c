package executor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/fence"
)

// StopReason says why the node stopped an attempt.
type StopReason string

// Reasons for Stop.
const (
	StopCancelled StopReason = "cancelled" // the owner cancelled the job
	StopFenced    StopReason = "fenced"    // the lease could not be renewed
	StopPreempted StopReason = "preempted" // on-demand work needed the cards
	StopShutdown  StopReason = "shutdown"  // the node is stopping
	StopScaled    StopReason = "scaled"    // the job shrank
)

// Result is how an attempt ended.
type Result struct {
	// ExitCode is the process's exit status, or -1 when a signal ended it.
	ExitCode  int        `json:"exit_code"`
	Signal    string     `json:"signal,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   time.Time  `json:"ended_at"`
	Stopped   StopReason `json:"stopped,omitempty"` // "" when it exited by itself
	// OOMKilled tells that the kernel killed a process of the attempt
	// because it reached Limits.MemoryBytes (sandbox mode only).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Seconds is how long the process ran, the figure billing uses.
func (r Result) Seconds() float64 { return r.EndedAt.Sub(r.StartedAt).Seconds() }

// Run is one started attempt. Its methods are safe for concurrent use.
type Run struct {
	cfg     Config
	attempt Attempt // without its readers: read-only once made
	dir     string
	// work and checkpoint are called by prepare, on the goroutine of Start.
	work       func(dir string) error
	checkpoint func(dir string) error

	jail           jail
	cmd            *exec.Cmd
	stdout, stderr *os.File
	tail           *tailBuffer
	changed        *notifier
	startedAt      time.Time

	done chan struct{}

	mu        sync.Mutex
	outClosed bool // stdout and stderr are closed: Note writes nothing
	stopping  StopReason
	killer    *time.Timer
	result    Result

	// The processes Exec started that were not reaped yet; execsDone is
	// set once the attempt ended, after which Exec starts nothing.
	execMu    sync.Mutex
	execs     map[*Process]bool
	execsDone bool
}

func newRun(cfg Config, a Attempt, dir string) *Run {
	work, checkpoint := a.Work, a.Checkpoint
	a.Work, a.Checkpoint = nil, nil // r.attempt is read-only once the run exists
	return &Run{
		cfg:        cfg,
		attempt:    a,
		work:       work,
		checkpoint: checkpoint,
		dir:        dir,
		tail:       newTailBuffer(cfg.TailBytes),
		changed:    newNotifier(),
		done:       make(chan struct{}),
	}
}

// Attempt returns what the run was started with (Work and Checkpoint are
// consumed and nil).
func (r *Run) Attempt() Attempt { return r.attempt }

// Dir is the attempt's directory: its logs, work dir and checkpoint dir.
func (r *Run) Dir() string { return r.dir }

// WorkDir is the job's working directory (and HOME).
func (r *Run) WorkDir() string { return filepath.Join(r.dir, payloadDirName) }

// CheckpointDir is $GPUMESH_CHECKPOINT_DIR.
func (r *Run) CheckpointDir() string { return filepath.Join(r.dir, checkpointDirName) }

// tmpDir is $TMPDIR.
func (r *Run) tmpDir() string { return filepath.Join(r.dir, tmpDirName) }

// UID is the user the job runs as: its own uid in sandbox mode, the node's
// in process mode; -1 while the attempt is still being prepared.
func (r *Run) UID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jail == nil {
		return -1
	}
	return r.jail.uid()
}

// Process returns the attempt's process group (its leader's pid: every
// process of the attempt starts in it) and cgroup v2 directory ("" when it
// has none), for a fence keeper (node/fence) to kill the attempt when the
// node cannot; ok is false before the process started.
func (r *Run) Process() (pgid int, cgroupDir string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return 0, "", false
	}
	return r.cmd.Process.Pid, r.jail.cgroupDir(), true
}

// StartedAt is when the process started.
func (r *Run) StartedAt() time.Time { return r.startedAt }

// Started reports whether the attempt's process has started: until then
// the run is being prepared (its payload unpacked, its checkpoint
// restored), and its directories are not yet the job's.
func (r *Run) Started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
}

// Done is closed when the process has exited and its output is flushed.
func (r *Run) Done() <-chan struct{} { return r.done }

// ended reports whether Done is closed: the process reaped and the jail
// released.
func (r *Run) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Result is how the attempt ended; valid after Done is closed.
func (r *Run) Result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result
}

// Tail returns the last bytes of the attempt's combined output (at most
// Config.TailBytes).
func (r *Run) Tail() []byte { return r.tail.Bytes() }

// Changed returns a channel closed at the next write of output or at the end
// of the run; call it again for the write after that.
func (r *Run) Changed() <-chan struct{} { return r.changed.C() }

// Stop ends the attempt: SIGTERM to its processes (its process group; in
// sandbox mode every process in its cgroup), then SIGKILL after the grace
// period. It returns at once; Done tells when the process is gone. The first
// reason given is kept.
func (r *Run) Stop(reason StopReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
		return
	default:
	}
	if r.stopping != "" {
		return
	}
	r.stopping = reason
	r.signalStopLocked()
}

// signalStopLocked sends SIGTERM and arms the SIGKILL timer once the
// attempt is stopping and its process exists; Start calls it again after
// the process started, for a Stop that came while it was being prepared.
// r.mu is held.
func (r *Run) signalStopLocked() {
	if r.stopping == "" || r.jail == nil || r.cmd == nil || r.killer != nil {
		return
	}
	r.jail.signal(sigTerm)
	r.signalExecs(sigTerm)
	r.killer = time.AfterFunc(r.cfg.Grace, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.result.EndedAt.IsZero() { // not reaped yet: the group id is still ours
			r.jail.signal(sigKill)
		}
	})
}

// prepare makes the attempt's directories, has its work and checkpoint
// directories filled, and readies its jail.
func (r *Run) prepare(iso isolator) error {
	if err := os.RemoveAll(r.dir); err != nil {
		return fmt.Errorf("executor: clearing %s: %w", r.dir, err)
	}
	for _, d := range []string{r.dir, r.WorkDir(), r.CheckpointDir(), r.tmpDir()} {
		if err := os.Mkdir(d, attemptDirPerm); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	if r.work != nil {
		if err := r.work(r.WorkDir()); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	if r.checkpoint != nil {
		if err := r.checkpoint(r.CheckpointDir()); err != nil {
			return fmt.Errorf("executor: checkpoint: %w", err)
		}
	}
	r.work, r.checkpoint = nil, nil
	j, err := iso.jail(r)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.jail = j
	r.mu.Unlock()
	return nil
}

func (r *Run) start() error {
	var err error
	open := func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(r.dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, attemptFilePerm)
	}
	if r.stdout, err = open(stdoutFileName); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	if r.stderr, err = open(stderrFileName); err != nil {
		r.stdout.Close()
		return fmt.Errorf("executor: %w", err)
	}
	a := r.attempt
	var path, dir string
	var args, env []string
	if a.Image != nil {
		// The runtime finds the command in the image (jail.start makes
		// the runtime's own command line of these).
		path, args, dir, env = a.Image.Args[0], a.Image.Args, a.Image.Cwd, envList(r.containerEnv())
	} else {
		path, err = lookPath(a.Command[0], r.env()["PATH"], r.WorkDir(), r.jail.hiddenBy)
		if err != nil {
			r.closeFiles()
			return fmt.Errorf("executor: %w", err)
		}
		args, dir, env = a.Command, r.WorkDir(), envList(r.env())
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   args,
		Dir:    dir,
		Env:    env,
		Stdout: &logWriter{file: r.stdout, tail: r.tail, changed: r.changed},
		Stderr: &logWriter{file: r.stderr, tail: r.tail, changed: r.changed},
		// Output pipes are drained for this long after the process exits,
		// in case a stray child still holds them; the group is killed first.
		WaitDelay: time.Second,
	}
	if a.Starting != nil {
		a.Starting()
	}
	if err := r.jail.start(cmd); err != nil {
		r.closeFiles()
		return fmt.Errorf("executor: starting %q: %w", args[0], err)
	}
	if a.Started != nil {
		a.Started(cmd.Process.Pid, r.jail.cgroupDir())
	}
	r.mu.Lock()
	r.cmd = cmd
	r.startedAt = time.Now()
	r.signalStopLocked()
	r.mu.Unlock()
	r.cfg.Logger.Info("attempt started", "job", a.JobID, "share", a.Share, "epoch", a.Epoch,
		"pid", cmd.Process.Pid, "uid", r.jail.uid())
	return nil
}

// wait reaps the process, kills what is left of the attempt, releases its
// jail, and records the result. It runs on the goroutine the Executor owns
// for this run.
func (r *Run) wait() {
	err := r.cmd.Wait()
	ended := time.Now()
	r.signalExecs(sigKill) // nor does anything exec started in it
	oom := r.jail.finish() // no orphan outlives its attempt
	r.closeFiles()

	res := Result{ExitCode: r.cmd.ProcessState.ExitCode(), StartedAt: r.startedAt, EndedAt: ended, OOMKilled: oom}
	if sig := exitSignal(r.cmd.ProcessState); sig != "" {
		res.Signal = sig
		res.ExitCode = -1
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		r.cfg.Logger.Warn("attempt wait", "job", r.attempt.JobID, "err", err)
	}
	r.mu.Lock()
	if r.killer != nil {
		r.killer.Stop()
	}
	res.Stopped = r.stopping
	r.result = res
	r.mu.Unlock()
	// Followers are woken before Done closes: once Done is closed, the
	// end's wake has been sent (a follower watches Done as well).
	r.changed.Notify()
	close(r.done)
	r.cfg.Logger.Info("attempt ended", "job", r.attempt.JobID, "share", r.attempt.Share,
		"epoch", r.attempt.Epoch, "exit_code", res.ExitCode, "signal", res.Signal, "stopped", string(res.Stopped))
}

func (r *Run) closeFiles() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outClosed = true
	if r.stdout != nil {
		r.stdout.Close()
	}
	if r.stderr != nil {
		r.stderr.Close()
	}
}

// env is the attempt's whole environment: the base, the job's own variables,
// its devices, then gpumesh's variables, which the job cannot override.
func (r *Run) env() map[string]string {
	a := r.attempt
	env := map[string]string{}
	for k, v := range r.cfg.BaseEnv {
		env[k] = v
	}
	privateEnv(env, a.Private)
	for k, v := range a.Env {
		env[k] = v
	}
	for k, v := range a.DeviceEnv {
		env[k] = v
	}
	env["HOME"] = r.WorkDir()
	gpumeshEnv(env, a, r.tmpDir(), r.WorkDir(), r.CheckpointDir())
	return env
}

// gpumeshEnv sets gpumesh's own variables of attempt a, which the job
// cannot override, with the paths as the job sees them (on the host, or
// inside its container).
func gpumeshEnv(env map[string]string, a Attempt, tmpDir, workDir, checkpointDir string) {
	env["TMPDIR"] = tmpDir
	env["GPUMESH_JOB_ID"] = a.JobID
	env["GPUMESH_SHARE"] = strconv.Itoa(a.Share)
	env["GPUMESH_EPOCH"] = strconv.FormatUint(a.Epoch, 10)
	env[fence.AttemptEnv] = a.Name() // what a fence keeper finds the attempt's processes by
	env["GPUMESH_LOCAL_CARDS"] = strconv.Itoa(a.LocalCards)
	env["GPUMESH_WORK_DIR"] = workDir
	env["GPUMESH_CHECKPOINT_DIR"] = checkpointDir
	if g := a.Gang; g != nil {
		env["NNODES"] = strconv.Itoa(g.NNodes)
		env["NODE_RANK"] = strconv.Itoa(g.NodeRank)
		env["MASTER_ADDR"] = g.MasterAddr
		env["MASTER_PORT"] = strconv.Itoa(g.MasterPort)
		env["WORLD_SIZE"] = strconv.Itoa(g.WorldSize)
	}
	if a.Private != nil {
		env["GPUMESH_PRIVATE_ADDR"] = a.Private.Addr.Addr().String()
	}
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lookPath finds the command in the job's PATH (not the node's), among the
// files the job sees (hiddenBy names what hides a path from it); a name
// with a slash is taken relative to the work dir. Its error says what was
// looked for, in words for the job's owner: "executable file not found
// in $PATH: nvidia-smi", and where the sandbox hid one that exists.
func lookPath(name, path, workDir string, hiddenBy func(string) string) (string, error) {
	if filepath.IsAbs(name) {
		if h := hiddenBy(name); h != "" {
			return "", fmt.Errorf("%s is in %s, which the sandbox hides from jobs", name, h)
		}
		return name, nil
	}
	if filepath.Base(name) != name {
		return filepath.Join(workDir, name), nil
	}
	hidden := ""
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			if h := hiddenBy(p); h != "" {
				if hidden == "" {
					hidden = fmt.Sprintf(" (%s is in %s, which the sandbox hides from jobs)", p, h)
				}
				continue
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s%s", exec.ErrNotFound, name, hidden)
}
