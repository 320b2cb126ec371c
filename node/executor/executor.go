// Package executor runs one share of a job on this node as a process group:
// a private work directory, the job's payload unpacked into it, exactly the
// environment it needs (its cards, its identity, its gang rendezvous), its
// output captured to files with a bounded in-memory tail, and a stop that is
// SIGTERM, a grace period, then SIGKILL.
//
// The Executor owns one goroutine per running attempt (the one that waits for
// the process); Close stops every attempt and returns after those goroutines
// have exited.
//
//	ex, err := executor.New(executor.Config{Root: dataDir + "/attempts"})
//	run, err := ex.Start(executor.Attempt{JobID: id, Share: 0, Epoch: 1, Command: argv})
//	<-run.Done()
//	res := run.Result()
//	ex.Close()
package executor

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultGrace      = 10 * time.Second
	DefaultTailBytes  = 64 << 10
	DefaultMaxPayload = 64 << 20 // compressed/archived bytes read
	DefaultMaxUnpack  = 1 << 30  // bytes written when unpacking
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
	// MaxPayload bounds the bytes read from a payload archive. Default 64 MiB.
	MaxPayload int64
	// MaxUnpack bounds the bytes a payload may unpack to. Default 1 GiB.
	MaxUnpack int64
	// BaseEnv is the environment every job starts from before its own
	// variables. Default: PATH of this process, LANG=C.UTF-8. The node's own
	// environment is never passed on: it may hold secrets.
	BaseEnv map[string]string
	// Logger receives the executor's logs. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.TailBytes <= 0 {
		c.TailBytes = DefaultTailBytes
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxUnpack <= 0 {
		c.MaxUnpack = DefaultMaxUnpack
	}
	if c.BaseEnv == nil {
		c.BaseEnv = map[string]string{"PATH": os.Getenv("PATH"), "LANG": "C.UTF-8"}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
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
	// Payload, when not nil, is a tar archive (optionally gzip-compressed)
	// unpacked into the work directory before the process starts.
	Payload io.Reader
	// Checkpoint, when not nil, is a tar archive of the latest accepted
	// checkpoint, unpacked into $GPUMESH_CHECKPOINT_DIR before start.
	Checkpoint io.Reader
}

var jobIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Name is the attempt's directory name: "<job>-s<share>-e<epoch>".
func (a Attempt) Name() string { return fmt.Sprintf("%s-s%d-e%d", a.JobID, a.Share, a.Epoch) }

func (a Attempt) validate() error {
	switch {
	case !jobIDPattern.MatchString(a.JobID):
		return fmt.Errorf("executor: job id %q: want 1-128 of [A-Za-z0-9._-], not starting with a symbol", a.JobID)
	case a.Share < 0:
		return fmt.Errorf("executor: share %d: must not be negative", a.Share)
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
		return fmt.Errorf("executor: command and environment take %d bytes, at most %d", size, maxArgBytes)
	}
	return nil
}

// Executor starts attempts and owns their processes.
type Executor struct {
	cfg Config

	mu     sync.Mutex
	closed bool
	runs   map[string]*Run
	wg     sync.WaitGroup
}

// New returns an Executor that keeps attempt directories under cfg.Root.
func New(cfg Config) (*Executor, error) {
	if cfg.Root == "" {
		return nil, errors.New("executor: Root is required")
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Root, attemptDirPerm); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	return &Executor{cfg: cfg, runs: map[string]*Run{}}, nil
}

// Start prepares the attempt's directory, unpacks its payload and checkpoint,
// and starts its process. It returns once the process has started (or failed
// to); the Run reports the end. Starting an attempt whose name is already
// running returns that Run.
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
	e.mu.Unlock()

	if err := r.prepare(); err != nil {
		e.forget(r)
		return nil, err
	}
	if err := r.start(); err != nil {
		e.forget(r)
		return nil, err
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		r.wait()
		e.forget(r)
	}()
	return r, nil
}

func (e *Executor) forget(r *Run) {
	e.mu.Lock()
	if e.runs[r.attempt.Name()] == r {
		delete(e.runs, r.attempt.Name())
	}
	e.mu.Unlock()
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
	return nil
}
