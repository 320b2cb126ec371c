package gossip

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Kinds of the frames that end a call's reply.
const (
	kindEnd   = "rpc.end"
	kindError = "rpc.error"
)

// ErrRemote wraps the error text a peer returned for a call.
var ErrRemote = errors.New("remote error")

// DirectConfig configures Direct. Network is required.
type DirectConfig struct {
	// Network names the mesh; protocols are "/gpumesh/<network>/v1/msg" and
	// "/gpumesh/<network>/v1/rpc".
	Network string
	// Clock stamps and checks messages. Default: SystemClock().
	Clock Clock
	// Logger gets refused frames. Default: discard.
	Logger *slog.Logger
	// Timeout bounds opening a stream and each frame read or written.
	// Default: 5 s.
	Timeout time.Duration
	// TTL is the lifetime of the messages this node sends. Default:
	// DefaultMessageTTL.
	TTL time.Duration
	// MaxInbound bounds the inbound calls handled at once; more are
	// reset. Default: 512. (Streams of one-way messages are bounded per
	// sender: maxMessageStreams.)
	MaxInbound int
	// Versions, if set, records the peers whose frames are of a newer
	// wire version than this node reads.
	Versions *Versions
	// OnMessage receives every checked one-way message. It is called from
	// stream goroutines, concurrently, and must not block.
	OnMessage func(Message)
	// OnCall serves a call: req is the checked request; reply sends one
	// frame of the answer (it blocks until the frame is written or the
	// stream fails). The error it returns goes back to the caller as text.
	// ctx ends when the caller goes away or Direct closes. Nil refuses
	// every call.
	OnCall func(ctx context.Context, req Message, reply func(kind string, data []byte) error) error
}

// Direct carries messages of the layers above gossip point to point over
// libp2p streams: one-way messages (Send, several per stream) and calls with
// a streamed reply (Call). Every frame is a payload envelope checked by
// DecodeMessage against the stream's authenticated remote peer.
//
// Direct owns the handlers of its inbound streams; Close removes its
// protocols, ends the streams and waits for the handlers.
type Direct struct {
	cfg      DirectConfig
	h        host.Host
	msgProto protocol.ID
	rpcProto protocol.ID
	askProto protocol.ID
	seq      atomic.Uint64

	ctx        context.Context
	cancel     context.CancelFunc
	mu         sync.Mutex
	closed     bool
	msgStreams map[peer.ID]int // streams of one-way messages open, by sender
	askStreams map[peer.ID]int // streams of asks open, by caller
	wg         sync.WaitGroup
	slots      chan struct{}

	refused atomic.Uint64
	out     outStreams // streams of one-way messages kept open, by peer
	asks    askStreams // streams of asks kept open, by peer (ask.go)
}

// NewDirect registers the network's direct protocols on h.
func NewDirect(h host.Host, cfg DirectConfig) (*Direct, error) {
	if err := ValidateNetwork(cfg.Network); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultMessageTTL
	}
	if cfg.MaxInbound <= 0 {
		cfg.MaxInbound = 512
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Direct{
		cfg:      cfg,
		h:        h,
		msgProto: protocol.ID(fmt.Sprintf("/gpumesh/%s/v%d/msg", cfg.Network, Version)),
		rpcProto: protocol.ID(fmt.Sprintf("/gpumesh/%s/v%d/rpc", cfg.Network, Version)),
		askProto: protocol.ID(fmt.Sprintf("/gpumesh/%s/v%d/ask", cfg.Network, Version)),
		ctx:      ctx,
		cancel:   cancel,
		slots:    make(chan struct{}, cfg.MaxInbound),
	}
	// Sequence numbers start from the clock so a restarted node's continue
	// upwards.
	d.seq.Store(uint64(cfg.Clock.Now().UnixMicro()))
	h.SetStreamHandler(d.msgProto, d.tracked(d.peerStreams(&d.msgStreams), d.serveMessages))
	h.SetStreamHandler(d.rpcProto, d.tracked(d.takeSlot, d.serveCall))
	h.SetStreamHandler(d.askProto, d.tracked(d.peerStreams(&d.askStreams), d.serveAsks))
	d.wg.Add(1)
	go d.closeIdleOut()
	return d, nil
}

// Refused counts inbound frames that failed their checks.
func (d *Direct) Refused() uint64 { return d.refused.Load() }

// Close removes the protocols, resets the streams being served and waits
// for their handlers.
func (d *Direct) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.h.RemoveStreamHandler(d.msgProto)
	d.h.RemoveStreamHandler(d.rpcProto)
	d.h.RemoveStreamHandler(d.askProto)
	d.cancel()
	d.wg.Wait()
	return nil
}

// tracked wraps a handler so Close can wait for it, and serves a stream
// only if admit lets it in (a stream refused is reset).
func (d *Direct) tracked(admit func(network.Stream) (release func(), ok bool), serve func(network.Stream)) network.StreamHandler {
	return func(s network.Stream) {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			s.Reset()
			return
		}
		d.wg.Add(1)
		d.mu.Unlock()
		defer d.wg.Done()
		release, ok := admit(s)
		if !ok {
			s.Reset()
			return
		}
		defer release()
		stop := context.AfterFunc(d.ctx, func() { s.Reset() })
		defer stop()
		serve(s)
	}
}

// takeSlot admits a call while fewer than MaxInbound are served.
func (d *Direct) takeSlot(network.Stream) (func(), bool) {
	select {
	case d.slots <- struct{}{}:
		return func() { <-d.slots }, true
	default:
		return nil, false
	}
}

// maxMessageStreams bounds the streams of one-way messages one peer has
// open here at once, and its streams of asks: a sender keeps one of each
// (outstream.go, ask.go), two when two of its Sends raced to open it. They
// do not count against MaxInbound, which a coordinator's runners, each
// keeping a stream to it, would exhaust.
const maxMessageStreams = 4

// peerStreams admits a stream while its sender has fewer than
// maxMessageStreams open here, as counted in *open (under d.mu).
func (d *Direct) peerStreams(open *map[peer.ID]int) func(network.Stream) (func(), bool) {
	return func(s network.Stream) (func(), bool) {
		from := s.Conn().RemotePeer()
		d.mu.Lock()
		defer d.mu.Unlock()
		if (*open)[from] >= maxMessageStreams {
			return nil, false
		}
		if *open == nil {
			*open = map[peer.ID]int{}
		}
		(*open)[from]++
		return func() {
			d.mu.Lock()
			if (*open)[from]--; (*open)[from] == 0 {
				delete(*open, from)
			}
			d.mu.Unlock()
		}, true
	}
}

// Out is one message to send: its kind and encoded data.
type Out struct {
	Kind string
	Data []byte
}

// Send delivers messages to peer to in order, on the stream kept open to
// it (outstream.go) or a new one, waiting at most Timeout to open it and
// Timeout more (or until ctx ends) to write them. Delivery is not
// acknowledged: the layer above retries what matters.
func (d *Direct) Send(ctx context.Context, to peer.ID, msgs ...Out) error {
	if len(msgs) == 0 {
		return nil
	}
	frames := make([][]byte, len(msgs))
	for i, m := range msgs {
		b, err := d.encode(m.Kind, m.Data)
		if err != nil {
			return err
		}
		frames[i] = b
	}
	return d.send(ctx, to, frames) // outstream.go
}

// Call sends a request of kind to peer to and passes each frame of the reply
// to onReply, until the reply ends. An error the peer returned wraps
// ErrRemote. Opening the stream and sending the request wait at most
// Timeout; the reply's frames are awaited for as long as ctx allows, so a
// caller following a log passes a context without deadline.
func (d *Direct) Call(ctx context.Context, to peer.ID, kind string, data []byte, onReply func(Message) error) error {
	req, err := d.encode(kind, data)
	if err != nil {
		return err
	}
	s, err := d.open(ctx, to, d.rpcProto)
	if err != nil {
		return err
	}
	return d.exchange(ctx, s, to, kind, req, onReply)
}

// exchange sends a call's request frame on s and passes the reply's frames
// to onReply (Call).
func (d *Direct) exchange(ctx context.Context, s network.Stream, to peer.ID, kind string, req []byte, onReply func(Message) error) error {
	defer s.Reset()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if err := writeFrame(s, req); err != nil {
		return fmt.Errorf("gossip: call %s on %s: %w", kind, to, err)
	}
	// The request is written; the half-close only tells the peer so. Over
	// QUIC a peer that has read the request, answered and closed the stream
	// has cancelled this side already, and closing it fails ("close called
	// for canceled stream"): the reply is there all the same, and a stream
	// broken for real fails the read below. (CI saw a logs call fail so.)
	_ = s.CloseWrite()
	_ = s.SetWriteDeadline(time.Time{})
	r := bufio.NewReader(s)
	for {
		frame, err := readFrame(r, MaxDirectSize)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("gossip: call %s on %s: reply: %w", kind, to, err)
		}
		m, err := DecodeMessage(frame, to, d.cfg.Clock.Now(), MaxDirectSize)
		if err != nil {
			return fmt.Errorf("gossip: call %s on %s: reply: %w", kind, to, err)
		}
		switch m.Kind {
		case kindEnd:
			// Both ends are done: closing sends nothing more (the
			// request's side is closed already), where a reset would
			// cost the peer one more frame.
			_ = s.Close()
			return nil
		case kindError:
			return fmt.Errorf("%w from %s: %s", ErrRemote, to.ShortString(), m.Data)
		}
		if err := onReply(m); err != nil {
			return err
		}
	}
}

func (d *Direct) open(ctx context.Context, to peer.ID, proto protocol.ID) (network.Stream, error) {
	octx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	s, err := d.h.NewStream(network.WithAllowLimitedConn(octx, "gpumesh"), to, proto)
	if err != nil {
		return nil, fmt.Errorf("gossip: opening %s to %s: %w", proto, to.ShortString(), err)
	}
	_ = s.SetWriteDeadline(time.Now().Add(d.cfg.Timeout))
	return s, nil
}

func (d *Direct) encode(kind string, data []byte) ([]byte, error) {
	_, b, err := d.encodeSeq(kind, data)
	return b, err
}

// encodeSeq encodes a message of kind and returns its Seq too.
func (d *Direct) encodeSeq(kind string, data []byte) (uint64, []byte, error) {
	now := d.cfg.Clock.Now()
	nonce := make([]byte, NonceSize)
	_, _ = rand.Read(nonce)
	seq := d.seq.Add(1)
	b, err := EncodeMessage(Message{
		Sender:    d.h.ID(),
		Seq:       seq,
		IssuedAt:  now,
		ExpiresAt: now.Add(d.cfg.TTL),
		Nonce:     nonce,
		Kind:      kind,
		Data:      data,
	})
	return seq, b, err
}

// serveMessages reads a stream of one-way messages until its sender
// closes it. Between messages it waits inIdle (the sender keeps an idle
// stream open for outIdle, far less); a frame once begun must arrive
// within Timeout.
func (d *Direct) serveMessages(s network.Stream) {
	defer s.Close()
	from := s.Conn().RemotePeer()
	r := bufio.NewReader(s)
	for {
		if err := d.nextFrame(s, r); err != nil {
			if !errors.Is(err, io.EOF) {
				s.Reset() // idle for inIdle, or reset
			}
			return
		}
		frame, err := readFrame(r, MaxDirectSize)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			d.refuse(from, err)
			s.Reset()
			return
		}
		m, err := DecodeMessage(frame, from, d.cfg.Clock.Now(), MaxDirectSize)
		if err != nil {
			d.refuse(from, err)
			continue
		}
		if d.cfg.OnMessage != nil {
			d.cfg.OnMessage(m)
		}
	}
}

// nextFrame waits inIdle for the next frame on a kept stream to begin
// (io.EOF when its sender closed it), then gives the frame Timeout to
// arrive.
func (d *Direct) nextFrame(s network.Stream, r *bufio.Reader) error {
	_ = s.SetReadDeadline(time.Now().Add(inIdle))
	if _, err := r.Peek(1); err != nil {
		return err
	}
	_ = s.SetReadDeadline(time.Now().Add(d.cfg.Timeout))
	return nil
}

// checkReplyKind refuses the kinds that end a call's reply, which only
// Direct writes.
func checkReplyKind(kind string) error {
	if kind == kindEnd || kind == kindError {
		return fmt.Errorf("gossip: reply kind %q is reserved", kind)
	}
	return nil
}

func (d *Direct) serveCall(s network.Stream) {
	from := s.Conn().RemotePeer()
	_ = s.SetReadDeadline(time.Now().Add(d.cfg.Timeout))
	req, err := d.readRequest(bufio.NewReader(s), from)
	if err != nil {
		s.Reset()
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	reply := func(kind string, data []byte) error {
		if err := checkReplyKind(kind); err != nil {
			return err
		}
		return d.writeReply(s, kind, data)
	}
	callErr := d.onCall(ctx, req, reply)
	if callErr != nil {
		_ = d.writeReply(s, kindError, []byte(callErr.Error()))
	} else {
		_ = d.writeReply(s, kindEnd, nil)
	}
	s.Close()
}

// onCall serves req with OnCall, or refuses it when there is none.
func (d *Direct) onCall(ctx context.Context, req Message, reply func(string, []byte) error) error {
	if d.cfg.OnCall == nil {
		return fmt.Errorf("this node serves no calls")
	}
	return d.cfg.OnCall(ctx, req, reply)
}

// readRequest reads and checks a call's request frame from r; one that
// fails its checks counts as refused.
func (d *Direct) readRequest(r *bufio.Reader, from peer.ID) (Message, error) {
	frame, err := readFrame(r, MaxDirectSize)
	if err == nil && frame == nil {
		err = errors.New("empty frame")
	}
	if err == nil {
		var req Message
		if req, err = DecodeMessage(frame, from, d.cfg.Clock.Now(), MaxDirectSize); err == nil {
			return req, nil
		}
	}
	d.refuse(from, err)
	return Message{}, err
}

func (d *Direct) writeReply(s network.Stream, kind string, data []byte) error {
	b, err := d.encode(kind, data)
	if err != nil {
		return err
	}
	_ = s.SetWriteDeadline(time.Now().Add(d.cfg.Timeout))
	return writeFrame(s, b)
}

func (d *Direct) refuse(from peer.ID, err error) {
	d.refused.Add(1)
	noteVersion(d.cfg.Versions, from, err, d.cfg.Clock.Now())
	d.cfg.Logger.Debug("direct frame refused", "peer", from, "err", err)
}

// writeFrame writes frame after its length in one Write: on a stream each
// Write is a yamux frame, a TLS record and a system call at both ends.
func writeFrame(w io.Writer, frame []byte) error {
	_, err := w.Write(appendFrame(make([]byte, 0, binary.MaxVarintLen64+len(frame)), frame))
	return err
}

// appendFrame appends frame after its length to buf.
func appendFrame(buf, frame []byte) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(frame))), frame...)
}

// readFrame reads one length-prefixed frame of at most limit bytes. A clean
// end of stream before a frame is io.EOF.
func readFrame(r *bufio.Reader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	if n > uint64(limit) {
		return nil, msgErr(ReasonOversized, "frame of %d bytes, limit %d", n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("truncated frame: %w", err)
	}
	return buf, nil
}
