package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Defaults of ProxyConfig.
const (
	DefaultRefresh  = time.Second      // a service's record is looked up again after this
	DefaultStale    = 30 * time.Second // a record that cannot be refreshed is used this long
	DefaultCooldown = 2 * time.Second  // a replica that failed is skipped this long
	// maxReplayBody is the largest request body kept to send again to
	// another replica (idempotent methods only).
	maxReplayBody = 1 << 20
	// sweepAbove is how many jobs' records the proxy keeps before it drops
	// those it has not looked up for DefaultStale (an ingress is asked for
	// any job ID anyone makes up); forgetAfter is how long it keeps the name
	// of a replica it no longer saw.
	sweepAbove  = 256
	forgetAfter = 10 * time.Minute
)

// Endpoint is one ready replica of a service: the node that runs it and
// its share and epoch.
type Endpoint struct {
	Node  peer.ID
	Share int
	Epoch uint64
}

// Backend is what a service job's record says about reaching it.
type Backend struct {
	Owner  owner.ID
	Public bool
	Port   int
	// Ready are its replicas whose readiness probes answer.
	Ready []Endpoint
}

// ProxyConfig configures a Proxy. Service and Lookup are required.
type ProxyConfig struct {
	Service *Service
	// Lookup returns what the job's record says (from whichever node holds
	// it), or an *Error: 404 for an unknown job, 409 for one that is no
	// service. It is called at most once per Refresh for each job, and
	// again sooner after a replica failed.
	Lookup func(ctx context.Context, job string) (Backend, error)
	// Logger receives failed replicas. Default: discard.
	Logger *slog.Logger
	// Refresh, Stale and Cooldown: see DefaultRefresh, DefaultStale and
	// DefaultCooldown.
	Refresh, Stale, Cooldown time.Duration
}

// Proxy serves HTTP requests of a service job on its ready replicas, over
// tunnels it keeps open between requests. Requests are spread round-robin;
// a replica that cannot be reached is skipped for a while and the request
// goes to another, and one that dies before it answers is asked again on
// another when the method is idempotent. Responses stream through as they
// come, flushed at every write. Safe for concurrent use.
type Proxy struct {
	cfg ProxyConfig
	tr  *http.Transport

	mu       sync.Mutex
	backends map[string]*cached
	hosts    map[string]dialTarget // transport host → where it dials
	byTarget map[dialTarget]string
	seen     map[dialTarget]time.Time // when a lookup last listed it
	hostSeq  int
	failed   map[dialTarget]time.Time
	next     atomic.Uint64
}

type cached struct {
	mu      sync.Mutex // held while looking it up
	b       Backend
	err     error
	at      time.Time
	invalid bool
}

type dialTarget struct {
	job string
	ep  Endpoint
}

// NewProxy returns a Proxy.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if cfg.Service == nil || cfg.Lookup == nil {
		return nil, errors.New("tunnel: a Proxy needs a Service and a Lookup")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Stale <= 0 {
		cfg.Stale = DefaultStale
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	p := &Proxy{cfg: cfg, backends: map[string]*cached{}, hosts: map[string]dialTarget{},
		byTarget: map[dialTarget]string{}, seen: map[dialTarget]time.Time{}, failed: map[dialTarget]time.Time{}}
	p.tr = &http.Transport{
		DialContext:         p.dial,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // what the service sends passes as it is
		ForceAttemptHTTP2:   false,
	}
	return p, nil
}

// Close drops the tunnels kept open between requests.
func (p *Proxy) Close() { p.tr.CloseIdleConnections() }

// proofKey carries the owner's signed request to the dial it causes.
type proofKey struct{}

// dialError is a failure to open a tunnel: the request was not sent, so
// it may go to another replica whatever its method.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	p.mu.Lock()
	t, ok := p.hosts[host]
	p.mu.Unlock()
	if !ok {
		return nil, &dialError{fmt.Errorf("unknown replica %s", host)}
	}
	req := Request{Kind: KindService, Job: t.job, Share: t.ep.Share, Epoch: t.ep.Epoch}
	if proof, ok := ctx.Value(proofKey{}).(*owner.Proof); ok {
		req.Proof = proof
	}
	c, _, err := p.cfg.Service.Open(ctx, t.ep.Node, req)
	if err != nil {
		return nil, &dialError{err}
	}
	return asNetConn(c, fmt.Sprintf("%s/s%d/e%d", t.ep.Node.ShortString(), t.ep.Share, t.ep.Epoch)), nil
}

// hostOf is the transport's host name for a replica: its pool of tunnels.
func (p *Proxy) hostOf(t dialTarget) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[t] = time.Now()
	if h, ok := p.byTarget[t]; ok {
		return h
	}
	p.hostSeq++
	h := "r" + strconv.Itoa(p.hostSeq) + ".gpumesh.invalid"
	p.hosts[h], p.byTarget[t] = t, h
	return h
}

// sweep forgets the records of jobs not looked up lately and the names of
// replicas not seen lately, so that neither grows without bound. p.mu is
// held.
func (p *Proxy) sweepLocked(now time.Time) {
	if len(p.backends) > sweepAbove {
		for job, c := range p.backends {
			if c.mu.TryLock() {
				old := !c.at.IsZero() && now.Sub(c.at) > p.cfg.Stale
				c.mu.Unlock()
				if old {
					delete(p.backends, job)
				}
			}
		}
	}
	for t, at := range p.seen {
		if now.Sub(at) > forgetAfter {
			h := p.byTarget[t]
			delete(p.hosts, h)
			delete(p.byTarget, t)
			delete(p.seen, t)
		}
	}
}

// backend returns the job's record as lately looked up.
func (p *Proxy) backend(ctx context.Context, job string) (Backend, error) {
	p.mu.Lock()
	c := p.backends[job]
	if c == nil {
		p.sweepLocked(time.Now())
		c = &cached{}
		p.backends[job] = c
	}
	p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.at.IsZero() && !c.invalid && now.Sub(c.at) < p.cfg.Refresh {
		return c.b, c.err
	}
	b, err := p.cfg.Lookup(ctx, job)
	if err != nil && c.err == nil && !c.at.IsZero() && now.Sub(c.at) < p.cfg.Stale && AsError(err).Status >= 500 {
		return c.b, nil // the holder of the record did not answer: what it said lately will do
	}
	c.b, c.err, c.at, c.invalid = b, err, now, false
	return b, err
}

func (p *Proxy) invalidate(job string) {
	p.mu.Lock()
	c := p.backends[job]
	p.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.invalid = true
		c.mu.Unlock()
	}
}

// order returns the replicas to try, round-robin, those that failed
// lately last.
func (p *Proxy) order(job string, eps []Endpoint) []Endpoint {
	if len(eps) == 0 {
		return nil
	}
	start := int(p.next.Add(1) % uint64(len(eps)))
	now := time.Now()
	var good, bad []Endpoint
	p.mu.Lock()
	for i := range eps {
		ep := eps[(start+i)%len(eps)]
		if until, ok := p.failed[dialTarget{job, ep}]; ok && now.Before(until) {
			bad = append(bad, ep)
		} else {
			good = append(good, ep)
		}
	}
	p.mu.Unlock()
	return append(good, bad...)
}

func (p *Proxy) fail(job string, ep Endpoint, err error) {
	p.mu.Lock()
	p.failed[dialTarget{job, ep}] = time.Now().Add(p.cfg.Cooldown)
	for t, until := range p.failed {
		if time.Now().After(until) {
			delete(p.failed, t)
		}
	}
	p.mu.Unlock()
	p.invalidate(job)
	p.cfg.Logger.Info("service replica failed a request", "job", job, "node", ep.Node.ShortString(), "share", ep.Share, "epoch", ep.Epoch, "err", err)
}

// ProxyRequest is one request to a service, as the API or an ingress
// took it.
type ProxyRequest struct {
	Job  string
	Path string // the path on the service, starting with "/"
	// Caller is the owner the API authenticated, "" for an ingress (then
	// only a public service answers). Proof is the owner's signed request
	// the replica's node checks; nil for an ingress.
	Caller owner.ID
	Proof  *owner.Proof
}

// idempotent reports whether a request may be sent again: RFC 9110's
// idempotent methods, or one carrying an Idempotency-Key.
func idempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return r.Header.Get("Idempotency-Key") != ""
}

// hopHeaders are removed from requests and responses passed on (RFC 9110
// section 7.6.1), with the credentials a node's API takes.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// ServeHTTP serves one request on a ready replica of req.Job.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request, req ProxyRequest) {
	ctx := r.Context()
	b, err := p.backend(ctx, req.Job)
	if err != nil {
		writeProxyError(w, AsError(err))
		return
	}
	switch {
	case req.Caller == "" && !b.Public:
		writeProxyError(w, Errorf(http.StatusNotFound, "no public service %s", req.Job))
		return
	case req.Caller != "" && req.Caller != b.Owner:
		writeProxyError(w, Errorf(http.StatusForbidden, "job %s belongs to another owner (this request is owner %s)", req.Job, req.Caller.Short()))
		return
	case len(b.Ready) == 0:
		writeProxyError(w, Errorf(http.StatusServiceUnavailable, "service %s has no ready replica", req.Job))
		return
	}
	if req.Proof != nil {
		ctx = context.WithValue(ctx, proofKey{}, req.Proof)
	}
	replay := idempotent(r)
	var body []byte
	if replay && r.Body != nil && r.Body != http.NoBody {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
		if err != nil {
			writeProxyError(w, Errorf(http.StatusBadRequest, "reading the request body: %v", err))
			return
		}
		if len(body) > maxReplayBody {
			writeProxyError(w, Errorf(http.StatusRequestEntityTooLarge, "a %s body of a service request is kept to be sent again, so at most %d bytes", r.Method, maxReplayBody))
			return
		}
	}
	if !replay && r.Body != nil && r.Body != http.NoBody {
		// The body streams to the replica while its answer streams back
		// (a chat that answers each line as it comes).
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	var last error
	for _, ep := range p.order(req.Job, b.Ready) {
		out := r.Clone(ctx)
		out.URL.Scheme, out.URL.Host = "http", p.hostOf(dialTarget{req.Job, ep})
		out.URL.Path, out.URL.RawPath = req.Path, ""
		out.RequestURI = ""
		out.Host = r.Host
		prepareHeaders(out.Header, r)
		if replay {
			out.Body, out.ContentLength = http.NoBody, int64(len(body))
			if body != nil {
				out.Body = io.NopCloser(bytes.NewReader(body))
				out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			}
		}
		resp, err := p.tr.RoundTrip(out)
		if err != nil {
			if ctx.Err() != nil {
				return // the client went away
			}
			last = err
			p.fail(req.Job, ep, err)
			var de *dialError
			if errors.As(err, &de) || replay {
				continue
			}
			writeProxyError(w, Errorf(http.StatusBadGateway, "service %s: the replica on %s (share %d) failed before it answered, and a %s is not sent twice: %v",
				req.Job, ep.Node.ShortString(), ep.Share, r.Method, err))
			return
		}
		stream(w, resp)
		return
	}
	writeProxyError(w, Errorf(http.StatusBadGateway, "service %s: no replica answered: %v", req.Job, last))
}

// prepareHeaders drops hop-by-hop headers and the node's credentials from
// an outbound request, and says who asked (X-Forwarded-*).
func prepareHeaders(h http.Header, in *http.Request) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := h.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		h.Set("X-Forwarded-For", ip)
	}
	h.Set("X-Forwarded-Host", in.Host)
	h.Set("X-Forwarded-Proto", "http")
}

// stream writes a replica's response as it comes, flushing each write. A
// response cut off by its replica is cut off to the client too (the
// connection is aborted), never passed as whole.
func stream(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for _, f := range resp.Header.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			resp.Header.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		resp.Header.Del(name)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away; the tunnel is closed with the body
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// writeProxyError answers with the API's JSON error form.
func writeProxyError(w http.ResponseWriter, e *Error) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{e.Msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(b, '\n'))
}
