package tunnel

import (
	"errors"
	"io"
	"net"
)

// asConn gives a net.Conn the half-close a Conn has: TCP and Unix
// connections have it; others are closed whole instead.
func asConn(c net.Conn) Conn {
	if hc, ok := c.(Conn); ok {
		return hc
	}
	return wholeCloser{c}
}

type wholeCloser struct{ net.Conn }

func (w wholeCloser) CloseWrite() error { return w.Conn.Close() }

// pipeEnd is one end of a pipe between two goroutines of this node, with
// half-close: a tunnel whose job runs on the node that opened it.
type pipeEnd struct {
	r *io.PipeReader
	w *io.PipeWriter
}

// newPipe returns the two ends of a pipe.
func newPipe() (Conn, Conn) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &pipeEnd{r: ar, w: aw}, &pipeEnd{r: br, w: bw}
}

func (p *pipeEnd) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed
	}
	return n, err
}

func (p *pipeEnd) Write(b []byte) (int, error) { return p.w.Write(b) }

func (p *pipeEnd) CloseWrite() error { return p.w.Close() }

// Close ends both directions: the other end reads EOF and its writes fail.
func (p *pipeEnd) Close() error {
	p.w.Close()
	p.r.Close()
	return nil
}
