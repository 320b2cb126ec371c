// Package wire is the framing of gpumesh's tunnels into running jobs,
// shared by the node (node/tunnel), the API and the CLI's client: the
// frames of an exec session, and the name of the HTTP upgrade that turns
// an API request into a tunnel.
//
// An exec session is a byte stream of frames, each a type byte, a
// big-endian uint32 length and that many bytes of payload:
//
//	client → job: Stdin (bytes), StdinEOF (none), Resize (rows, cols as
//	              two big-endian uint16), Signal (a name: "INT", "TERM"…)
//	job → client: Stdout (bytes), Stderr (bytes), Exit (a big-endian
//	              int32 exit code, then the name of the signal that ended
//	              the process, if one did; code -1 then)
//
// The client ends the session by closing its side after Exit; the job's
// side ends a session whose client went away by hanging up the command.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Upgrade is the protocol name of the HTTP upgrade (Upgrade header) that
// makes an API request a tunnel: the node answers 101 Switching Protocols
// and the connection carries the tunnel from then on.
const Upgrade = "gpumesh-tunnel"

// Frame types.
const (
	Stdin    byte = 'i'
	StdinEOF byte = 'c'
	Resize   byte = 'w'
	Signal   byte = 's'
	Stdout   byte = 'o'
	Stderr   byte = 'e'
	Exit     byte = 'x'
)

// MaxFrame is the largest payload of one frame.
const MaxFrame = 64 << 10

// ErrFrame is wrapped by the errors of malformed frames.
var ErrFrame = errors.New("malformed tunnel frame")

// Frame is one frame of an exec session.
type Frame struct {
	Type byte
	Data []byte
}

// Writer writes frames; it is safe for concurrent use, a frame at a time.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer on w. Each frame is written with one Write.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one frame; data longer than MaxFrame is split into
// several frames of the same type.
func (fw *Writer) Write(typ byte, data []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), MaxFrame)
		buf := make([]byte, 5+n)
		buf[0] = typ
		binary.BigEndian.PutUint32(buf[1:5], uint32(n))
		copy(buf[5:], data[:n])
		if _, err := fw.w.Write(buf); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Stream returns an io.Writer whose every Write is one frame of type typ
// (or several, past MaxFrame): a process's stdout or stderr.
func (fw *Writer) Stream(typ byte) io.Writer { return streamWriter{fw, typ} }

type streamWriter struct {
	fw  *Writer
	typ byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.fw.Write(s.typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Reader reads frames.
type Reader struct{ r *bufio.Reader }

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{bufio.NewReaderSize(r, 32<<10)} }

// Read returns the next frame; io.EOF at a clean end between frames.
func (fr *Reader) Read() (Frame, error) {
	var h [5]byte
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: cut off in a header", ErrFrame)
		}
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return Frame{}, fmt.Errorf("%w: %d bytes, at most %d", ErrFrame, n, MaxFrame)
	}
	f := Frame{Type: h[0], Data: make([]byte, n)}
	if _, err := io.ReadFull(fr.r, f.Data); err != nil {
		return Frame{}, fmt.Errorf("%w: cut off in a payload: %w", ErrFrame, err)
	}
	return f, nil
}

// ResizeData is a Resize frame's payload.
func ResizeData(rows, cols uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b, rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return b
}

// ParseResize reads a Resize frame's payload.
func ParseResize(b []byte) (rows, cols uint16, err error) {
	if len(b) != 4 {
		return 0, 0, fmt.Errorf("%w: resize of %d bytes, want 4", ErrFrame, len(b))
	}
	return binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:]), nil
}

// ExitData is an Exit frame's payload.
func ExitData(code int, signal string) []byte {
	b := make([]byte, 4, 4+len(signal))
	binary.BigEndian.PutUint32(b, uint32(int32(code)))
	return append(b, signal...)
}

// ParseExit reads an Exit frame's payload.
func ParseExit(b []byte) (code int, signal string, err error) {
	if len(b) < 4 || len(b) > 4+64 {
		return 0, "", fmt.Errorf("%w: exit of %d bytes", ErrFrame, len(b))
	}
	return int(int32(binary.BigEndian.Uint32(b))), string(b[4:]), nil
}

// Signals are the signal names a Signal frame may carry.
var Signals = []string{"INT", "TERM", "HUP", "QUIT", "KILL", "USR1", "USR2"}

// ExecRequest is the body of POST /v1/jobs/ID/exec: what to run in which
// share. The node that runs the share runs exactly what its owner signed.
type ExecRequest struct {
	// Share is the share to run in (default 0).
	Share int `json:"share,omitempty"`
	// Command is the program and its arguments, looked up in the job's
	// PATH.
	Command []string `json:"command"`
	// TTY asks for a pseudo-terminal; Rows and Cols are its first size,
	// Term its TERM.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	Term string `json:"term,omitempty"`
	// Stdin says the client sends input; without it the command's stdin
	// is empty.
	Stdin bool `json:"stdin,omitempty"`
}

// ForwardRequest is the body of POST /v1/jobs/ID/forward: one connection
// to Port inside the share's network.
type ForwardRequest struct {
	Share int `json:"share,omitempty"`
	Port  int `json:"port"`
}
