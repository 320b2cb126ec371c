package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Defaults of Config.
const (
	DefaultGrace      = 10 * time.Second
	DefaultTailBytes  = 64 << 10
	DefaultKeepLogs   = 7 * 24 * time.Hour
	maxCommandArgs    = 4096
	maxEnvEntries     = 4096
	maxArgBytes       = 256 << 10 // total bytes of argv + env
	attemptDirPerm    = 0o700
	attemptFilePerm   = 0o600
	payloadDirName    = "work"
	stdoutFileName    = "stdout.log"
	stderrFileName    = "stderr.log"
	checkpointDirName = "checkpoint"
	tmpDirName        = "tmp"
)

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("executor: closed")

// ErrUnsupported is returned by Start on platforms where jobs cannot run
// (Windows: run the node under WSL2 or a Linux image).
var ErrUnsupported = errors.New("executor: running jobs is not supported on this platform; run the node under Linux or WSL2")

// Config configures an Executor. Root is required; other fields default when
// zero.
type Config struct {
	// Root is the directory that holds one directory per attempt.
	Root string
	// Grace is the time between SIGTERM and SIGKILL on Stop. Default 10 s.
	Grace time.Duration
	// TailBytes bounds the in-memory tail of each attempt's output. Default 64 KiB.
	TailBytes int
	// BaseEnv is the environment every job starts from before its own
	// variables. Default: PATH of this process, LANG=C.UTF-8. The node's own
	// environment is never passed on: it may hold secrets.
	BaseEnv map[string]string
	// Logger receives the executor's logs. Default: discard.
	Logger *slog.Logger

	// Isolation is how jobs are kept from the node and from each other.
	// Default (""): IsolationProcess, for compatibility; a node should pass
	// IsolationAuto.
	Isolation Isolation

	// The fields below matter only in sandbox mode.

	// UIDMin..UIDMax is the range of uids (and equal gids) given to running
	// attempts, one each. Ids that /etc/passwd, /etc/group, /etc/subuid or
	// /etc/subgid use are skipped. Default 200000..265535.
	UIDMin, UIDMax uint32
	// LockDir holds one lock file per uid in use, shared by every executor
	// on the host so that no two running attempts get the same uid. Default
	// DefaultLockDir.
	LockDir string
	// KeepAttemptDirs keeps an attempt's work and tmp directories after it
	// ends (owned by root in sandbox mode), for debugging, until Prune
	// removes the attempt's directory. Default false: tmp is removed when
	// the attempt ends, work when its runner calls Tidy (tidy.go).
	KeepAttemptDirs bool
	// KeepLogs is how long the directory of an ended attempt (its logs
	// and checkpoint directory) is kept, for a node's Prune. Default
	// DefaultKeepLogs (7 days).
	KeepLogs time.Duration
	// HideDirs are directories a job must not see (the node's data dir and
	// keys), covered by an empty read-only tmpfs in its mount namespace.
	// /root, /home, /run and Root are always hidden, and /tmp, /var/tmp and
	// /dev/shm are private to the attempt.
	HideDirs []string
	// DevDir is where the device nodes named in Limits.Devices are found.
	// Default "/dev"; tests point it at fake nodes.
	DevDir string
	// CgroupRoot is where the cgroup hierarchies are mounted. Default
	// "/sys/fs/cgroup". cgroup v2 is used when its memory and pids
	// controllers are available there, else the v1 memory, pids, cpu,
	// devices and freezer hierarchies.
	CgroupRoot string
	// CgroupParent is the cgroup, relative to each hierarchy's root, under
	// which attempts get theirs ("<parent>/u<uid>"). Default "gpumesh".
	// Under systemd with cgroup v2, point it at a delegated subtree that
	// holds no processes.
	CgroupParent string
	// BlockPorts are TCP/UDP ports a job on NetworkEgress may not connect
	// to on any address: the node's API and mesh ports. (The node's own
	// addresses are refused on every port anyway.)
	BlockPorts []int
	// EgressNet is the pool of /31 links between the node and its egress
	// namespaces: the attempt with uid U gets link U-UIDMin, so a pool of
	// N addresses serves the N/2 lowest uids of the range (uids are handed
	// out lowest first). Default DefaultEgressNet (8192 links), inside
	// link-local space and clear of 169.254.169.0/24.
	EgressNet netip.Prefix
	// Runtime is the OCI runtime (a crun or runc executable) that runs
	// attempts in images (Attempt.Image), in sandbox mode only; "" runs
	// none. See FindRuntime.
	Runtime string
	// ContainerDir holds a directory per running image attempt: its
	// runtime bundle and the mount points the container's user must be
	// able to reach (its parents are searchable by all, unlike the
	// attempts' own). Default DefaultContainerDir.
	ContainerDir string
	// ContainerIDBase is the host uid and gid that uid and gid 0 of every
	// image attempt's user namespace map to (ids 0-65535 map to
	// ContainerIDBase+0 to +65535); the image's files are owned by ids of
	// that range (node/image's Config.UIDShift). Default
	// DefaultContainerIDBase.
	ContainerIDBase uint32
	// Nameservers go into the resolv.conf of a job on NetworkEgress.
	// Default: the node's own nameservers that are public addresses, else
	// 1.1.1.1 and 8.8.8.8.
	Nameservers []netip.Addr
}

// Defaults of the sandbox fields of Config.
const (
	DefaultUIDMin       = 200000
	DefaultUIDMax       = 265535
	DefaultLockDir      = "/run/gpumesh/sandbox"
	DefaultCgroupRoot   = "/sys/fs/cgroup"
	DefaultCgroupParent = "gpumesh"
	DefaultDevDir       = "/dev"
	DefaultEgressNet    = "169.254.64.0/18" // Config.EgressNet
	// DefaultContainerIDBase is Config.ContainerIDBase's default: 2^24,
	// far above the ids of accounts and the usual subordinate ranges.
	DefaultContainerIDBase = 1 << 24
	DefaultContainerDir    = "/run/gpumesh-containers" // Config.ContainerDir
)

func (c Config) withDefaults() Config {
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.TailBytes <= 0 {
		c.TailBytes = DefaultTailBytes
	}
	if c.KeepLogs <= 0 {
		c.KeepLogs = DefaultKeepLogs
	}
	if c.BaseEnv == nil {
		c.BaseEnv = map[string]string{"PATH": os.Getenv("PATH"), "LANG": "C.UTF-8"}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Isolation == "" {
		c.Isolation = IsolationProcess
	}
	if c.UIDMin == 0 && c.UIDMax == 0 {
		c.UIDMin, c.UIDMax = DefaultUIDMin, DefaultUIDMax
	}
	if c.LockDir == "" {
		c.LockDir = DefaultLockDir
	}
	if c.DevDir == "" {
		c.DevDir = DefaultDevDir
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	if !c.EgressNet.IsValid() {
		c.EgressNet = netip.MustParsePrefix(DefaultEgressNet)
	}
	if c.ContainerDir == "" {
		c.ContainerDir = DefaultContainerDir
	}
	if c.ContainerIDBase == 0 {
		c.ContainerIDBase = DefaultContainerIDBase
	}
	return c
}

// validate checks the fields New cannot default; the error names the field.
func (c Config) validate() error {
	if _, err := ParseIsolation(string(c.Isolation)); err != nil {
		return err
	}
	switch {
	case c.UIDMin == 0 || c.UIDMax < c.UIDMin:
		return fmt.Errorf("executor: uid range %d..%d: want 0 < UIDMin <= UIDMax", c.UIDMin, c.UIDMax)
	case c.UIDMax >= 1<<31:
		return fmt.Errorf("executor: uid range %d..%d: UIDMax must be below 2^31", c.UIDMin, c.UIDMax)
	case c.ContainerIDBase < 65536 || c.ContainerIDBase > 1<<31-65536 || (c.ContainerIDBase <= c.UIDMax && c.ContainerIDBase+65535 >= c.UIDMin):
		return fmt.Errorf("executor: ContainerIDBase %d: want 65536 to 2^31-65536, clear of the uid range %d..%d", c.ContainerIDBase, c.UIDMin, c.UIDMax)
	case !c.EgressNet.Addr().Is4() || c.EgressNet.Bits() > 30:
		return fmt.Errorf("executor: egress net %s: want an IPv4 prefix of /30 or wider", c.EgressNet)
	case !filepath.IsAbs(c.LockDir) || !filepath.IsAbs(c.DevDir) || !filepath.IsAbs(c.CgroupRoot):
		return fmt.Errorf("executor: LockDir %q, DevDir %q and CgroupRoot %q must be absolute", c.LockDir, c.DevDir, c.CgroupRoot)
	case filepath.IsAbs(c.CgroupParent) || strings.Contains(c.CgroupParent, ".."):
		return fmt.Errorf("executor: CgroupParent %q: want a path relative to the hierarchy root", c.CgroupParent)
	}
	for _, d := range c.HideDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			return fmt.Errorf("executor: HideDirs: %q: want an absolute path other than /", d)
		}
	}
	for _, p := range c.BlockPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("executor: BlockPorts: %d is not a port", p)
		}
	}
	for _, a := range c.Nameservers {
		if !a.Is4() {
			return fmt.Errorf("executor: Nameservers: %s: egress is IPv4 only", a)
		}
	}
	return nil
}

// Gang carries the rendezvous variables torchrun takes for a job spread over
// several nodes. Share 0's node is the master.
type Gang struct {
	NNodes     int    // NNODES
	NodeRank   int    // NODE_RANK
	MasterAddr string // MASTER_ADDR
	MasterPort int    // MASTER_PORT
	WorldSize  int    // WORLD_SIZE: total cards of the job
}

// Attempt is one share of one job under one epoch.
type Attempt struct {
	JobID   string
	Share   int
	Epoch   uint64
	Command []string          // argv; Command[0] is looked up in PATH
	Env     map[string]string // the job's own variables from its spec
	// DeviceEnv makes exactly the attempt's cards visible
	// (device.VisibleEnv); it overrides Env.
	DeviceEnv  map[string]string
	LocalCards int   // GPUMESH_LOCAL_CARDS
	Gang       *Gang // nil for a job on one node
	// Work, when not nil, fills the work directory (empty, and owned by
	// the node until the process starts) before the process starts: the
	// node restores the job's payload and stages its inputs there. An
	// error fails the start, and its text is the reason.
	Work func(dir string) error
	// Checkpoint, when not nil, fills $GPUMESH_CHECKPOINT_DIR (empty, and
	// owned by the node until the process starts) with the checkpoint the
	// attempt resumes from; an error fails the start.
	Checkpoint func(dir string) error
	// Limits is what the attempt may use, already capped by the supplier's
	// Policy; enforced in sandbox mode only.
	Limits Limits
	// Image, when set, runs the attempt in an OCI image under the OCI
	// runtime (Config.Runtime; sandbox mode): its process is Image's, and
	// Command is not used.
	Image *Container
	// Private, when set, puts the attempt on its job's private network
	// (sandbox mode, network none or egress; see PrivateNet).
	Private *PrivateNet
	// Starting, when not nil, is called just before the attempt's process
	// starts, once everything before it is ready: a node prearms its fence
	// keeper there (the process carries fence.AttemptEnv=Name()), so that
	// a node frozen within the start, before Started, still has the
	// process fenced. It must not block, and must not call the Executor.
	Starting func()
	// Started, when not nil, is called with the attempt's process group
	// and cgroup v2 directory ("" for none), as Run.Process returns them,
	// the moment its process has started: before Start logs or returns
	// anything. A node hands them to its fence keeper there, so that a
	// node frozen right after the start still has the process fenced
	// (node/fence). It must not block, and must not call the Executor.
	Started func(pgid int, cgroupDir string)
}

// jobIDExpr is what a job ID may be; jobIDPattern matches it whole, and
// attemptNamePattern (tidy.go) an attempt's name built from it.
const jobIDExpr = `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`

var jobIDPattern = regexp.MustCompile(`^` + jobIDExpr + `$`)

// Name is the attempt's directory name: "<job>-s<share>-e<epoch>".
func (a Attempt) Name() string { return fmt.Sprintf("%s-s%d-e%d", a.JobID, a.Share, a.Epoch) }

func (a Attempt) validate() error {
	switch {
	case !jobIDPattern.MatchString(a.JobID):
		return fmt.Errorf("executor: job id %q: want 1-128 of [A-Za-z0-9._-], not starting with a symbol", a.JobID)
	case a.Share < 0:
		return fmt.Errorf("executor: share %d: must not be negative", a.Share)
	case a.Image != nil:
		if err := a.Image.validate(); err != nil {
			return err
		}
	case len(a.Command) == 0 || a.Command[0] == "":
		return errors.New("executor: command is empty")
	case len(a.Command) > maxCommandArgs:
		return fmt.Errorf("executor: command has %d arguments, at most %d", len(a.Command), maxCommandArgs)
	case len(a.Env)+len(a.DeviceEnv) > maxEnvEntries:
		return fmt.Errorf("executor: %d environment variables, at most %d", len(a.Env)+len(a.DeviceEnv), maxEnvEntries)
	}
	size := 0
	for _, s := range a.Command {
		size += len(s)
	}
	for k, v := range a.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return fmt.Errorf("executor: environment variable %q: name must be non-empty without '=' or NUL", k)
		}
		size += len(k) + len(v)
	}
	if size > maxArgBytes {
		return fmt.Errorf("executor: command and environment take %s, at most %s", text.Bytes(int64(size)), text.Bytes(maxArgBytes))
	}
	if err := a.Limits.Validate(); err != nil {
		return err
	}
	if a.Private != nil {
		return a.Private.validate(a.Limits)
	}
	return nil
}

// Executor starts attempts and owns their processes.
type Executor struct {
	cfg Config
	iso isolator

	mu     sync.Mutex
	closed bool
	runs   map[string]*Run
	// untidied holds the attempts started whose runner has not called
	// Tidy yet: Prune leaves their work directories alone.
	untidied map[string]bool
	wg       sync.WaitGroup
}

// New returns an Executor that keeps attempt directories under cfg.Root.
func New(cfg Config) (*Executor, error) {
	if cfg.Root == "" {
		return nil, errors.New("executor: Root is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Root, attemptDirPerm); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	// The sandbox mounts the attempt's directories at the same paths in the
	// job's tree, so they must be absolute and free of links.
	root, err := filepath.Abs(cfg.Root)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	cfg.Root = root
	iso, err := newIsolator(cfg)
	if err != nil {
		return nil, err
	}
	return &Executor{cfg: cfg, iso: iso, runs: map[string]*Run{}, untidied: map[string]bool{}}, nil
}

// Capabilities says what this executor enforces: its isolation mode, and
// in sandbox mode its cgroup version and the network modes it provides.
func (e *Executor) Capabilities() Capabilities { return e.iso.capabilities() }

// Start prepares the attempt's directory, has its work and checkpoint
// directories filled (Attempt.Work, Attempt.Checkpoint), and starts its
// process. It returns once the process has started (or failed to); the
// Run reports the end. Starting an attempt whose name is already running
// returns that Run.
func (e *Executor) Start(a Attempt) (*Run, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if r, ok := e.runs[a.Name()]; ok {
		e.mu.Unlock()
		return r, nil
	}
	r := newRun(e.cfg, a, filepath.Join(e.cfg.Root, a.Name()))
	e.runs[a.Name()] = r
	e.untidied[a.Name()] = true
	e.wg.Add(1) // under the lock: a Close from now on waits for this run
	e.mu.Unlock()

	if err := r.prepare(e.iso); err != nil {
		e.failed(r)
		e.wg.Done()
		return nil, err
	}
	if err := r.start(); err != nil {
		r.jail.finish()
		e.failed(r)
		e.wg.Done()
		return nil, err
	}
	go func() {
		defer e.wg.Done()
		r.wait()
		e.forget(r)
	}()
	// A Close that came while the process started could not stop it yet.
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		r.Stop(StopShutdown)
	}
	return r, nil
}

func (e *Executor) forget(r *Run) {
	e.mu.Lock()
	if e.runs[r.attempt.Name()] == r {
		delete(e.runs, r.attempt.Name())
	}
	e.mu.Unlock()
}

// failed forgets a run that did not start, and removes what was made of
// its work and tmp directories (its logs may still tell why).
func (e *Executor) failed(r *Run) {
	e.forget(r)
	e.mu.Lock()
	delete(e.untidied, r.attempt.Name())
	e.mu.Unlock()
	if !e.cfg.KeepAttemptDirs {
		if err := tidyDir(r.dir); err != nil {
			e.cfg.Logger.Warn("executor: attempt dir", "err", err)
		}
	}
}

// Running returns the attempts whose processes have not exited yet.
func (e *Executor) Running() []*Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Run, 0, len(e.runs))
	for _, r := range e.runs {
		out = append(out, r)
	}
	return out
}

// Lookup returns the running attempt with the given name.
func (e *Executor) Lookup(name string) (*Run, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.runs[name]
	return r, ok
}

// Close stops every running attempt (SIGTERM, grace, SIGKILL) and returns
// after their processes have exited and been reaped.
func (e *Executor) Close() error {
	e.mu.Lock()
	e.closed = true
	runs := make([]*Run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	for _, r := range runs {
		r.Stop(StopShutdown)
	}
	e.wg.Wait()
	e.iso.close()
	return nil
}

// Root is the directory holding the attempts' directories (Config.Root),
// where ReadLog finds their output.
func (e *Executor) Root() string { return e.cfg.Root }

// Config is the executor's configuration with its defaults filled in.
// Slices and maps are copies.
func (e *Executor) Config() Config {
	c := e.cfg
	c.BaseEnv = maps.Clone(c.BaseEnv)
	c.HideDirs = slices.Clone(c.HideDirs)
	c.BlockPorts = slices.Clone(c.BlockPorts)
	c.Nameservers = slices.Clone(c.Nameservers)
	return c
}
