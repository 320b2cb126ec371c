package gangnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/node/tunnel/wire"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Defaults of Config.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultDialWait = 10 * time.Second
	DefaultMaxConns = 4096
)

// Config configures a Service. Host and Network are required.
type Config struct {
	Host host.Host
	// Network names the mesh: the protocol is /gpumesh/<network>/v1/gangnet.
	Network string
	// Logger receives refusals (info) and carried connections (debug).
	// Default: discard.
	Logger *slog.Logger
	// Timeout bounds opening a stream to another node and its request's
	// exchange, besides DialWait. Default DefaultTimeout.
	Timeout time.Duration
	// DialWait is how long a connection waits for its target: the share
	// to run on its node, and its port to listen. Default
	// DefaultDialWait.
	DialWait time.Duration
	// MaxConns bounds the connections this node carries at once, both
	// ways; more are reset. Default DefaultMaxConns.
	MaxConns int
	// Reach, when set, is called before a stream is opened to a node (to
	// give libp2p the addresses membership knows of it).
	Reach func(peer.ID)
}

// Peer is one share of a gang in its roster.
type Peer struct {
	Node  peer.ID
	Share int
	Epoch uint64
}

// Member is one share of a gang that runs on this node, as Add takes it.
type Member struct {
	Job string
	// Rank is the share's place in Roster; its address is Addr(Job, Rank).
	Rank int
	// Roster is every share of the gang in rank order, as the gang's
	// coordinator started it. Roster[Rank] is this node's share.
	Roster []Peer
	// Listener yields the connections the share opened to other addresses
	// of its network (executor's Run.PrivateListener), and Dest tells
	// where each was going (executor.OriginalDst).
	Listener net.Listener
	Dest     func(net.Conn) (netip.AddrPort, error)
	// Dial connects to a port on the share's own address, inside its
	// namespace (executor's Run.DialPrivate).
	Dial func(ctx context.Context, port int) (net.Conn, error)
}

func (m *Member) validate(self peer.ID) error {
	switch {
	case !jobPattern.MatchString(m.Job):
		return fmt.Errorf("gangnet: job %q: want 1-128 of [A-Za-z0-9._-]", m.Job)
	case len(m.Roster) == 0 || len(m.Roster) > MaxRank+1:
		return fmt.Errorf("gangnet: a roster of %d shares: want 1 to %d", len(m.Roster), MaxRank+1)
	case m.Rank < 0 || m.Rank >= len(m.Roster):
		return fmt.Errorf("gangnet: rank %d of %d", m.Rank, len(m.Roster))
	case m.Roster[m.Rank].Node != self:
		return fmt.Errorf("gangnet: rank %d runs on node %s, not this one", m.Rank, m.Roster[m.Rank].Node)
	case m.Listener == nil || m.Dest == nil || m.Dial == nil:
		return errors.New("gangnet: a member needs its Listener, Dest and Dial")
	}
	return nil
}

// Service carries the connections between the shares of gangs: those its
// members open (outbound) and those other nodes bring to them (the
// protocol's streams). It owns the goroutines that do; Close ends them
// and waits.
type Service struct {
	cfg   Config
	h     host.Host
	proto protocol.ID
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	slots chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	members map[key]*member
	changed chan struct{} // closed, and replaced, when members change
}

type key struct {
	job   string
	rank  int
	epoch uint64 // an attempt stopping and its replacement may be here at once
}

// member is an added Member and what it holds.
type member struct {
	Member
	ctx    context.Context // ends when the member is removed
	cancel context.CancelFunc
	wg     sync.WaitGroup // its accept loop and connections

	mu     sync.Mutex
	gone   bool
	conns  map[io.Closer]struct{}
	ended  chan struct{} // closed when its accept loop ended
	accErr error
}

// New registers the protocol on cfg.Host.
func New(cfg Config) (*Service, error) {
	if cfg.Host == nil || cfg.Network == "" {
		return nil, errors.New("gangnet: Host and Network are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.DialWait <= 0 {
		cfg.DialWait = DefaultDialWait
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, h: cfg.Host, proto: Protocol(cfg.Network), log: cfg.Logger, ctx: ctx, stop: stop,
		slots: make(chan struct{}, cfg.MaxConns), members: map[key]*member{}, changed: make(chan struct{})}
	s.h.SetStreamHandler(s.proto, s.serve)
	return s, nil
}

// Protocol is the stream protocol of the mesh named network.
func Protocol(network string) protocol.ID {
	return protocol.ID(fmt.Sprintf("/gpumesh/%s/v1/gangnet", network))
}

// Add starts carrying a share's connections and accepting the gang's
// connections to it. A share of the same job, rank and epoch must not be
// added twice.
func (s *Service) Add(m Member) error {
	if err := m.validate(s.h.ID()); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	mb := &member{Member: m, ctx: ctx, cancel: cancel, conns: map[io.Closer]struct{}{}, ended: make(chan struct{})}
	k := key{m.Job, m.Rank, m.Roster[m.Rank].Epoch}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		cancel()
		return errors.New("gangnet: the service is closed")
	case s.members[k] != nil:
		cancel()
		return fmt.Errorf("gangnet: job %s rank %d epoch %d is here already", m.Job, m.Rank, m.Roster[m.Rank].Epoch)
	}
	s.members[k] = mb
	close(s.changed)
	s.changed = make(chan struct{})
	s.wg.Add(1)
	mb.wg.Add(1)
	go s.accept(mb)
	return nil
}

// Remove stops carrying a share's connections: its listener is closed,
// its connections are cut, and Remove returns once their goroutines have.
func (s *Service) Remove(job string, rank int, epoch uint64) {
	k := key{job, rank, epoch}
	s.mu.Lock()
	m := s.members[k]
	if m != nil {
		delete(s.members, k)
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	if m != nil {
		m.end()
	}
}

// Close cuts every connection, unregisters the protocol and returns once
// every goroutine of the Service has.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ms := s.members
	s.members = map[key]*member{}
	s.mu.Unlock()
	s.h.RemoveStreamHandler(s.proto)
	s.stop()
	for _, m := range ms {
		m.end()
	}
	s.wg.Wait()
	return nil
}

// track registers a goroutine of the Service, or reports false once it is
// closed.
func (s *Service) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// end cuts what the member holds and waits for its goroutines.
func (m *member) end() {
	m.cancel()
	m.Listener.Close()
	m.mu.Lock()
	m.gone = true
	for c := range m.conns {
		abort(c)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// hold makes c the member's (cut when it is removed), for a goroutine
// that calls release when done with it; false when the member is gone.
func (m *member) hold(c io.Closer) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone {
		return false
	}
	m.conns[c] = struct{}{}
	m.wg.Add(1)
	return true
}

func (m *member) release(c io.Closer) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
	m.wg.Done()
}

// self is the member's own entry in its roster.
func (m *member) self() Peer { return m.Roster[m.Rank] }

// accept takes the share's connections until its listener closes.
func (s *Service) accept(m *member) {
	defer s.wg.Done()
	defer m.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		c, err := m.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || m.ctx.Err() != nil {
				return
			}
			// Out of descriptors, or the like: not the listener's end.
			s.log.Warn("gangnet: accepting a share's connection", "job", m.Job, "rank", m.Rank, "err", err)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		if !m.hold(c) {
			reset(c)
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.log.Warn("gangnet: too many connections; one reset", "job", m.Job, "rank", m.Rank, "max", s.cfg.MaxConns)
			reset(c)
			m.release(c)
			continue
		}
		s.wg.Add(1) // this loop holds the count above zero
		go func() {
			defer s.wg.Done()
			defer m.release(c)
			defer func() { <-s.slots }()
			s.outbound(m, c)
		}()
	}
}

// outbound carries one connection a share opened to another share's
// address.
func (s *Service) outbound(m *member, c net.Conn) {
	dst, err := m.Dest(c)
	if err != nil {
		s.log.Warn("gangnet: a share's connection has no destination", "job", m.Job, "rank", m.Rank, "err", err)
		reset(c)
		return
	}
	log := s.log.With("job", m.Job, "from_rank", m.Rank, "to", dst.String())
	rank, ok := RankOf(m.Job, dst.Addr())
	if !ok || rank >= len(m.Roster) || rank == m.Rank {
		log.Debug("gangnet: no share of the gang has that address")
		reset(c)
		return
	}
	me, to := m.self(), m.Roster[rank]
	req := request{Job: m.Job, FromRank: m.Rank, FromShare: me.Share, FromEpoch: me.Epoch,
		ToRank: rank, ToShare: to.Share, ToEpoch: to.Epoch, Port: int(dst.Port())}
	var far wire.HalfCloser
	if to.Node == s.h.ID() {
		far, err = s.connect(m.ctx, &req, s.h.ID())
	} else {
		far, err = s.open(m.ctx, to.Node, &req)
	}
	if err != nil {
		log.Info("gangnet: connection not carried", "node", to.Node.ShortString(), "err", err)
		reset(c)
		return
	}
	log.Debug("gangnet: carrying a connection", "node", to.Node.ShortString())
	wire.Splice(halfCloser(c), far)
}

// open opens a stream to the node of the request's target and returns it
// once that node's share answered.
func (s *Service) open(ctx context.Context, to peer.ID, req *request) (wire.HalfCloser, error) {
	if s.cfg.Reach != nil {
		s.cfg.Reach(to)
	}
	octx, cancel := context.WithTimeout(network.WithAllowLimitedConn(ctx, "gpumesh gangnet"), s.cfg.Timeout)
	st, err := s.h.NewStream(octx, to, s.proto)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("no stream to node %s: %w", to.ShortString(), err)
	}
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	_ = st.SetDeadline(time.Now().Add(s.cfg.Timeout + s.cfg.DialWait))
	var resp response
	if err := writeFrame(st, req); err == nil {
		err = readFrame(st, &resp)
	}
	if err != nil {
		st.Reset()
		return nil, fmt.Errorf("node %s: %w", to.ShortString(), err)
	}
	if !resp.OK {
		st.Close()
		return nil, fmt.Errorf("node %s refused: %s", to.ShortString(), resp.Error)
	}
	_ = st.SetDeadline(time.Time{})
	return st, nil
}

// serve answers a stream from another node: a connection for one of the
// shares here.
func (s *Service) serve(st network.Stream) {
	if !s.track() {
		st.Reset()
		return
	}
	defer s.wg.Done()
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.answer(st, fmt.Errorf("node %s carries %d connections already", s.h.ID().ShortString(), s.cfg.MaxConns))
		return
	}
	from := st.Conn().RemotePeer()
	stop := context.AfterFunc(s.ctx, func() { st.Reset() })
	defer stop()
	_ = st.SetDeadline(time.Now().Add(s.cfg.Timeout))
	var req request
	if err := readFrame(st, &req); err != nil {
		s.log.Debug("gangnet: unreadable request", "from", from, "err", err)
		st.Reset()
		return
	}
	if err := req.validate(); err != nil {
		s.answer(st, fmt.Errorf("bad request: %w", err))
		return
	}
	_ = st.SetDeadline(time.Now().Add(s.cfg.Timeout + s.cfg.DialWait))
	c, err := s.connect(s.ctx, &req, from)
	if err != nil {
		s.log.Info("gangnet: connection refused", "from", from, "job", req.Job, "from_rank", req.FromRank, "to_rank", req.ToRank, "port", req.Port, "err", err)
		s.answer(st, err)
		return
	}
	if err := writeFrame(st, response{OK: true}); err != nil {
		st.Reset()
		c.Close()
		return
	}
	_ = st.SetDeadline(time.Time{})
	s.log.Debug("gangnet: carrying a connection", "from", from, "job", req.Job, "from_rank", req.FromRank, "to_rank", req.ToRank, "port", req.Port)
	wire.Splice(st, c)
}

// answer refuses a request with err's text and closes the stream.
func (s *Service) answer(st network.Stream, err error) {
	_ = writeFrame(st, response{Error: err.Error()})
	st.Close()
}

// errRefused is wrapped by a connection the roster does not allow.
var errRefused = errors.New("not allowed")

// connect finds the request's target share here (waiting DialWait for it
// to start), checks that the request comes from the node its roster names
// for the sender, and dials the port on the share's address (again, while
// it is refused, for DialWait). The connection is the member's: removing
// it cuts the connection.
func (s *Service) connect(ctx0 context.Context, req *request, from peer.ID) (wire.HalfCloser, error) {
	deadline := time.Now().Add(s.cfg.DialWait)
	m, err := s.await(ctx0, req, deadline)
	if err != nil {
		return nil, err
	}
	want := Peer{Node: from, Share: req.FromShare, Epoch: req.FromEpoch}
	if req.FromRank >= len(m.Roster) || m.Roster[req.FromRank] != want {
		return nil, fmt.Errorf("%w: node %s as rank %d (share %d, epoch %d) is not in the roster of job %s's gang here",
			errRefused, from.ShortString(), req.FromRank, req.FromShare, req.FromEpoch, req.Job)
	}
	ctx, cancel := context.WithDeadline(m.ctx, deadline)
	defer cancel()
	stop := context.AfterFunc(ctx0, cancel) // the asker gave up
	defer stop()
	backoff := 20 * time.Millisecond
	for {
		c, err := m.Dial(ctx, req.Port)
		if err == nil {
			hc := halfCloser(c)
			if !m.hold(hc) {
				c.Close()
				return nil, fmt.Errorf("job %s rank %d has ended here", req.Job, req.ToRank)
			}
			// Released when the splice closes it: the member waits for
			// that, and cuts it.
			return &held{HalfCloser: hc, m: m}, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("job %s rank %d port %d: %w", req.Job, req.ToRank, req.Port, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s rank %d: nothing listens on port %d (waited %v)", req.Job, req.ToRank, req.Port, s.cfg.DialWait)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// await returns the member the request is for once it is here, as the
// roster of the requester's epoch names it.
func (s *Service) await(ctx context.Context, req *request, deadline time.Time) (*member, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		s.mu.Lock()
		m, changed := s.members[key{req.Job, req.ToRank, req.ToEpoch}], s.changed
		var newer *member
		if m == nil {
			for k, o := range s.members {
				if k.job == req.Job && k.rank == req.ToRank && k.epoch > req.ToEpoch {
					newer = o
				}
			}
		}
		s.mu.Unlock()
		switch {
		case m != nil && m.self().Share == req.ToShare:
			return m, nil
		case m != nil:
			return nil, fmt.Errorf("%w: job %s rank %d epoch %d is share %d here, not share %d", errRefused, req.Job, req.ToRank, req.ToEpoch, m.self().Share, req.ToShare)
		case newer != nil:
			me := newer.self()
			return nil, fmt.Errorf("%w: job %s rank %d runs here as share %d epoch %d, not share %d epoch %d",
				errRefused, req.Job, req.ToRank, me.Share, me.Epoch, req.ToShare, req.ToEpoch)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("job %s rank %d (share %d, epoch %d) does not run on node %s", req.Job, req.ToRank, req.ToShare, req.ToEpoch, s.h.ID().ShortString())
		}
	}
}

// held is a connection a member holds until it is closed.
type held struct {
	wire.HalfCloser
	m    *member
	once sync.Once
}

func (h *held) Close() error {
	err := h.HalfCloser.Close()
	h.once.Do(func() { h.m.release(h.HalfCloser) })
	return err
}

// halfCloser gives c a half-close: TCP has one; others close whole.
func halfCloser(c net.Conn) wire.HalfCloser {
	if hc, ok := c.(wire.HalfCloser); ok {
		return hc
	}
	return wholeCloser{c}
}

type wholeCloser struct{ net.Conn }

func (w wholeCloser) CloseWrite() error { return w.Conn.Close() }

// reset ends a share's connection with a reset, as a refused connect
// would.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// abort ends a connection at once: a libp2p stream is reset, others are
// closed.
func abort(c io.Closer) {
	if r, ok := c.(interface{ Reset() error }); ok {
		_ = r.Reset()
		return
	}
	_ = c.Close()
}
