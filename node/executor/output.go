package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Stream names an output stream of an attempt.
type Stream string

// The streams ReadLog serves.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

func (s Stream) file() (string, error) {
	switch s {
	case Stdout, "":
		return stdoutFileName, nil
	case Stderr:
		return stderrFileName, nil
	}
	return "", fmt.Errorf("executor: unknown stream %q (want stdout or stderr)", string(s))
}

// ErrNoLog is returned by ReadLog for an attempt with no output file.
var ErrNoLog = errors.New("executor: no such attempt log")

// ReadLog reads up to max bytes of an attempt's stream from offset, from the
// file the attempt wrote under root. It works for running and ended attempts
// and after a node restart. It returns the bytes and the offset after them.
func ReadLog(root, attemptName string, stream Stream, offset, max int64) ([]byte, int64, error) {
	name, err := stream.file()
	if err != nil {
		return nil, offset, err
	}
	if filepath.Base(attemptName) != attemptName || attemptName == "." || attemptName == ".." {
		return nil, offset, fmt.Errorf("executor: bad attempt name %q", attemptName)
	}
	f, err := os.Open(filepath.Join(root, attemptName, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, offset, ErrNoLog
	}
	if err != nil {
		return nil, offset, fmt.Errorf("executor: %w", err)
	}
	defer f.Close()
	if offset < 0 {
		offset = 0
	}
	buf := make([]byte, max)
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, offset, fmt.Errorf("executor: %w", err)
	}
	return buf[:n], offset + int64(n), nil
}

// NotePrefix starts the lines Note writes to an attempt's standard error.
const NotePrefix = "gpumesh: "

// Note writes a line from the node to the attempt's standard error, where
// its owner reads its output (ReadLog, `gpumesh logs ID --stderr`):
// NotePrefix and msg, made one line. The node uses it for what happens to
// the attempt that its process cannot see, such as a checkpoint that could
// not be shipped. It fails before the process started and once it ended.
func (r *Run) Note(msg string) error {
	line := NotePrefix + strings.Join(strings.Fields(msg), " ") + "\n"
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.outClosed {
		return fmt.Errorf("executor: attempt %s is not running", r.attempt.Name())
	}
	w := &logWriter{file: r.stderr, tail: r.tail, changed: r.changed}
	if _, err := w.Write([]byte(line)); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	return nil
}

// logWriter sends a process's output to its file, the shared tail, and wakes
// followers. exec.Cmd calls Write from one goroutine per stream; Note from
// others (the file appends each write whole).
type logWriter struct {
	file    *os.File
	tail    *tailBuffer
	changed *notifier
}

func (w *logWriter) Write(p []byte) (int, error) {
	n, err := w.file.Write(p)
	w.tail.Write(p[:n])
	w.changed.Notify()
	return n, err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// notifier hands out a channel that is closed at the next Notify.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

func (n *notifier) C() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) Notify() {
	n.mu.Lock()
	close(n.ch)
	n.ch = make(chan struct{})
	n.mu.Unlock()
}
