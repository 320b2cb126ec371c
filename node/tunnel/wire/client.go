package wire

import (
	"errors"
	"fmt"
	"io"
)

// ErrBroken is wrapped by Client.Copy's error when the session ended
// without the command's exit: the tunnel broke.
var ErrBroken = errors.New("the connection to the job broke before the command exited")

// Client is the client's side of an exec session on an open tunnel.
// Resize and Signal may be called from any goroutine while Copy runs.
type Client struct {
	c  io.ReadWriteCloser
	fw *Writer
}

// NewClient returns the client side of an exec session on c.
func NewClient(c io.ReadWriteCloser) *Client { return &Client{c: c, fw: NewWriter(c)} }

// Resize tells the command's terminal its new size.
func (cl *Client) Resize(rows, cols uint16) error { return cl.fw.Write(Resize, ResizeData(rows, cols)) }

// Signal sends the command's process group a signal (one of Signals).
func (cl *Client) Signal(name string) error { return cl.fw.Write(Signal, []byte(name)) }

// Copy carries stdin (nil: none) to the command and its output to stdout
// and stderr until the command exits, and returns its exit code and the
// signal that ended it, if one did. It closes the tunnel before it
// returns. A read of stdin in progress is not waited for: the goroutine
// copying stdin ends at its next read, whose bytes have nowhere to go.
func (cl *Client) Copy(stdin io.Reader, stdout, stderr io.Writer) (code int, signal string, err error) {
	defer cl.c.Close()
	if stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := stdin.Read(buf)
				if n > 0 {
					if cl.fw.Write(Stdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					_ = cl.fw.Write(StdinEOF, nil)
					return
				}
			}
		}()
	}
	fr := NewReader(cl.c)
	for {
		f, err := fr.Read()
		if err != nil {
			return 0, "", fmt.Errorf("%w: %w", ErrBroken, err)
		}
		switch f.Type {
		case Stdout:
			if _, err := stdout.Write(f.Data); err != nil {
				return 0, "", fmt.Errorf("writing the command's output: %w", err)
			}
		case Stderr:
			if _, err := stderr.Write(f.Data); err != nil {
				return 0, "", fmt.Errorf("writing the command's errors: %w", err)
			}
		case Exit:
			return ParseExit(f.Data)
		default:
			return 0, "", fmt.Errorf("%w: unknown frame type %q", ErrFrame, f.Type)
		}
	}
}
