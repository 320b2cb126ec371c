package fence

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// Timeouts of the client.
const (
	// StartTimeout bounds Start's wait for the keeper's ready line.
	StartTimeout = 10 * time.Second
	// WriteTimeout bounds one command's write to the keeper. The pipe holds
	// 64 KiB, hundreds of commands: only a keeper that has stopped reading
	// fills it. One that does not take a command within WriteTimeout is
	// killed and counted lost (see Keeper).
	WriteTimeout = time.Second
	// CloseTimeout bounds Close's wait for the keeper to exit after close;
	// past it the keeper is killed.
	CloseTimeout = 5 * time.Second
	// FencedBuffer is the capacity of the Fenced channel.
	FencedBuffer = 256
)

var (
	// ErrLost is wrapped by the errors of Arm, Disarm and Close once the
	// keeper has died, stopped reading, or broken the protocol.
	ErrLost = errors.New("fence: keeper lost")
	// ErrClosed is returned by Arm and Disarm after Close.
	ErrClosed = errors.New("fence: keeper closed")
)

// Command returns the argv that runs the keeper from this very binary:
// {os.Executable(), Subcommand}. The binary's main must hand such a command
// line to Main before it parses flags.
func Command() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fence: locating this binary for the keeper: %w", err)
	}
	return []string{exe, Subcommand}, nil
}

// Keeper is the node's handle on its keeper process: a Fencer whose fences
// hold while the node is frozen or dead.
//
// Commands are written straight to the keeper's stdin pipe under a mutex,
// each with a write deadline of WriteTimeout, so no caller waits longer than
// about that for a stuck keeper. When the keeper exits on its own, breaks
// the protocol or does not take a command in time, it is lost: the Keeper
// kills it (so that it cannot fence later, on deadlines no longer kept),
// logs that once at error level, and from then on Arm and Disarm return an
// error wrapping ErrLost. The node then runs without external fencing: its
// own self-fencing is all that is left, and it may start another Keeper.
//
// A Keeper owns one goroutine, which reads the keeper's events; Close waits
// for it and for the process.
type Keeper struct {
	log    *slog.Logger
	cmd    *exec.Cmd
	in     *os.File // the keeper's stdin; writes have deadlines
	fenced chan string
	done   chan struct{} // closed when the reader has seen the process exit
	exit   error         // cmd.Wait's answer, set before done is closed

	mu      sync.Mutex // serializes writes; guards what follows
	buf     []byte
	closing bool  // Close began: no more commands
	lost    error // why the keeper is lost; nil while it works

	closeOnce sync.Once
	closeErr  error
}

// Start starts the keeper with argv (from Command, in a test a binary that
// runs Main) in a process group of its own, and returns once it has
// announced itself, or an error after StartTimeout. The keeper's stderr goes
// to log, a line at a time. On platforms without process groups Start
// returns an error wrapping errors.ErrUnsupported; use Nop there.
func Start(argv []string, log *slog.Logger) (*Keeper, error) {
	if !supported {
		return nil, fmt.Errorf("fence: %w", errUnsupported)
	}
	if len(argv) == 0 {
		return nil, errors.New("fence: starting the keeper: empty command")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "fence")

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("fence: starting the keeper: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if !filepath.IsAbs(cmd.Path) {
		if abs, err := filepath.Abs(cmd.Path); err == nil {
			cmd.Path = abs // it runs in /, below
		}
	}
	cmd.Dir = "/" // do not hold the node's working directory
	cmd.Stdin = stdinR
	cmd.Stderr = &stderrLog{log: log}
	setProcessGroup(cmd)
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	stdinR.Close() // the keeper has its own copy
	if err != nil {
		stdinW.Close()
		return nil, fmt.Errorf("fence: starting the keeper %s: %w", argv[0], err)
	}

	k := &Keeper{
		log:    log.With("keeper_pid", cmd.Process.Pid),
		cmd:    cmd,
		in:     stdinW,
		fenced: make(chan string, FencedBuffer),
		done:   make(chan struct{}),
	}
	ready := make(chan error, 1)
	go k.read(stdout, ready)

	t := time.NewTimer(StartTimeout)
	defer t.Stop()
	select {
	case err = <-ready:
	case <-t.C:
		err = fmt.Errorf("fence: the keeper %s did not announce itself within %v", argv[0], StartTimeout)
	}
	if err != nil {
		k.abort()
		return nil, err
	}
	return k, nil
}

// abort kills the keeper (before its stdin is closed, so that it cannot
// act on the end of its input) and waits for it.
func (k *Keeper) abort() {
	k.mu.Lock()
	k.closing = true
	_ = k.cmd.Process.Kill()
	k.in.Close()
	k.mu.Unlock()
	<-k.done
}

// Arm sets or moves the deadline of the attempt key (see Fencer). within is
// truncated to whole milliseconds, from 0 to MaxWithin; key is 1 to
// MaxKeyLen bytes of printable ASCII without spaces; pgid is above 1;
// cgroupDir is "" or a clean absolute path. The deadline counts from when the
// keeper reads the command, a little after Arm returns: leave a margin.
func (k *Keeper) Arm(key string, pgid int, cgroupDir string, within time.Duration) error {
	c := command{verb: verbArm, key: key, pgid: pgid, cgroup: cgroupDir, within: within.Truncate(time.Millisecond)}
	if err := c.validate(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return k.send(c)
}

// Prearm arms the attempt key before its process starts (see Fencer): a
// node that freezes or dies between the start and Arm still has the
// process killed by the deadline, found by its AttemptEnv.
func (k *Keeper) Prearm(key string, within time.Duration) error {
	c := command{verb: verbPrearm, key: key, within: within.Truncate(time.Millisecond)}
	if err := c.validate(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return k.send(c)
}

// Disarm forgets the attempt key (see Fencer).
func (k *Keeper) Disarm(key string) error {
	c := command{verb: verbDisarm, key: key}
	if err := c.validate(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return k.send(c)
}

// Fenced returns the keys the keeper fenced, in its order. A fenced key is
// forgotten by the keeper: the node should stop arming it (arming it again
// would arm it anew, on a process group that is gone or, later, reused).
// The channel holds FencedBuffer keys; when it is full, further keys are
// dropped with a warning log line. It is closed once the keeper has exited
// (after Close, or when it was lost).
func (k *Keeper) Fenced() <-chan string { return k.fenced }

func (k *Keeper) send(c command) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closing {
		return ErrClosed
	}
	if k.lost != nil {
		return k.lost
	}
	if err := k.write(c); err != nil {
		k.loseLocked(fmt.Errorf("%w: writing %s: %w", ErrLost, c.verb, err))
		return k.lost
	}
	return nil
}

// write writes c's line within WriteTimeout. k.mu is held.
func (k *Keeper) write(c command) error {
	k.buf = c.appendLine(k.buf[:0])
	if err := k.in.SetWriteDeadline(time.Now().Add(WriteTimeout)); err != nil {
		return err
	}
	_, err := k.in.Write(k.buf)
	return err
}

// loseLocked records why the keeper is lost, logs it and kills the keeper,
// once. k.mu is held.
func (k *Keeper) loseLocked(err error) {
	if k.lost != nil {
		return
	}
	k.lost = err
	k.log.Error("fence keeper lost: job attempts are no longer fenced when the node freezes or dies", "err", err)
	_ = k.cmd.Process.Kill()
}

// Close tells the keeper the node is shutting down cleanly: the keeper
// exits without killing anything, whatever is armed. Close waits for the
// keeper (killing it after CloseTimeout) and for the Keeper's goroutine.
// It returns nil when the keeper exited cleanly, else why it did not (an
// error wrapping ErrLost when it had been lost). Further calls return the
// same.
func (k *Keeper) Close() error {
	k.closeOnce.Do(func() { k.closeErr = k.shutdown() })
	return k.closeErr
}

func (k *Keeper) shutdown() error {
	k.mu.Lock()
	k.closing = true
	if k.lost == nil {
		if err := k.write(command{verb: verbClose}); err != nil {
			k.loseLocked(fmt.Errorf("%w: writing close: %w", ErrLost, err))
		}
	}
	lost := k.lost
	// Safe: the keeper either has close ahead of the end of its input, or
	// has been killed.
	k.in.Close()
	k.mu.Unlock()

	t := time.NewTimer(CloseTimeout)
	defer t.Stop()
	select {
	case <-k.done:
	case <-t.C:
		_ = k.cmd.Process.Kill()
		<-k.done
		return fmt.Errorf("fence: the keeper did not exit within %v of close; killed it", CloseTimeout)
	}
	if lost != nil {
		return lost
	}
	if k.exit != nil {
		return fmt.Errorf("fence: the keeper after close: %w", k.exit)
	}
	return nil
}

// read is the Keeper's goroutine: it checks the keeper's ready line
// (answering on ready), forwards fenced keys, logs error events, and at
// the end of the keeper's stdout waits for the process.
func (k *Keeper) read(stdout io.Reader, ready chan<- error) {
	defer close(k.done)
	defer close(k.fenced)

	started := false
	br := bufio.NewReaderSize(stdout, MaxLine)
	for {
		line, err := readLine(br)
		if errors.Is(err, errLineTooLong) {
			k.protocolError(&started, ready, err)
			continue
		}
		if err != nil {
			break
		}
		e, err := parseEvent(line)
		if err != nil {
			k.protocolError(&started, ready, err)
			continue
		}
		if !started {
			started = true
			if e.kind != eventReady || e.version != Version {
				ready <- fmt.Errorf("fence: the keeper's first line is %s, want \"ready %d\"", quote(string(line)), Version)
			} else {
				ready <- nil
			}
			continue
		}
		switch e.kind {
		case eventFenced:
			select {
			case k.fenced <- e.key:
			default:
				k.log.Warn("fenced event dropped: nobody reads Fenced", "key", e.key)
			}
		case eventError:
			k.log.Error("fence keeper reports an error", "err", e.text)
		case eventReady:
			k.log.Warn("fence keeper announced itself again", "version", e.version)
		}
	}
	k.exit = k.cmd.Wait()
	ended := k.exit
	if ended == nil {
		ended = errors.New("exit status 0")
	}

	if !started {
		ready <- fmt.Errorf("fence: the keeper exited before announcing itself: %w", ended)
		return
	}
	k.mu.Lock()
	if !k.closing {
		k.loseLocked(fmt.Errorf("%w: it exited: %w", ErrLost, ended))
	}
	k.mu.Unlock()
}

// protocolError handles a line the keeper should never have written: the
// keeper is not the one this client speaks with, so it is lost.
func (k *Keeper) protocolError(started *bool, ready chan<- error, err error) {
	if !*started {
		*started = true
		ready <- fmt.Errorf("fence: the keeper's first line: %w", err)
		return
	}
	k.mu.Lock()
	k.loseLocked(fmt.Errorf("%w: it broke the protocol: %w", ErrLost, err))
	k.mu.Unlock()
}

// stderrLog logs what the keeper writes to stderr (a panic, at worst), a
// line at a time. Only os/exec's copying goroutine writes to it.
type stderrLog struct {
	log *slog.Logger
	buf []byte
}

func (s *stderrLog) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.log.Warn("fence keeper stderr", "line", string(s.buf[:i]))
		s.buf = s.buf[i+1:]
	}
	if len(s.buf) > MaxLine {
		s.log.Warn("fence keeper stderr", "line", string(s.buf))
		s.buf = s.buf[:0]
	}
	return len(p), nil
}
