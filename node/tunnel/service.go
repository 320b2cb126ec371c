package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Defaults of Config.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultMaxInbound = 1024
	hangupGrace       = 2 * time.Second // SIGHUP to SIGKILL for an exec whose client went away
	ttyDrain          = time.Second     // reading a terminal after its process exited
	exitAckWait       = 5 * time.Second // for the client to close after the exit frame
)

// Attempt is a running attempt a tunnel ends in; *executor.Run is one.
type Attempt interface {
	Exec(executor.ExecRequest) (*executor.Process, error)
	DialTCP(ctx context.Context, port int) (net.Conn, error)
}

var _ Attempt = (*executor.Run)(nil)

// Target is the attempt a request reaches on this node, and what the
// request is checked against.
type Target struct {
	Attempt Attempt
	// Epoch is the attempt's epoch.
	Epoch uint64
	// Owner is the job's owner, from the spec the owner signed.
	Owner owner.ID
	// Port is the service's port (0 for a job that is no service), and
	// Public whether its owner opened it to the ingress.
	Port   int
	Public bool
	// Ready reports whether the replica's readiness probe answers now; nil
	// means ready.
	Ready func() bool
}

// Jobs finds the attempts that tunnels end in. It is called from stream
// goroutines, concurrently.
type Jobs interface {
	// Target returns the attempt of the job's share running on this node
	// (of that epoch, or for epoch 0 the latest), or an *Error: 404 when
	// none runs here.
	Target(ctx context.Context, job string, share int, epoch uint64) (Target, error)
}

// Config configures a Service. Host and Network are required.
type Config struct {
	Host host.Host
	// Network names the mesh: the protocol is /gpumesh/<network>/v1/tunnel.
	Network string
	// Jobs resolves inbound tunnels; nil refuses every one (a node that
	// only opens tunnels).
	Jobs Jobs
	// Logger receives what ran and what was refused. Default: discard.
	Logger *slog.Logger
	// Timeout bounds opening a stream, exchanging the request and the
	// response, and dialling a job's port. Default DefaultTimeout.
	Timeout time.Duration
	// MaxInbound bounds the tunnels this node serves at once; more are
	// refused with 503. Default DefaultMaxInbound.
	MaxInbound int
	// Now is the clock owners' signed requests are checked against.
	// Default time.Now.
	Now func() time.Time
}

// Conn is one open tunnel: a libp2p stream, or a pipe when the tunnel
// ends on the node that opened it.
type Conn interface {
	io.ReadWriteCloser
	// CloseWrite tells the other end that nothing more will be written.
	CloseWrite() error
}

// Service opens tunnels into jobs on other nodes (Open) and serves the
// tunnels that end in jobs on this one. It owns the goroutines of the
// tunnels it serves; Close ends them and waits.
type Service struct {
	cfg   Config
	h     host.Host
	proto protocol.ID
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	slots  chan struct{}
}

// New registers the tunnel protocol on cfg.Host.
func New(cfg Config) (*Service, error) {
	if cfg.Host == nil || cfg.Network == "" {
		return nil, errors.New("tunnel: Host and Network are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxInbound <= 0 {
		cfg.MaxInbound = DefaultMaxInbound
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		cfg:    cfg,
		h:      cfg.Host,
		proto:  protocol.ID(fmt.Sprintf("/gpumesh/%s/v1/tunnel", cfg.Network)),
		log:    cfg.Logger,
		ctx:    ctx,
		cancel: cancel,
		slots:  make(chan struct{}, cfg.MaxInbound),
	}
	s.h.SetStreamHandler(s.proto, func(st network.Stream) { s.serve(st, st.Conn().RemotePeer()) })
	return s, nil
}

// Close stops serving: the protocol is removed, open tunnels are cut (an
// exec's command is hung up) and Close returns once their goroutines
// have.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.h.RemoveStreamHandler(s.proto)
	s.cancel()
	s.wg.Wait()
	return nil
}

// track registers a served tunnel, or reports false when the Service is
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

// Open opens a tunnel to the node to (this node itself included) and
// returns it once the job's end has accepted the request, with its answer.
// A refusal is an *Error carrying the job's end's status and reason.
func (s *Service) Open(ctx context.Context, to peer.ID, req Request) (Conn, Response, error) {
	var c Conn
	if to == s.h.ID() && (req.Kind == KindForward || req.Kind == KindService) {
		return s.openLocal(ctx, req)
	}
	if to == s.h.ID() {
		near, far := newPipe()
		if !s.track() {
			return nil, Response{}, Errorf(http.StatusServiceUnavailable, "the node is stopping")
		}
		go func() {
			defer s.wg.Done()
			s.handle(far, to)
		}()
		c = near
	} else {
		octx, cancel := context.WithTimeout(network.WithAllowLimitedConn(ctx, "gpumesh tunnel"), s.cfg.Timeout)
		st, err := s.h.NewStream(octx, to, s.proto)
		cancel()
		if err != nil {
			return nil, Response{}, Errorf(http.StatusBadGateway, "no tunnel to node %s: %v", to.ShortString(), err)
		}
		c = st
	}
	hctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { abort(c) })
	var resp Response
	err := writeHeader(c, req)
	if err == nil {
		err = readHeader(c, &resp)
	}
	if !stop() || err != nil {
		abort(c)
		if err == nil || hctx.Err() != nil {
			err = hctx.Err()
		}
		return nil, Response{}, Errorf(http.StatusBadGateway, "node %s did not answer the tunnel request: %v", to.ShortString(), err)
	}
	if resp.Status != http.StatusOK {
		c.Close()
		return nil, resp, &Error{Status: resp.Status, Field: resp.Field, Msg: resp.Error}
	}
	return c, resp, nil
}

// serve handles an inbound stream.
func (s *Service) serve(st network.Stream, from peer.ID) {
	if !s.track() {
		st.Reset()
		return
	}
	defer s.wg.Done()
	s.handle(st, from)
}

// handle reads a tunnel's request, resolves and checks it, and runs the
// tunnel until either end closes it.
func (s *Service) handle(c Conn, from peer.ID) {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.refuse(c, Errorf(http.StatusServiceUnavailable, "this node serves %d tunnels already", s.cfg.MaxInbound))
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()

	var req Request
	hdr := time.AfterFunc(s.cfg.Timeout, func() { abort(c) })
	err := readHeader(c, &req)
	if !hdr.Stop() || err != nil {
		s.log.Debug("tunnel: unreadable request", "from", from, "err", err)
		abort(c)
		return
	}
	log := s.log.With("job", req.Job, "share", req.Share, "kind", string(req.Kind), "via", from.ShortString())
	if req.Proof != nil {
		log = log.With("owner", req.Proof.Owner.Short())
	}
	if s.cfg.Jobs == nil {
		s.refuse(c, Errorf(http.StatusNotFound, "job %s share %d does not run on node %s", req.Job, req.Share, s.h.ID().ShortString()))
		return
	}
	t, err := s.cfg.Jobs.Target(ctx, req.Job, req.Share, req.Epoch)
	if err == nil {
		err = authorize(&req, &t, s.cfg.Now())
	}
	if err != nil {
		log.Info("tunnel refused", "err", err)
		s.refuse(c, err)
		return
	}
	log = log.With("epoch", t.Epoch)
	switch req.Kind {
	case KindExec:
		s.exec(ctx, c, &req, &t, log)
	case KindForward, KindService:
		s.forward(ctx, c, &req, &t, log)
	default:
		s.refuse(c, Errorf(http.StatusBadRequest, "unknown tunnel kind %q", req.Kind))
	}
}

// refuse answers a request with err and closes the tunnel.
func (s *Service) refuse(c Conn, err error) {
	e := AsError(err)
	_ = writeHeader(c, Response{Status: e.Status, Error: e.Msg, Field: e.Field})
	c.Close()
}

// forward dials the port a forward or service tunnel asks for inside the
// attempt's network and carries bytes both ways until both ends closed.
func (s *Service) forward(ctx context.Context, c Conn, req *Request, t *Target, log *slog.Logger) {
	tc, port, err := s.dialFor(ctx, req, t)
	if err != nil {
		s.refuse(c, err)
		return
	}
	if err := writeHeader(c, Response{Status: http.StatusOK, Epoch: t.Epoch}); err != nil {
		tc.Close()
		abort(c)
		return
	}
	log.Debug("tunnel open", "port", port)
	up, down := wire.Splice(c, asConn(tc))
	log.Debug("tunnel closed", "port", port, "bytes_in", up, "bytes_out", down)
}

// dialFor connects to the port a forward (its signed body's) or service
// (its spec's, on a ready replica) tunnel asks for.
func (s *Service) dialFor(ctx context.Context, req *Request, t *Target) (net.Conn, int, error) {
	port := t.Port
	if req.Kind == KindForward {
		var f wire.ForwardRequest
		if err := decodeBody(req.Body, &f); err != nil {
			return nil, 0, err
		}
		if err := CheckForward(&f); err != nil {
			return nil, 0, err
		}
		if f.Share != req.Share {
			return nil, 0, Errorf(http.StatusBadRequest, "job %s: the owner signed share %d, not %d", req.Job, f.Share, req.Share)
		}
		port = f.Port
	} else {
		switch {
		case port == 0:
			return nil, 0, Errorf(http.StatusNotFound, "job %s is not a service with a port (submit it with --service --port PORT)", req.Job)
		case t.Ready != nil && !t.Ready():
			return nil, 0, Errorf(http.StatusServiceUnavailable, "job %s share %d epoch %d is not ready: its readiness probe does not answer", req.Job, req.Share, t.Epoch)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	tc, err := t.Attempt.DialTCP(dctx, port)
	if err != nil {
		return nil, 0, Errorf(http.StatusBadGateway, "job %s share %d: nothing answers on port %d: %v", req.Job, req.Share, port, unwrapDial(err))
	}
	return tc, port, nil
}

// openLocal opens a forward or service tunnel into an attempt of this
// node: after the same checks as a tunnel from a peer, the connection to
// the job's port is the tunnel itself (the kernel can splice it to the
// client's).
func (s *Service) openLocal(ctx context.Context, req Request) (Conn, Response, error) {
	if s.cfg.Jobs == nil {
		return nil, Response{}, Errorf(http.StatusNotFound, "job %s share %d does not run on node %s", req.Job, req.Share, s.h.ID().ShortString())
	}
	log := s.log.With("job", req.Job, "share", req.Share, "kind", string(req.Kind), "via", "self")
	if req.Proof != nil {
		log = log.With("owner", req.Proof.Owner.Short())
	}
	t, err := s.cfg.Jobs.Target(ctx, req.Job, req.Share, req.Epoch)
	if err == nil {
		err = authorize(&req, &t, s.cfg.Now())
	}
	var tc net.Conn
	var port int
	if err == nil {
		tc, port, err = s.dialFor(ctx, &req, &t)
	}
	if err != nil {
		log.Info("tunnel refused", "err", err)
		return nil, Response{}, AsError(err)
	}
	log.Debug("tunnel open", "epoch", t.Epoch, "port", port)
	return asConn(tc), Response{Status: http.StatusOK, Epoch: t.Epoch}, nil
}

// unwrapDial drops the *net.OpError layers that repeat addresses.
func unwrapDial(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// abort ends a tunnel at once: a stream is reset, a pipe closed.
func abort(c io.Closer) {
	if r, ok := c.(interface{ Reset() error }); ok {
		_ = r.Reset()
		return
	}
	_ = c.Close()
}
