package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	msmux "github.com/multiformats/go-multistream"
)

// The transport carries memberlist over libp2p: one port, libp2p's
// encryption and peer authentication, its NAT traversal, and libp2p mocknet
// for simulations.
//
// Packets (probes, acks, gossip) travel as frames on a long-lived packet
// stream per peer, used in both directions. Sending never blocks memberlist:
// a packet joins the peer's bounded send queue, and is dropped when the queue
// is full, as a datagram would be. A writer goroutine runs only while a queue
// holds packets. Each packet stream has one reader goroutine at each end; the
// end that opened it closes it after StreamIdleTimeout without traffic, by
// closing its write side and reading until the other end closes too, so that
// no packet in flight is lost to the close.
//
// Streams (state exchanges, fallback probes) are one libp2p stream each.
//
// A packet's sender is the authenticated libp2p peer at the other end of the
// stream: From is that peer's synthetic address, never a value read from the
// packet.

// swimService is the resource manager service that owns the transport's
// streams.
const swimService = "gpumesh.swim"

func packetProtocol(network string) protocol.ID {
	return protocol.ID("/gpumesh/" + network + "/swim/packet/1.0.0")
}

func streamProtocol(network string) protocol.ID {
	return protocol.ID("/gpumesh/" + network + "/swim/stream/1.0.0")
}

// errTransportClosed is returned by calls after Shutdown.
var errTransportClosed = errors.New("mesh transport closed")

// transportConfig configures a transport; newTransport fills in defaults for
// zero values.
type transportConfig struct {
	host    host.Host
	network string
	log     *slog.Logger

	inboundQueue   int           // received packets waiting for memberlist
	sendQueue      int           // packets waiting per peer
	sendQueueBytes int           // bytes waiting per peer
	idleTimeout    time.Duration // packet stream idle time before close
	writeTimeout   time.Duration // one write on a packet stream
	maxFrame       int

	// beforeDial, if set, is called before opening a stream to a peer
	// (the simulated network links peers there).
	beforeDial func(context.Context, peer.ID) error
}

// transport implements memberlist.NodeAwareTransport over libp2p streams.
type transport struct {
	cfg         transportConfig
	h           host.Host
	self        peer.ID
	selfAddr    *swimAddr
	packetProto protocol.ID
	streamProto protocol.ID
	packetCh    chan *memberlist.Packet
	streamCh    chan net.Conn
	ctx         context.Context
	cancel      context.CancelFunc
	done        chan struct{}

	mu      sync.Mutex
	closed  bool
	writers int              // writer goroutines running
	idle    chan struct{}    // signalled when a writer exits
	links   map[string]*link // by peer ID string (memberlist node name)
	byAddr  map[string]*link // by synthetic host:port
	conns   map[*streamConn]struct{}
	wg      sync.WaitGroup

	stats transportStats
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// link is what the transport knows of one peer. Fields other than the
// atomics are guarded by transport.mu.
type link struct {
	id      peer.ID
	name    string
	addr    *swimAddr
	out     *packetStream // stream used for sending, nil if none
	streams map[*packetStream]struct{}
	queue   [][]byte
	queued  int
	writing bool
	foreign bool // it answered that it does not serve this network

	lastHeard atomic.Int64 // unix nanoseconds of the last frame or stream received
}

// packetStream is one packet stream with a peer.
type packetStream struct {
	s        network.Stream
	outbound bool         // opened by this end, which closes it when idle
	lastUse  atomic.Int64 // unix nanoseconds of the last frame either way
	closing  bool         // write side closed for idleness; guarded by transport.mu
}

// transportStats counts traffic; read with Stats.
type transportStats struct {
	packetsSent, packetsReceived atomic.Uint64
	bytesSent, bytesReceived     atomic.Uint64 // packet frames, headers included
	streamBytes                  atomic.Uint64 // memberlist streams, both ways
	sendDrops, receiveDrops      atomic.Uint64
	malformed                    atomic.Uint64
	packetStreams, streams       atomic.Uint64 // opened, both directions
	dialFailures                 atomic.Uint64
}

func newTransport(cfg transportConfig) *transport {
	if cfg.inboundQueue <= 0 {
		cfg.inboundQueue = 1024
	}
	if cfg.sendQueue <= 0 {
		cfg.sendQueue = 64
	}
	if cfg.sendQueueBytes <= 0 {
		cfg.sendQueueBytes = 256 << 10
	}
	if cfg.idleTimeout <= 0 {
		cfg.idleTimeout = 10 * time.Second
	}
	if cfg.writeTimeout <= 0 {
		cfg.writeTimeout = 5 * time.Second
	}
	if cfg.maxFrame <= 0 {
		cfg.maxFrame = maxFrameSize
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &transport{
		cfg:         cfg,
		h:           cfg.host,
		self:        cfg.host.ID(),
		selfAddr:    newSwimAddr(cfg.host.ID()),
		packetProto: packetProtocol(cfg.network),
		streamProto: streamProtocol(cfg.network),
		packetCh:    make(chan *memberlist.Packet, cfg.inboundQueue),
		streamCh:    make(chan net.Conn),
		ctx:         ctx,
		cancel:      cancel,
		done:        make(chan struct{}),
		links:       make(map[string]*link),
		byAddr:      make(map[string]*link),
		conns:       make(map[*streamConn]struct{}),
		idle:        make(chan struct{}, 1),
	}
	t.h.SetStreamHandler(t.packetProto, t.handlePacketStream)
	t.h.SetStreamHandler(t.streamProto, t.handleStream)
	t.wg.Add(1)
	go t.reapIdle()
	return t
}

// FinalAdvertiseAddr returns this node's synthetic address, whatever memberlist
// was configured with.
func (t *transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return swimIP(t.self), swimPort, nil
}

// PacketCh implements memberlist.Transport.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// StreamCh implements memberlist.Transport.
func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

// WriteTo implements memberlist.Transport for an address without a name.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// DialTimeout implements memberlist.Transport for an address without a name.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// WriteToAddress queues b for the peer and returns at once. A full queue drops
// the packet, as a network would; the error is only for an address that
// names no peer or a closed transport.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	frame := appendFrame(make([]byte, 0, len(b)+maxLengthBytes), b)

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return now, errTransportClosed
	}
	l, err := t.resolveLocked(a)
	if err != nil {
		t.mu.Unlock()
		return now, err
	}
	if l.id == t.self {
		t.mu.Unlock()
		t.deliver(l, b)
		return now, nil
	}
	if len(l.queue) >= t.cfg.sendQueue || l.queued+len(frame) > t.cfg.sendQueueBytes {
		t.mu.Unlock()
		t.stats.sendDrops.Add(1)
		return now, nil
	}
	l.queue = append(l.queue, frame)
	l.queued += len(frame)
	if !l.writing {
		l.writing = true
		t.writers++
		t.wg.Add(1)
		go t.writeLoop(l)
	}
	t.mu.Unlock()
	return now, nil
}

// resolveLocked finds or creates the link for a memberlist address, by node
// name (the peer ID) when given, else by synthetic address.
func (t *transport) resolveLocked(a memberlist.Address) (*link, error) {
	if a.Name != "" {
		if l := t.links[a.Name]; l != nil {
			if a.Addr != "" && a.Addr != l.addr.hp {
				return nil, fmt.Errorf("member %s: address %s is not its own", a.Name, a.Addr)
			}
			return l, nil
		}
		id, err := peer.Decode(a.Name)
		if err != nil {
			return nil, fmt.Errorf("member name %q is not a peer ID: %w", a.Name, err)
		}
		if swimHostPort(id) != a.Addr && a.Addr != "" {
			return nil, fmt.Errorf("member %s: address %s is not its own", a.Name, a.Addr)
		}
		return t.linkLocked(id), nil
	}
	if l := t.byAddr[a.Addr]; l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("no known peer at member address %s", a.Addr)
}

// linkLocked returns the link for id, creating it.
func (t *transport) linkLocked(id peer.ID) *link {
	name := id.String()
	if l := t.links[name]; l != nil {
		return l
	}
	l := &link{id: id, name: name, addr: newSwimAddr(id), streams: make(map[*packetStream]struct{})}
	t.links[name] = l
	t.byAddr[l.addr.hp] = l
	return l
}

// writeLoop sends a link's queued packets until the queue is empty.
func (t *transport) writeLoop(l *link) {
	defer t.wg.Done()
	for {
		t.mu.Lock()
		if t.closed || len(l.queue) == 0 {
			l.writing = false
			t.writers--
			t.mu.Unlock()
			select {
			case t.idle <- struct{}{}:
			default:
			}
			return
		}
		batch := l.queue
		l.queue, l.queued = nil, 0
		ps := l.out
		t.mu.Unlock()

		sent := false
		for attempt := 0; attempt < 2 && !sent; attempt++ {
			if ps == nil {
				var err error
				if ps, err = t.openPacketStream(l); err != nil {
					t.stats.dialFailures.Add(1)
					t.cfg.log.Debug("mesh: cannot open packet stream", "peer", l.id, "err", err)
					break
				}
			}
			if err := t.writeBatch(ps, batch); err != nil {
				t.cfg.log.Debug("mesh: packet stream write failed", "peer", l.id, "err", err)
				t.dropStream(l, ps, true)
				ps = nil
				continue
			}
			sent = true
		}
		if !sent {
			t.stats.sendDrops.Add(uint64(len(batch)))
		}
	}
}

// writeBatch writes frames in one call.
func (t *transport) writeBatch(ps *packetStream, batch [][]byte) error {
	var buf []byte
	if len(batch) == 1 {
		buf = batch[0]
	} else {
		n := 0
		for _, f := range batch {
			n += len(f)
		}
		buf = make([]byte, 0, n)
		for _, f := range batch {
			buf = append(buf, f...)
		}
	}
	_ = ps.s.SetWriteDeadline(time.Now().Add(t.cfg.writeTimeout))
	if _, err := ps.s.Write(buf); err != nil {
		return err
	}
	ps.lastUse.Store(time.Now().UnixNano())
	t.stats.packetsSent.Add(uint64(len(batch)))
	t.stats.bytesSent.Add(uint64(len(buf)))
	return nil
}

// openPacketStream opens a packet stream to l's peer, makes it the sending
// stream and starts its reader.
func (t *transport) openPacketStream(l *link) (*packetStream, error) {
	// No timeout of its own: libp2p bounds its dials, and a timer per
	// stream is costly when thousands of nodes share a process.
	ctx := t.ctx
	if t.cfg.beforeDial != nil {
		if err := t.cfg.beforeDial(ctx, l.id); err != nil {
			return nil, err
		}
	}
	s, err := t.newStream(ctx, l.id, t.packetProto)
	if err != nil {
		return nil, err
	}
	ps := &packetStream{s: s, outbound: true}
	ps.lastUse.Store(time.Now().UnixNano())
	if !t.addPacketStream(l, ps, true) {
		_ = s.Reset()
		return nil, errTransportClosed
	}
	return ps, nil
}

// newStream opens a stream to a peer, dialing it if need be, and selects
// proto lazily: the protocol header travels with the first write, and the
// answer is read with the first read (ErrNotSupported from a peer of another
// network). Unlike host.NewStream it does not wait for libp2p's identify
// exchange on a new connection: the transport needs nothing it learns, and
// the wait would cost a round trip on every new connection.
//
// It clears libp2p's dial backoff for the peer first: memberlist paces its
// own attempts (a probe per interval, gossip to the dead for a while), and
// the backoff that dials failed during a partition leave behind (5 s,
// growing with every failure) would hide the peer from membership for
// that long after the partition heals.
func (t *transport) newStream(ctx context.Context, id peer.ID, proto protocol.ID) (network.Stream, error) {
	ctx = network.WithAllowLimitedConn(ctx, "gpumesh membership")
	if sw, ok := t.h.Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(id)
	}
	s, err := t.h.Network().NewStream(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := checkConn(s); err != nil {
		return nil, err
	}
	if err := s.SetProtocol(proto); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.Scope().SetService(swimService)
	return &lazyStream{Stream: s, rw: msmux.NewMSSelect(s, proto), onNotSupported: func() { t.markForeign(id) }}, nil
}

// lazyStream is a stream whose protocol is negotiated on first use.
type lazyStream struct {
	network.Stream
	rw             io.ReadWriter
	onNotSupported func()
}

func (s *lazyStream) Read(b []byte) (int, error) {
	n, err := s.rw.Read(b)
	if err != nil && errors.Is(err, msmux.ErrNotSupported[protocol.ID]{}) {
		s.onNotSupported()
	}
	return n, err
}

func (s *lazyStream) Write(b []byte) (int, error) { return s.rw.Write(b) }

// markForeign records that a peer answered that it does not serve this
// network's protocols.
func (t *transport) markForeign(id peer.ID) {
	t.mu.Lock()
	t.linkLocked(id).foreign = true
	t.mu.Unlock()
}

// isForeign tells whether the peer said it does not serve this network.
func (t *transport) isForeign(id peer.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.links[id.String()]
	return l != nil && l.foreign
}

// checkConn resets a stream whose connection closed while it was being
// opened. libp2p resets the streams of a connection it closes, but mocknet
// only those it had listed when the close began: a stream opened in that
// window would live on as a pipe between peers the simulation cut apart.
func checkConn(s network.Stream) error {
	if s.Conn().IsClosed() {
		_ = s.Reset()
		return errors.New("connection closed while the stream opened")
	}
	return nil
}

// addPacketStream registers a packet stream and starts its reader. An
// outbound stream, or any stream while the link has none, becomes the
// sending stream. It returns false once the transport is closed.
func (t *transport) addPacketStream(l *link, ps *packetStream, reader bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	l.streams[ps] = struct{}{}
	if ps.outbound || l.out == nil {
		l.out = ps
	}
	t.stats.packetStreams.Add(1)
	t.wg.Add(1)
	if reader {
		go t.readLoop(l, ps)
	}
	return true
}

// dropStream forgets a packet stream and closes it (reset: abort both ways).
func (t *transport) dropStream(l *link, ps *packetStream, reset bool) {
	t.mu.Lock()
	delete(l.streams, ps)
	if l.out == ps {
		l.out = nil
	}
	t.mu.Unlock()
	if reset {
		_ = ps.s.Reset()
	} else {
		_ = ps.s.Close()
	}
}

// handlePacketStream serves a packet stream a peer opened.
func (t *transport) handlePacketStream(s network.Stream) {
	if checkConn(s) != nil {
		return
	}
	_ = s.Scope().SetService(swimService)
	id := s.Conn().RemotePeer()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = s.Reset()
		return
	}
	l := t.linkLocked(id)
	t.mu.Unlock()
	ps := &packetStream{s: s}
	ps.lastUse.Store(time.Now().UnixNano())
	// The handler goroutine is the reader: register without starting one.
	if !t.addPacketStream(l, ps, false) {
		_ = s.Reset()
		return
	}
	t.readLoop(l, ps)
}

// readLoop delivers the frames of one packet stream to memberlist until the
// stream ends. A clean end (the other side closed) is answered with a close;
// anything else with a reset.
func (t *transport) readLoop(l *link, ps *packetStream) {
	defer t.wg.Done()
	fr := newFrameReader(ps.s, t.cfg.maxFrame)
	for {
		frame, err := fr.next()
		if err != nil {
			clean := errors.Is(err, io.EOF)
			if errors.Is(err, ErrMalformedFrame) {
				t.stats.malformed.Add(1)
				t.cfg.log.Warn("mesh: malformed packet stream; reset", "peer", l.id, "err", err)
			}
			t.dropStream(l, ps, !clean)
			return
		}
		now := time.Now()
		ps.lastUse.Store(now.UnixNano())
		t.stats.packetsReceived.Add(1)
		t.stats.bytesReceived.Add(uint64(len(frame) + varintLen(len(frame))))
		t.deliverAt(l, frame, now)
	}
}

// deliver hands a packet to memberlist without blocking; a full queue drops it.
func (t *transport) deliver(l *link, payload []byte) {
	t.deliverAt(l, append([]byte(nil), payload...), time.Now())
}

func (t *transport) deliverAt(l *link, payload []byte, now time.Time) {
	l.lastHeard.Store(now.UnixNano())
	select {
	case t.packetCh <- &memberlist.Packet{Buf: payload, From: l.addr, Timestamp: now}:
	default:
		t.stats.receiveDrops.Add(1)
	}
}

// reapIdle closes outbound packet streams that carried nothing for the idle
// timeout. Closing the write side tells the other end, which closes in turn;
// the reader here keeps reading until then.
func (t *transport) reapIdle() {
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.idleTimeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case now := <-tick.C:
			cutoff := now.Add(-t.cfg.idleTimeout).UnixNano()
			var idle []*packetStream
			t.mu.Lock()
			for _, l := range t.links {
				for ps := range l.streams {
					if ps.outbound && !ps.closing && ps.lastUse.Load() < cutoff && !l.writing {
						ps.closing = true
						if l.out == ps {
							l.out = nil
						}
						idle = append(idle, ps)
					}
				}
			}
			t.mu.Unlock()
			for _, ps := range idle {
				_ = ps.s.CloseWrite()
			}
		}
	}
}

// drain waits, at most timeout, until every queued packet has been written.
func (t *transport) drain(timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		busy := t.writers > 0
		t.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-t.idle:
		case <-deadline.C:
			return
		}
	}
}

// lastHeard returns when a frame or stream last came from the peer (zero if
// never).
func (t *transport) lastHeard(name string) time.Time {
	t.mu.Lock()
	l := t.links[name]
	t.mu.Unlock()
	if l == nil {
		return time.Time{}
	}
	if ns := l.lastHeard.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Shutdown stops the transport: no new streams, packet streams closed
// (what was written is still delivered; a stream that does not close within
// closeTimeout is reset), memberlist streams reset, and every goroutine the
// transport started has returned when it does.
func (t *transport) Shutdown() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	t.cancel()
	var streams []network.Stream
	for _, l := range t.links {
		for ps := range l.streams {
			streams = append(streams, ps.s)
		}
		l.queue, l.queued = nil, 0
	}
	conns := make([]*streamConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()

	t.h.RemoveStreamHandler(t.packetProto)
	t.h.RemoveStreamHandler(t.streamProto)
	var closing sync.WaitGroup
	for _, s := range streams {
		closing.Go(func() {
			stop := time.AfterFunc(closeTimeout, func() { _ = s.Reset() })
			_ = s.Close()
			stop.Stop()
		})
	}
	for _, c := range conns {
		c.reset()
	}
	closing.Wait()
	t.wg.Wait()
	return nil
}

// closeTimeout bounds the graceful close of a packet stream at shutdown.
const closeTimeout = time.Second
