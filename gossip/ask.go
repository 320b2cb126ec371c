package gossip

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	msmux "github.com/multiformats/go-multistream"
)

// Short calls on a kept stream (Ask). A Call has a stream of its own: the
// caller opens it, writes the request and half-closes; the peer accepts
// it, acknowledges the protocol, writes the reply, the end and closes —
// nine writes, each a TLS record and a system call, and a goroutine at the
// peer (about 180 µs of CPU, both ends, BenchmarkDirectCall). Most calls
// between nodes are short (a record to a replica and its
// acknowledgement), and at 20 nodes a job makes about nine of them.
//
// Ask carries such calls to a peer on one stream, kept open while they
// keep coming: each request is one frame (its Seq names it), and the
// peer answers it, every frame of the reply and then the end, in one
// write. The end frame (kindEnd, or kindError with the error's text)
// carries the request's Seq as a uvarint before anything else; a reply's
// frames are never interleaved with another's, so the frames before an
// end are its reply. Requests are served concurrently, so one slow
// request holds up no other.
//
// The caller closes its side of a stream that has had no call pending for
// outIdle; the peer answers what it has read, then closes its side. A
// peer that does not speak the protocol (a node of an earlier release) is
// asked by Call instead, and not tried again for askRetryUnsupported.
const askRetryUnsupported = 10 * time.Minute

// errAskUnsupported is a peer that refused the ask protocol.
var errAskUnsupported = errors.New("peer does not take asks")

// askStream is the caller's kept stream of asks to one peer.
type askStream struct {
	to   peer.ID
	s    network.Stream
	turn chan struct{} // held by the ask writing on it

	mu      sync.Mutex
	pending map[uint64]*askWait // by request Seq
	err     error               // why it takes no more asks: failed, or closing
	used    time.Time           // when the last ask began or ended
}

// askWait is one ask awaiting its reply.
type askWait struct {
	kind  string
	reply chan askReply // buffered: the reader never blocks on it
}

// askReply is an ask's answer: the reply's frames, or why there are none.
type askReply struct {
	frames []Message
	err    error
}

// askStreams are a Direct's kept ask streams, by peer, and the peers that
// do not take asks, until when.
type askStreams struct {
	mu          sync.Mutex
	by          map[peer.ID]*askStream
	opening     map[peer.ID]chan struct{} // closed once the stream being opened is kept, or failed
	unsupported map[peer.ID]time.Time
}

// Ask is Call for a short exchange: a reply of at most MaxDirectSize in
// all, known before it is passed on. It goes on the stream kept open to
// the peer for asks (opening one if there is none), or by Call to a peer
// that does not take asks. onReply sees the reply's frames once the whole
// reply is here. Opening the stream and writing the request wait at most
// Timeout; the reply is awaited as long as ctx allows. A request the peer
// may have read when its stream failed is not sent again.
func (d *Direct) Ask(ctx context.Context, to peer.ID, kind string, data []byte, onReply func(Message) error) error {
	if !d.takesAsks(to) {
		return d.Call(ctx, to, kind, data, onReply)
	}
	seq, req, err := d.encodeSeq(kind, data)
	if err != nil {
		return err
	}
	buf := appendFrame(make([]byte, 0, binary.MaxVarintLen64+len(req)), req)
	for {
		a, kept, err := d.askStream(ctx, to)
		if errors.Is(err, errAskUnsupported) {
			return d.Call(ctx, to, kind, data, onReply)
		}
		if err != nil {
			return fmt.Errorf("gossip: call %s on %s: %w", kind, to, err)
		}
		w := &askWait{kind: kind, reply: make(chan askReply, 1)}
		if !a.add(seq, w) {
			d.forgetAsk(a) // it stopped meanwhile: a fresh stream next
			continue
		}
		err = d.writeAsk(ctx, a, buf)
		var gone goneError
		switch {
		case errors.As(err, &gone) && kept:
			a.remove(seq)
			continue // nothing written: a fresh stream next
		case err != nil:
			a.remove(seq)
			return fmt.Errorf("gossip: call %s on %s: %w", kind, to, err)
		}
		select {
		case r := <-w.reply:
			if r.err != nil {
				return r.err
			}
			for _, m := range r.frames {
				if err := onReply(m); err != nil {
					return err
				}
			}
			return nil
		case <-ctx.Done():
			a.remove(seq)
			return ctx.Err()
		}
	}
}

// takesAsks tells whether to is not known to refuse asks.
func (d *Direct) takesAsks(to peer.ID) bool {
	d.asks.mu.Lock()
	defer d.asks.mu.Unlock()
	until, ok := d.asks.unsupported[to]
	if ok && time.Now().After(until) {
		delete(d.asks.unsupported, to)
		return true
	}
	return !ok
}

// askStream returns the peer's kept ask stream (kept), or opens one, keeps
// it and starts its reader. One ask opens the stream while the others
// for that peer wait for it: a burst of asks to a new peer would
// otherwise open a stream each, and the peer resets those past
// maxMessageStreams.
func (d *Direct) askStream(ctx context.Context, to peer.ID) (a *askStream, kept bool, err error) {
	for {
		d.asks.mu.Lock()
		if a := d.asks.by[to]; a != nil {
			d.asks.mu.Unlock()
			return a, true, nil
		}
		wait, busy := d.asks.opening[to]
		if !busy {
			if d.asks.opening == nil {
				d.asks.opening = map[peer.ID]chan struct{}{}
			}
			d.asks.opening[to] = make(chan struct{})
		}
		d.asks.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if !d.takesAsks(to) {
			return nil, false, errAskUnsupported
		}
	}
	a, err = d.openAsk(ctx, to)
	d.asks.mu.Lock()
	close(d.asks.opening[to])
	delete(d.asks.opening, to)
	d.asks.mu.Unlock()
	return a, false, err
}

// openAsk opens an ask stream to the peer, keeps it and starts its reader.
func (d *Direct) openAsk(ctx context.Context, to peer.ID) (*askStream, error) {
	s, err := d.open(ctx, to, d.askProto)
	if err != nil {
		if errors.Is(err, msmux.ErrNotSupported[protocol.ID]{}) {
			now := time.Now()
			d.asks.mu.Lock()
			if d.asks.unsupported == nil {
				d.asks.unsupported = map[peer.ID]time.Time{}
			}
			for p, until := range d.asks.unsupported {
				if now.After(until) { // peers not asked again since
					delete(d.asks.unsupported, p)
				}
			}
			d.asks.unsupported[to] = now.Add(askRetryUnsupported)
			d.asks.mu.Unlock()
			return nil, errAskUnsupported
		}
		return nil, err
	}
	_ = s.SetWriteDeadline(time.Time{})
	a := &askStream{to: to, s: s, turn: make(chan struct{}, 1), pending: map[uint64]*askWait{}, used: time.Now()}
	d.mu.Lock()
	closed := d.closed
	if !closed {
		d.wg.Add(1) // the reader's
	}
	d.mu.Unlock()
	if closed {
		s.Reset()
		return nil, ErrClosed
	}
	d.asks.mu.Lock()
	if d.asks.by == nil {
		d.asks.by = map[peer.ID]*askStream{}
	}
	d.asks.by[to] = a
	d.asks.mu.Unlock()
	go d.readAsks(a)
	return a, nil
}

// add registers w as awaiting the reply to request seq; it fails on a
// stream that takes no more asks.
func (a *askStream) add(seq uint64, w *askWait) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return false
	}
	a.pending[seq] = w
	a.used = time.Now()
	return true
}

// remove takes the ask awaiting the reply to request seq off the stream,
// and returns it (nil when none waits).
func (a *askStream) remove(seq uint64) *askWait {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.pending[seq]
	delete(a.pending, seq)
	a.used = time.Now()
	return w
}

// deliver hands the reply to request seq to its ask, if it still waits.
func (a *askStream) deliver(seq uint64, r askReply) {
	if w := a.remove(seq); w != nil {
		w.reply <- r
	}
}

// stop makes a take no more asks, for err, and fails those pending with
// it (wrapped with each one's kind). It reports whether a was taking asks.
func (a *askStream) stop(err error) bool {
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		return false
	}
	a.err = err
	pending := a.pending
	a.pending = map[uint64]*askWait{}
	a.mu.Unlock()
	for _, w := range pending {
		w.reply <- askReply{err: fmt.Errorf("gossip: call %s on %s: reply: %w", w.kind, a.to, err)}
	}
	return true
}

// forgetAsk takes a out of the pool.
func (d *Direct) forgetAsk(a *askStream) {
	d.asks.mu.Lock()
	if d.asks.by[a.to] == a {
		delete(d.asks.by, a.to)
	}
	d.asks.mu.Unlock()
}

// writeAsk writes a request (buf) on a within Timeout (or until ctx
// ends). It returns a goneError when a was unusable and nothing was
// written; a stream that failed writing is reset, which fails the asks
// pending on it.
func (d *Direct) writeAsk(ctx context.Context, a *askStream, buf []byte) error {
	select {
	case a.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.turn }()
	if a.s.Conn().IsClosed() {
		err := errors.New("its connection closed")
		d.dropAsk(a, err)
		return goneError{err}
	}
	if unused, err := d.writeWithin(ctx, a.s, buf); err != nil {
		d.dropAsk(a, err) // what is pending fails, and no ask waits on it
		if unused {
			return goneError{err}
		}
		return err
	}
	return nil
}

// dropAsk stops a for err (failing what is pending), takes it out of the
// pool and resets it.
func (d *Direct) dropAsk(a *askStream, err error) {
	if a.stop(err) {
		d.forgetAsk(a)
	}
	a.s.Reset()
}

// readAsks reads the replies on a's stream and hands each to its ask,
// until the stream ends; then it fails what is still pending.
func (d *Direct) readAsks(a *askStream) {
	defer d.wg.Done()
	stop := context.AfterFunc(d.ctx, func() { a.s.Reset() })
	defer stop()
	r := bufio.NewReader(a.s)
	var frames []Message
	size := 0
	for {
		frame, err := readFrame(r, MaxDirectSize)
		if errors.Is(err, io.EOF) {
			// Both sides closed: the peer answered all it read.
			if a.stop(errors.New("the peer closed the stream")) {
				d.forgetAsk(a)
			}
			a.s.Close()
			return
		}
		if err != nil {
			d.dropAsk(a, err)
			return
		}
		m, err := DecodeMessage(frame, a.to, d.cfg.Clock.Now(), MaxDirectSize)
		if err == nil && len(frames) > 0 && size+len(frame) > MaxDirectSize {
			err = fmt.Errorf("a reply over %d bytes", MaxDirectSize)
		}
		var seq uint64
		if err == nil && (m.Kind == kindEnd || m.Kind == kindError) {
			var n int
			if seq, n = binary.Uvarint(m.Data); n <= 0 {
				err = errors.New("an end frame without its request's number")
			} else {
				m.Data = m.Data[n:]
			}
		}
		if err != nil {
			d.refuse(a.to, err)
			d.dropAsk(a, err)
			return
		}
		switch m.Kind {
		case kindEnd:
			a.deliver(seq, askReply{frames: frames})
		case kindError:
			a.deliver(seq, askReply{err: fmt.Errorf("%w from %s: %s", ErrRemote, a.to.ShortString(), m.Data)})
		default:
			frames = append(frames, m)
			size += len(frame)
			continue
		}
		frames, size = nil, 0
	}
}

// closeIdleAsks closes the caller's side of the ask streams that have
// had nothing pending for outIdle (all of them when all is set); each
// peer then closes its side, and the stream's reader ends.
func (d *Direct) closeIdleAsks(now time.Time, all bool) {
	d.asks.mu.Lock()
	var streams []*askStream
	for _, a := range d.asks.by {
		streams = append(streams, a)
	}
	d.asks.mu.Unlock()
	for _, a := range streams {
		a.mu.Lock()
		idle := len(a.pending) == 0 && now.Sub(a.used) >= outIdle
		a.mu.Unlock()
		if !all && !idle {
			continue
		}
		if a.stop(errors.New("closed")) {
			d.forgetAsk(a)
			if all {
				a.s.Reset()
			} else {
				_ = a.s.CloseWrite()
			}
		}
	}
}

// serveAsks answers the asks on a peer's stream, each as it comes and
// concurrently, while MaxInbound calls in all are served (one more is
// answered with an error at once). It ends when the peer closes its side,
// once every ask read is answered, or when the stream fails.
func (d *Direct) serveAsks(s network.Stream) {
	from := s.Conn().RemotePeer()
	ctx, cancel := context.WithCancel(d.ctx)
	var answering sync.WaitGroup
	var wmu sync.Mutex
	defer answering.Wait()
	defer cancel() // first: a stream that failed ends its asks' handlers
	answer := func(seq uint64, replies []byte, callErr error) {
		if ctx.Err() != nil {
			// The stream failed or this node is closing: the caller learns
			// it from the stream, not from a handler cut short.
			s.Reset()
			return
		}
		var end []byte
		var err error
		if callErr != nil {
			end, err = d.encode(kindError, append(binary.AppendUvarint(nil, seq), callErr.Error()...))
		} else {
			end, err = d.encode(kindEnd, binary.AppendUvarint(nil, seq))
		}
		if err != nil {
			s.Reset()
			return
		}
		replies = appendFrame(replies, end)
		wmu.Lock()
		defer wmu.Unlock()
		_ = s.SetWriteDeadline(time.Now().Add(d.cfg.Timeout))
		if _, err := s.Write(replies); err != nil {
			s.Reset() // the reader sees it, and the caller's asks fail
		}
	}
	r := bufio.NewReader(s)
	for {
		if err := d.nextFrame(s, r); err != nil {
			if errors.Is(err, io.EOF) {
				answering.Wait()
				s.Close()
			} else {
				s.Reset() // idle for inIdle, or reset
			}
			return
		}
		req, err := d.readRequest(r, from)
		if err != nil {
			s.Reset()
			return
		}
		release, ok := d.takeSlot(s)
		if !ok {
			answer(req.Seq, nil, fmt.Errorf("busy: %d calls being served", cap(d.slots)))
			continue
		}
		answering.Add(1)
		go func() {
			defer answering.Done()
			defer release()
			var replies []byte
			reply := func(kind string, data []byte) error {
				if err := checkReplyKind(kind); err != nil {
					return err
				}
				b, err := d.encode(kind, data)
				if err != nil {
					return err
				}
				if len(replies)+len(b) > MaxDirectSize {
					return fmt.Errorf("gossip: a reply over %d bytes does not fit an ask", MaxDirectSize)
				}
				replies = appendFrame(replies, b)
				return nil
			}
			callErr := d.onCall(ctx, req, reply)
			if callErr != nil {
				replies = nil
			}
			answer(req.Seq, replies, callErr)
		}()
	}
}
