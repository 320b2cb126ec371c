package gossip

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// One-way messages to a peer go on one stream, kept open between Sends
// while they keep coming, and closed (FIN) once it has been idle for
// outIdle. A stream of its own for each Send cost both ends some 145 µs
// of CPU (BenchmarkDirectSend): the yamux SYN and its acknowledgement,
// protocol negotiation, a handler goroutine, both FINs — five or six
// frames, each a TLS record and a system call at both ends, for the one
// that carries the messages.
//
// The receiver waits inIdle for a stream's next frame, far longer than
// the sender keeps it idle, so that it never closes a stream a sender may
// be writing on: only the sender closes an idle stream. A Send that finds
// its stream reset or its connection gone before it wrote a byte opens a
// fresh one; a stream that fails during a Send is dropped with the error
// (delivery is not acknowledged: the layer above retries what matters).
const (
	outIdle = 2 * time.Second
	inIdle  = time.Minute
)

// outStream is the open stream of one-way messages to one peer.
type outStream struct {
	to   peer.ID
	s    network.Stream
	turn chan struct{} // held by the Send writing on it (a lock that heeds a context)
	used time.Time     // when the last Send on it ended; under turn
	gone bool          // failed or closed; under turn
}

// goneError is a stream found unusable before anything was written on
// it, for err.
type goneError struct{ err error }

func (e goneError) Error() string { return "stream gone: " + e.err.Error() }

// outStreams are a Direct's open streams of one-way messages, by peer.
type outStreams struct {
	mu sync.Mutex
	by map[peer.ID]*outStream
}

// send writes frames to the peer on its kept stream, opening one if it
// has none (or its stream went before anything was written).
func (d *Direct) send(ctx context.Context, to peer.ID, frames [][]byte) error {
	size := 0
	for _, f := range frames {
		size += binary.MaxVarintLen64 + len(f)
	}
	buf := make([]byte, 0, size)
	for _, f := range frames {
		buf = appendFrame(buf, f)
	}
	for {
		o, kept, err := d.outStream(ctx, to)
		if err != nil {
			return err
		}
		err = d.writeOut(ctx, o, buf)
		var gone goneError
		switch {
		case errors.As(err, &gone) && kept:
			continue // a fresh stream next: this one is out of the pool
		case errors.As(err, &gone):
			return fmt.Errorf("gossip: sending to %s: %w", to, gone.err)
		}
		return err
	}
}

// outStream returns the peer's kept stream (kept), or opens one and keeps
// it.
func (d *Direct) outStream(ctx context.Context, to peer.ID) (o *outStream, kept bool, err error) {
	d.out.mu.Lock()
	if o := d.out.by[to]; o != nil {
		d.out.mu.Unlock()
		return o, true, nil
	}
	d.out.mu.Unlock()
	s, err := d.open(ctx, to, d.msgProto)
	if err != nil {
		return nil, false, err
	}
	o = &outStream{to: to, s: s, turn: make(chan struct{}, 1)}
	d.out.mu.Lock()
	defer d.out.mu.Unlock()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		s.Reset()
		return nil, false, fmt.Errorf("gossip: sending to %s: %w", to, ErrClosed)
	}
	if prev := d.out.by[to]; prev != nil {
		// Another Send opened one meanwhile: this one goes unused.
		s.Close()
		return prev, true, nil
	}
	if d.out.by == nil {
		d.out.by = map[peer.ID]*outStream{}
	}
	d.out.by[to] = o
	return o, false, nil
}

// writeOut writes buf on o within Timeout (or until ctx ends). It returns
// a goneError when o was unusable and nothing was written; a stream that
// failed is reset and leaves the pool.
func (d *Direct) writeOut(ctx context.Context, o *outStream, buf []byte) error {
	select {
	case o.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("gossip: sending to %s: %w", o.to, ctx.Err())
	}
	defer func() { <-o.turn }()
	if o.gone {
		return goneError{errors.New("closed")}
	}
	if o.s.Conn().IsClosed() {
		d.dropOut(o)
		return goneError{errors.New("its connection closed")}
	}
	if unused, err := d.writeWithin(ctx, o.s, buf); err != nil {
		d.dropOut(o)
		if unused {
			return goneError{err}
		}
		return fmt.Errorf("gossip: sending to %s: %w", o.to, err)
	}
	o.used = time.Now()
	return nil
}

// writeWithin writes buf on a kept stream within Timeout, or until ctx
// ends. Writing can block on a peer that stopped reading (a frozen
// process, a link cut); the deadline and the context both end that with a
// reset. A failed write reports unused when nothing was written and
// neither ended it: the stream itself was gone, and a fresh one may take
// buf.
func (d *Direct) writeWithin(ctx context.Context, s network.Stream, buf []byte) (unused bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	_ = s.SetWriteDeadline(time.Now().Add(d.cfg.Timeout))
	stop := context.AfterFunc(wctx, func() { s.Reset() })
	n, err := s.Write(buf)
	if !stop() && err == nil {
		err = wctx.Err() // reset as the write ended
	}
	return err != nil && n == 0 && wctx.Err() == nil, err
}

// dropOut takes o out of the pool and resets it. Its turn is held.
func (d *Direct) dropOut(o *outStream) {
	o.s.Reset()
	d.forgetOut(o)
}

// forgetOut marks o gone and takes it out of the pool. Its turn is held.
func (d *Direct) forgetOut(o *outStream) {
	o.gone = true
	d.out.mu.Lock()
	if d.out.by[o.to] == o {
		delete(d.out.by, o.to)
	}
	d.out.mu.Unlock()
}

// closeIdleOut closes the kept streams (of messages and of asks) idle for
// outIdle, until the Direct closes; then it closes them all.
func (d *Direct) closeIdleOut() {
	defer d.wg.Done()
	tick := time.NewTicker(outIdle / 2)
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
			d.closeOut(func(*outStream) bool { return true }) // a Send writing now resets its own
			d.closeIdleAsks(time.Now(), true)
			return
		case now := <-tick.C:
			d.closeOut(func(o *outStream) bool { return now.Sub(o.used) >= outIdle })
			d.closeIdleAsks(now, false)
		}
	}
}

// closeOut closes the kept streams that idle says may go and that no
// Send is writing on.
func (d *Direct) closeOut(idle func(*outStream) bool) {
	d.out.mu.Lock()
	var streams []*outStream
	for _, o := range d.out.by {
		streams = append(streams, o)
	}
	d.out.mu.Unlock()
	for _, o := range streams {
		select {
		case o.turn <- struct{}{}:
		default:
			continue // a Send is writing on it
		}
		if !o.gone && idle(o) {
			o.s.Close()
			d.forgetOut(o)
		}
		<-o.turn
	}
}
