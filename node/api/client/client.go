package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds each request that is not a stream (everything but
	// Logs); WithTimeout changes it.
	DefaultTimeout = 30 * time.Second
	// DialTimeout bounds connecting to the node.
	DialTimeout = 5 * time.Second
	// maxResponseBytes bounds a JSON response body read into memory.
	maxResponseBytes = 64 << 20
	// maxErrorBytes bounds an error body read.
	maxErrorBytes = 64 << 10
)

// Client talks to one node's API. Build it with New; the zero value is not
// usable. It is safe for concurrent use and holds no goroutines; call
// CloseIdleConnections when done with it to release kept-alive connections.
type Client struct {
	addr    string
	base    url.URL
	token   string
	key     *owner.Key
	hc      *http.Client
	timeout time.Duration
	now     func() time.Time

	netMu    sync.Mutex
	meshName *string // the node's mesh name, asked once (GET /v1/info)

	retryWithin time.Duration   // Submit sends again after 429 or 503 within this
	onRetry     func(RetryNote) // told of each such retry; nil: nothing
	sleep       func(ctx context.Context, d time.Duration) error
	clock       func() time.Time // what the retry bound is measured by
}

// Option configures a Client; an Option given a bad value makes New fail.
type Option func(*Client) error

// WithToken sends token as "Authorization: Bearer TOKEN" on every request
// (the node needs one when its API listens beyond loopback). Default: none.
func WithToken(token string) Option {
	return func(c *Client) error {
		if token == "" {
			return errors.New("empty API token")
		}
		for _, r := range token {
			if r <= ' ' || r == 0x7f {
				return errors.New("API token contains a space or control character")
			}
		}
		c.token = token
		return nil
	}
}

// WithOwnerKey signs every request and every spec
// Submit sends with key: the node then serves and steers this owner's jobs
// only. Default: none (an owner token given with WithToken will do too).
func WithOwnerKey(key owner.Key) Option {
	return func(c *Client) error {
		if !key.Valid() {
			return errors.New("the zero owner key")
		}
		c.key = &key
		return nil
	}
}

// WithClock makes signed requests and specs carry now's time instead of
// time.Now's (tests of the node's replay window).
func WithClock(now func() time.Time) Option {
	return func(c *Client) error {
		if now == nil {
			return errors.New("nil clock")
		}
		c.now = now
		return nil
	}
}

// Owner returns the owner ID of the client's key, "" without one.
func (c *Client) Owner() owner.ID {
	if c.key == nil {
		return ""
	}
	return c.key.ID()
}

// WithHTTPClient uses hc for every request instead of the Client's own (a
// transport with a DialTimeout connect timeout).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("nil HTTP client")
		}
		c.hc = hc
		return nil
	}
}

// WithTimeout bounds each request that is not a stream; 0 means no bound.
// Default: DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d < 0 {
			return fmt.Errorf("negative timeout %v", d)
		}
		c.timeout = d
		return nil
	}
}

// New returns a client of the API at addr: "host:port" (plain HTTP), or an
// "http://" or "https://" URL with a host and port and no path.
func New(addr string, opts ...Option) (*Client, error) {
	base, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, base: base, timeout: DefaultTimeout, now: time.Now, retryWithin: DefaultSubmitRetry, sleep: sleepCtx, clock: time.Now}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// parseAddr turns an API address into a base URL.
func parseAddr(addr string) (url.URL, error) {
	bad := func(why string) (url.URL, error) {
		return url.URL{}, fmt.Errorf("API address %q: %s", addr, why)
	}
	if addr == "" {
		return bad("empty")
	}
	raw := addr
	if !strings.Contains(addr, "://") {
		raw = "http://" + addr
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("want host:port, such as 127.0.0.1:7070, or an http(s):// URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("want an http:// or https:// URL, or host:port")
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" || (u.Path != "" && u.Path != "/") {
		return bad("want host:port with nothing after it")
	}
	port, err := strconv.Atoi(u.Port())
	if u.Hostname() == "" || err != nil || port < 1 || port > 65535 {
		return bad("want host:port with a port from 1 to 65535, such as 127.0.0.1:7070")
	}
	return url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// Addr returns the address the client was built with.
func (c *Client) Addr() string { return c.addr }

// CloseIdleConnections closes the kept-alive connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	body         []byte // JSON unless contentType says otherwise
	contentType  string
	stream       bool // no timeout: the caller reads the body as it comes
	// bodyHash, when set, is the hex SHA-256 of a content-addressed body
	// (a payload upload): the owner signs it, and the node checks the
	// body against it as it arrives.
	bodyHash string
}

// send makes the request and returns the response of a 2xx status; any
// other status is turned into an *APIError, a failure to connect into an
// *UnreachableError. The caller closes the body and calls done.
func (c *Client) send(ctx context.Context, r request) (resp *http.Response, done func(), err error) {
	done = func() {}
	if c.timeout > 0 && !r.stream {
		ctx, done = context.WithTimeout(ctx, c.timeout)
	}
	u := c.base.String() + r.path // r.path is escaped already
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		done()
		return nil, nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	switch {
	case c.key != nil && r.bodyHash != "":
		req.Header.Set(owner.Header, signHash(*c.key, r.method, req.URL.RequestURI(), r.bodyHash, c))
	case c.key != nil:
		p := owner.SignRequest(*c.key, r.method, req.URL.RequestURI(), r.body, c.now())
		req.Header.Set(owner.Header, p.HeaderValue())
	}
	resp, err = c.hc.Do(req)
	if err != nil {
		done()
		var op *net.OpError
		var dns *net.DNSError
		if errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns) {
			return nil, nil, &UnreachableError{Addr: c.addr, Err: unwrapURL(err)}
		}
		return nil, nil, fmt.Errorf("%s %s: %w", r.method, r.path, unwrapURL(err))
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		defer done()
		return nil, nil, readAPIError(r.method, r.path, resp)
	}
	return resp, done, nil
}

// unwrapURL drops the *url.Error layer, whose text repeats the whole URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// readAPIError reads an error response: the API's JSON error body, or the
// start of whatever else came (a proxy's page).
func readAPIError(method, path string, resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	e := &APIError{Method: method, Path: path, Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var body api.Error
	if err := json.Unmarshal(data, &body); err == nil && body.Error != "" {
		e.Message, e.Field = body.Error, body.Field
		return e
	}
	e.Message = http.StatusText(resp.StatusCode)
	if e.Message == "" {
		e.Message = fmt.Sprintf("HTTP status %d", resp.StatusCode)
	}
	if text := firstLine(data, 200); text != "" {
		e.Message += ": " + text
	}
	return e
}

// firstLine returns the first line of data, trimmed and cut to max bytes,
// with control characters dropped.
func firstLine(data []byte, max int) string {
	s := string(data)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// call makes a request and decodes its JSON answer into out (unless nil).
func (c *Client) call(ctx context.Context, r request, out any) error {
	resp, done, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer done()
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		return nil
	}
	lr := &io.LimitedReader{R: resp.Body, N: maxResponseBytes + 1}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("%s %s: answer over %s", r.method, r.path, text.Bytes(maxResponseBytes))
		}
		return fmt.Errorf("%s %s: reading the answer: %w", r.method, r.path, err)
	}
	return nil
}

// jsonBody encodes v for a request body.
func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return b, nil
}

// jobPath is the path of a job's resource, with the ID escaped.
func jobPath(id string, rest ...string) string {
	return "/v1/jobs/" + url.PathEscape(id) + strings.Join(rest, "")
}
