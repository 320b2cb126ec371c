package device

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// Runner runs a vendor tool and returns what it printed on standard output.
// The vendor backends read devices only through a Runner, so tests replay
// recorded output instead of running tools.
//
// Contract: Run may block until the tool exits or ctx is done, and is called
// from several goroutines at once. When the tool is not installed it returns
// an error wrapping exec.ErrNotFound; when the tool runs and fails it returns
// an error naming the command and what the tool said.
type Runner interface {
	Run(ctx context.Context, tool string, args ...string) ([]byte, error)
}

// ExecRunner runs tools found on PATH with os/exec.
type ExecRunner struct {
	// Timeout bounds one run; 0 means DefaultToolTimeout.
	Timeout time.Duration
	// MaxOutput bounds what is kept of standard output; a tool printing more
	// fails. 0 means DefaultToolOutput.
	MaxOutput int
}

// Defaults of ExecRunner.
const (
	DefaultToolTimeout = 30 * time.Second
	DefaultToolOutput  = 16 << 20
)

var _ Runner = ExecRunner{}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(tool)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	timeout, max := r.Timeout, r.MaxOutput
	if timeout <= 0 {
		timeout = DefaultToolTimeout
	}
	if max <= 0 {
		max = DefaultToolOutput
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	stdout := &limitedBuffer{max: max}
	stderr := &limitedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	name := strings.Join(append([]string{tool}, args...), " ")
	switch {
	case stdout.over:
		return nil, fmt.Errorf("%s: printed more than %d bytes", name, max)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", name, ctx.Err())
	case err != nil:
		msg := strings.TrimSpace(firstLine(stderr.String()))
		if msg == "" {
			msg = strings.TrimSpace(firstLine(stdout.String()))
		}
		if msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return stdout.Bytes(), nil
}

// limitedBuffer keeps at most max bytes and remembers that more came. It
// does not embed bytes.Buffer: io.Copy would use the buffer's ReadFrom and
// skip the limit.
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *limitedBuffer) String() string { return b.buf.String() }

var _ io.Writer = (*limitedBuffer)(nil)

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// isNotFound reports whether err says a tool is not installed.
func isNotFound(err error) bool { return errors.Is(err, exec.ErrNotFound) }
