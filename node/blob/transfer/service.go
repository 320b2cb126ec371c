package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// ServiceName is the libp2p resource-manager service of the streams, so
// the node can give them limits of their own.
const ServiceName = "gpumesh.blob"

// Config configures a Service. Protocol, Store and Auth are required.
type Config struct {
	// Protocol is the stream protocol, e.g. "/gpumesh/<network>/blob/1".
	Protocol protocol.ID
	// Store holds what is served and receives what is fetched.
	Store *blob.Store
	// Auth decides what peers may read and push.
	Auth Authorizer
	// Logger gets refused requests, dropped holders, corrupt chunks.
	// Default: discard.
	Logger *slog.Logger
	// Timeout bounds each step of a request: opening its stream, its
	// first answer, and each object's bytes after the previous (a holder
	// that stalls is dropped within it), on both ends. Default: 30 s.
	Timeout time.Duration
	// HolderStreams is how many streams a fetch keeps open to one
	// holder. Default: 2.
	HolderStreams int
	// Pipeline is how many requests a fetch's stream has sent and not yet
	// had answered: the holder starts on the next as soon as it has
	// answered one. Default: 2.
	Pipeline int
	// Batch is how many chunks one request asks for. Default: 4.
	Batch int
	// Window is how many chunks a fetch has asked for and not yet stored,
	// over all its holders: with streaming to disk it bounds the fetch's
	// work in flight, not its memory (a few hundred KiB per stream).
	// Default: 64.
	Window int
	// Commits is how many chunks a fetch writes through to disk at once
	// (each is synced before it is visible); the streams go on reading
	// meanwhile. Default: 4.
	Commits int
	// MaxInbound bounds the requests served at once; one more waits up to
	// Timeout for its turn, then is refused as busy. Default: 64.
	MaxInbound int
	// MaxCorrupt is how many corrupt chunks a holder may serve in one
	// fetch before it is dropped from it. Default: 2.
	MaxCorrupt int
}

func (c *Config) setDefaults() error {
	switch {
	case c.Protocol == "":
		return errors.New("transfer: Config.Protocol is required")
	case c.Store == nil:
		return errors.New("transfer: Config.Store is required")
	case c.Auth == nil:
		return errors.New("transfer: Config.Auth is required")
	case c.Timeout < 0 || c.HolderStreams < 0 || c.Pipeline < 0 || c.Batch < 0 || c.Commits < 0 || c.Window < 0 || c.MaxInbound < 0 || c.MaxCorrupt < 0:
		return errors.New("transfer: negative Config value")
	case c.Batch > MaxBatch:
		return fmt.Errorf("transfer: Config.Batch %d over %d", c.Batch, MaxBatch)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&c.Timeout, 30*time.Second)
	setDefault(&c.HolderStreams, 2)
	setDefault(&c.Pipeline, 2)
	setDefault(&c.Batch, 4)
	setDefault(&c.Window, 64)
	setDefault(&c.Commits, 4)
	setDefault(&c.MaxInbound, 64)
	setDefault(&c.MaxCorrupt, 2)
	return nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Service serves a node's store to its peers and fetches from and pushes
// to them, over libp2p streams of one protocol. It owns the handlers of
// its inbound streams and the goroutines of its fetches; Close ends them
// and waits for them.
type Service struct {
	cfg   Config
	h     host.Host
	store *blob.Store
	log   *slog.Logger
	slots chan struct{}

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	grants map[grant]int // pushes in flight: the receiver may read the manifest
	scopes *scopeCache
}

// grant lets a peer read a manifest while this node pushes it there.
type grant struct {
	p peer.ID
	m blob.Digest
}

// New registers the protocol's handler on h.
func New(h host.Host, cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		cfg:    cfg,
		h:      h,
		store:  cfg.Store,
		log:    cfg.Logger,
		slots:  make(chan struct{}, cfg.MaxInbound),
		ctx:    ctx,
		cancel: cancel,
		grants: make(map[grant]int),
		scopes: newScopeCache(16),
	}
	h.SetStreamHandler(cfg.Protocol, s.handle)
	return s, nil
}

// Close removes the handler, ends the streams being served and the
// fetches and pushes in progress, and waits for them.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.h.RemoveStreamHandler(s.cfg.Protocol)
	s.cancel()
	s.wg.Wait()
	return nil
}

// start registers work with the Service, so Close waits for it; it fails
// after Close.
func (s *Service) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// handle serves one inbound stream.
func (s *Service) handle(st network.Stream) {
	if !s.start() {
		st.Reset()
		return
	}
	defer s.wg.Done()
	if err := st.Scope().SetService(ServiceName); err != nil {
		st.Reset()
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	s.serve(ctx, st)
}

// open opens a stream to p within Timeout.
//
// A connection that dies as the stream is opened on it (a link cut and
// healed leaves one that the host learns is dead only when it is used)
// fails the open with the host's "connection failed", or gives a stream
// on a closed connection; either is tried once more, which dials a
// fresh connection.
func (s *Service) open(ctx context.Context, p peer.ID) (network.Stream, error) {
	octx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var st network.Stream
	for try := 1; ; try++ {
		had := len(s.h.Network().ConnsToPeer(p)) > 0
		var err error
		st, err = s.h.NewStream(octx, p, s.cfg.Protocol)
		died := err != nil && had && s.h.Network().Connectedness(p) != network.Connected
		if err == nil && st.Conn().IsClosed() { // a connection closing as it was picked
			st.Reset()
			died, err = true, network.ErrReset
		}
		if died && try == 1 && octx.Err() == nil {
			s.log.Debug("blob stream on a connection that died as it opened; dialling again", "peer", p.ShortString(), "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("transfer: opening a stream to %s: %w", p.ShortString(), err)
		}
		break
	}
	if err := st.Scope().SetService(ServiceName); err != nil {
		st.Reset()
		return nil, fmt.Errorf("transfer: stream to %s: %w", p.ShortString(), err)
	}
	return st, nil
}

// dial opens a stream to p for requests; the stream is reset when ctx
// ends.
func (s *Service) dial(ctx context.Context, p peer.ID) (*conn, error) {
	st, err := s.open(ctx, p)
	if err != nil {
		return nil, err
	}
	c := newConn(st, s.cfg.Timeout)
	c.stop = context.AfterFunc(ctx, func() { st.Reset() })
	return c, nil
}

// request writes one request on c, within Timeout.
func (c *conn) request(q request) error {
	c.deadline()
	err := writeFrame(c.w, q.typ, q.encode())
	if err == nil {
		err = c.w.Flush()
	}
	if err != nil {
		return fmt.Errorf("transfer: request to %s: %w", c.st.Conn().RemotePeer().ShortString(), c.explain(err))
	}
	return nil
}

// send writes a request on a fresh stream to p and half-closes it: the
// only request of the stream. The stream is reset when ctx ends.
func (s *Service) send(ctx context.Context, p peer.ID, q request) (*conn, error) {
	c, err := s.dial(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := c.request(q); err != nil {
		c.reset()
		return nil, err
	}
	// The request is written; the half-close only tells the peer so. Over
	// QUIC a peer that has answered and closed already has cancelled this
	// side, and closing it fails: the answer is there all the same, and a
	// stream broken for real fails the read of it.
	_ = c.st.CloseWrite()
	return c, nil
}

// conn is a stream with its buffers and its per-step deadline. The
// deadline is a watchdog of its own that resets the stream, not the
// stream's SetDeadline, which some transports ignore (mocknet's does).
type conn struct {
	st       network.Stream
	r        *bufio.Reader
	w        *bufio.Writer
	timeout  time.Duration
	watchdog *time.Timer
	expired  atomic.Bool
	stop     func() bool
	ended    bool
}

func newConn(st network.Stream, timeout time.Duration) *conn {
	c := &conn{st: st, r: bufio.NewReaderSize(st, 64<<10), w: bufio.NewWriterSize(st, 64<<10), timeout: timeout}
	c.watchdog = time.AfterFunc(timeout, func() {
		c.expired.Store(true)
		st.Reset()
	})
	return c
}

// deadline gives the next step Timeout (nothing once the stream ended).
func (c *conn) deadline() {
	if !c.ended {
		c.watchdog.Reset(c.timeout)
	}
}

// noDeadline lets the next step take as long as it takes.
func (c *conn) noDeadline() { c.watchdog.Stop() }

// explain names a stream error caused by the deadline as such.
func (c *conn) explain(err error) error {
	if c.expired.Load() {
		return fmt.Errorf("no progress in %v: %w", c.timeout, os.ErrDeadlineExceeded)
	}
	return err
}

// reset aborts the stream, unless it was closed.
func (c *conn) reset() {
	if c.ended {
		return
	}
	c.ended = true
	c.watchdog.Stop()
	if c.stop != nil {
		c.stop()
	}
	c.st.Reset()
}

// close ends a stream whose exchange is over.
func (c *conn) close() {
	if c.ended {
		return
	}
	c.ended = true
	c.watchdog.Stop()
	if c.stop != nil {
		c.stop()
	}
	c.st.Close()
}

// mayRead checks that p may read m: this node pushes m to p, or the
// Authorizer says so.
func (s *Service) mayRead(ctx context.Context, p peer.ID, m blob.Digest) error {
	s.mu.Lock()
	granted := s.grants[grant{p, m}] > 0
	s.mu.Unlock()
	if granted {
		return nil
	}
	return s.cfg.Auth.AllowRead(ctx, p, m)
}

func (s *Service) addGrant(g grant) {
	s.mu.Lock()
	s.grants[g]++
	s.mu.Unlock()
}

func (s *Service) dropGrant(g grant) {
	s.mu.Lock()
	if s.grants[g]--; s.grants[g] <= 0 {
		delete(s.grants, g)
	}
	s.mu.Unlock()
}
