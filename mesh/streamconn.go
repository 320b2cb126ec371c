package mesh

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/network"
)

// streamConn is a libp2p stream as the net.Conn memberlist uses for state
// exchanges and fallback probes.
//
// Deadlines are enforced here rather than left to the stream: a stream that
// cannot enforce them (mocknet's ignore them) would otherwise let a silent
// peer hold a memberlist goroutine forever. When a deadline passes during a
// Read or Write, the stream is reset and the call returns an error for which
// Timeout() is true (os.ErrDeadlineExceeded). The stream's own deadlines are
// set as well.
type streamConn struct {
	s      network.Stream
	local  net.Addr
	remote net.Addr
	count  *atomic.Uint64 // bytes read and written, for Stats
	onDone func(*streamConn)

	mu       sync.Mutex
	rdl, wdl time.Time

	closeOnce sync.Once
}

var _ net.Conn = (*streamConn)(nil)

func (c *streamConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	dl := c.rdl
	c.mu.Unlock()
	stop, err := c.guard(dl)
	if err != nil {
		return 0, err
	}
	n, err := c.s.Read(p)
	if stop() && err != nil {
		err = os.ErrDeadlineExceeded
	}
	c.count.Add(uint64(n))
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	dl := c.wdl
	c.mu.Unlock()
	stop, err := c.guard(dl)
	if err != nil {
		return 0, err
	}
	n, err := c.s.Write(p)
	if stop() && err != nil {
		err = os.ErrDeadlineExceeded
	}
	c.count.Add(uint64(n))
	return n, err
}

// guard arms a timer that resets the stream at the deadline dl (zero: none).
// The returned func disarms it and tells whether it fired.
func (c *streamConn) guard(dl time.Time) (func() bool, error) {
	if dl.IsZero() {
		return func() bool { return false }, nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return nil, os.ErrDeadlineExceeded
	}
	var fired atomic.Bool
	t := time.AfterFunc(d, func() {
		fired.Store(true)
		_ = c.s.Reset()
	})
	return func() bool {
		t.Stop()
		return fired.Load()
	}, nil
}

// Close closes the stream; a second Close does nothing.
func (c *streamConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.s.Close()
		if c.onDone != nil {
			c.onDone(c)
		}
	})
	return err
}

// reset aborts the stream (used when the transport shuts down).
func (c *streamConn) reset() {
	_ = c.s.Reset()
}

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

func (c *streamConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl, c.wdl = t, t
	c.mu.Unlock()
	_ = c.s.SetDeadline(t)
	return nil
}

func (c *streamConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	_ = c.s.SetReadDeadline(t)
	return nil
}

func (c *streamConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	_ = c.s.SetWriteDeadline(t)
	return nil
}

// DialAddressTimeout opens a memberlist stream to the peer.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errTransportClosed
	}
	l, err := t.resolveLocked(a)
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if l.id == t.self {
		return nil, errors.New("mesh: stream to self")
	}
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	if t.cfg.beforeDial != nil {
		if err := t.cfg.beforeDial(ctx, l.id); err != nil {
			return nil, err
		}
	}
	s, err := t.newStream(ctx, l.id, t.streamProto)
	if err != nil {
		t.stats.dialFailures.Add(1)
		return nil, err
	}
	c := t.newStreamConn(s, l)
	if c == nil {
		_ = s.Reset()
		return nil, errTransportClosed
	}
	return c, nil
}

// handleStream hands a memberlist stream a peer opened to memberlist.
func (t *transport) handleStream(s network.Stream) {
	if checkConn(s) != nil {
		return
	}
	_ = s.Scope().SetService(swimService)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = s.Reset()
		return
	}
	l := t.linkLocked(s.Conn().RemotePeer())
	t.mu.Unlock()
	c := t.newStreamConn(s, l)
	if c == nil {
		_ = s.Reset()
		return
	}
	l.lastHeard.Store(time.Now().UnixNano())
	select {
	case t.streamCh <- c:
	case <-t.done:
		c.reset()
		_ = c.Close()
	}
}

// newStreamConn wraps and registers a memberlist stream, or returns nil once
// the transport is closed.
func (t *transport) newStreamConn(s network.Stream, l *link) *streamConn {
	c := &streamConn{
		s:      s,
		local:  t.selfAddr,
		remote: l.addr,
		count:  &t.stats.streamBytes,
		onDone: t.forgetConn,
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.conns[c] = struct{}{}
	t.stats.streams.Add(1)
	return c
}

func (t *transport) forgetConn(c *streamConn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}
