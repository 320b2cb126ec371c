package wire

import (
	"io"
	"net"
	"sync"
)

// HalfCloser is one side of a tunnel: a connection that can tell its
// other end that nothing more will be written.
type HalfCloser interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// spliceBuffer is the size of each direction's copy buffer.
const spliceBuffer = 256 << 10

// Splice carries bytes between a and b until both directions have ended,
// then closes both. A direction whose source ends cleanly closes the
// other side's writing (a half-close travels the tunnel); one that fails
// aborts both, so that the other direction ends too. It returns the bytes
// carried a→b and b→a.
func Splice(a, b HalfCloser) (ab, ba int64) {
	var wg sync.WaitGroup
	var once sync.Once
	fail := func() {
		once.Do(func() {
			abort(a)
			abort(b)
		})
	}
	one := func(dst, src HalfCloser, n *int64) {
		defer wg.Done()
		var err error
		if kernelCopies(dst, src) {
			// Socket to socket: the kernel moves the bytes (splice(2)).
			*n, err = dst.(io.ReaderFrom).ReadFrom(src)
		} else {
			// Anything else through one buffer of ours. Neither side's
			// WriteTo or ReadFrom may take over: a TCP connection's
			// falls back to a buffer of 32 KiB for a libp2p stream,
			// which cuts the stream into frames of half the size and a
			// third more TLS records.
			*n, err = io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, make([]byte, spliceBuffer))
		}
		if err != nil {
			fail()
			return
		}
		if err := dst.CloseWrite(); err != nil {
			fail()
		}
	}
	wg.Add(2)
	go one(b, a, &ab)
	go one(a, b, &ba)
	wg.Wait()
	a.Close()
	b.Close()
	return ab, ba
}

// kernelCopies reports whether a copy from src to dst can be left to the
// kernel: both are TCP or Unix sockets (whose ReadFrom splices).
func kernelCopies(dst, src io.Reader) bool { return isSocket(dst) && isSocket(src) }

func isSocket(c any) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// onlyReader and onlyWriter hide every method but Read and Write from
// io.CopyBuffer.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// abort ends a connection at once: a libp2p stream is reset, others are
// closed.
func abort(c io.Closer) {
	if r, ok := c.(interface{ Reset() error }); ok {
		_ = r.Reset()
		return
	}
	_ = c.Close()
}
