// Package api is the HTTP+JSON surface of a node: the local API that the CLI
// and job owners use, the operator endpoints (/healthz, /readyz, /metrics) and
// the dashboard. It holds the transport concerns — routing, authentication,
// JSON errors, streaming — and calls a Backend for everything else.
package api

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
	"time"

	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market/owner"
)

// Config configures a Server.
type Config struct {
	// Addr is the listen address, "127.0.0.1:7070" by default. An address
	// that is not loopback needs Token.
	Addr string
	// Token, when set, must be presented as "Authorization: Bearer TOKEN" on
	// every request except /healthz and /readyz (an owner token will do as
	// well). It gives no owner identity. Set or not, a request that
	// presents a token that is neither Token nor an owner token, or a
	// malformed Authorization header, is answered 401.
	Token string
	// OwnerTokens maps owner tokens (16 characters or more) to the keys of
	// their owners: "Authorization: Bearer OWNER_TOKEN" acts as that owner,
	// and the node signs for it. Default: none; owners sign their requests.
	OwnerTokens map[string]owner.Key
	// Network is the mesh's name, served at GET /v1/info so that clients
	// sign specs for it. Default "".
	Network string
	// Now is the clock signed requests are checked against. Default
	// time.Now.
	Now func() time.Time
	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
}

// DefaultAddr is the API's default listen address.
const DefaultAddr = "127.0.0.1:7070"

// ErrTokenRequired is returned by Listen for an address off loopback with no
// token.
var ErrTokenRequired = errors.New("api: listening beyond loopback needs a token (--api-token-file); refusing to start")

// Listen validates the configuration and opens the listener. A port that
// another socket holds is an error that names the process holding it,
// where the system tells (the node's mesh ports say it alike).
func Listen(cfg Config) (net.Listener, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("api: address %q: %w", cfg.Addr, err)
	}
	if !isLoopback(host) && cfg.Token == "" {
		return nil, fmt.Errorf("%w: %s", ErrTokenRequired, cfg.Addr)
	}
	if err := validateOwnerTokens(cfg); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("api: %s: %w", cfg.Addr, portuse.Explain("tcp", cfg.Addr, err))
	}
	return ln, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server serves a handler on a listener and stops cleanly.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	wg   sync.WaitGroup
	stop context.CancelFunc
	ctx  context.Context
}

// Serve starts serving h on ln in a goroutine the Server owns. The context
// passed to handlers (BaseContext) is cancelled by Close, which ends
// long-lived streams.
func Serve(ln net.Listener, h http.Handler) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, stop: cancel, ctx: ctx}
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, ends streams, waits up to 5 s for requests in flight,
// and returns after the serving goroutine has exited.
func (s *Server) Close() error {
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	s.wg.Wait()
	if w, ok := s.srv.Handler.(interface{ waitTunnels() }); ok {
		w.waitTunnels() // they end with the server's context
	}
	return err
}

// Error is the JSON body of every error response.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"` // the offending field of a bad request
}

// HTTPError is an error with a status code, returned by Backend methods to
// choose the response; any other error is a 500.
type HTTPError struct {
	Status int
	Field  string
	Err    error
	// RetryAfter, when above 0, is sent as the Retry-After header (whole
	// seconds, rounded up): how long the client should wait before it
	// sends the request again (a 429 or a 503).
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string { return e.Err.Error() }
func (e *HTTPError) Unwrap() error { return e.Err }

// Errorf returns an HTTPError.
func Errorf(status int, format string, args ...any) *HTTPError {
	return &HTTPError{Status: status, Err: fmt.Errorf(format, args...)}
}

// Busy returns the 429 of a node too busy to take a request now, asking
// the client to send it again after retryAfter.
func Busy(retryAfter time.Duration, format string, args ...any) *HTTPError {
	return &HTTPError{Status: http.StatusTooManyRequests, Err: fmt.Errorf(format, args...), RetryAfter: retryAfter}
}

// RetryAfterSeconds is the Retry-After header's value for d: whole
// seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}

// writeJSON writes v with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError maps err to a status and writes it as JSON.
func writeError(w http.ResponseWriter, err error) {
	var he *HTTPError
	if errors.As(err, &he) {
		if he.RetryAfter > 0 {
			w.Header().Set("Retry-After", RetryAfterSeconds(he.RetryAfter))
		}
		writeJSON(w, he.Status, Error{Error: he.Err.Error(), Field: he.Field})
		return
	}
	writeJSON(w, http.StatusInternalServerError, Error{Error: err.Error()})
}

// decodeJSON reads a JSON body of at most max bytes into v, refusing unknown
// fields and trailing data.
func decodeJSON(r *http.Request, max int64, v any) error {
	body, err := readBody(r, max)
	if err != nil {
		return err
	}
	return decodeJSONBytes(body, v)
}

// readBody reads a JSON request body of at most max bytes.
func readBody(r *http.Request, max int64) ([]byte, error) {
	// curl -d sends application/x-www-form-urlencoded unless told otherwise;
	// the body is still read as JSON.
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		return nil, Errorf(http.StatusUnsupportedMediaType, "content type %q: want application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, Errorf(http.StatusRequestEntityTooLarge, "request body over %s", text.Bytes(max))
		}
		return nil, Errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	return body, nil
}

// decodeJSONBytes decodes a JSON body into v, refusing unknown fields and
// trailing data.
func decodeJSONBytes(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ):
			return &HTTPError{Status: http.StatusBadRequest, Field: typ.Field, Err: fmt.Errorf("field %q: want %s, got %s", typ.Field, typ.Type, typ.Value)}
		case errors.As(err, &syn):
			return Errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", syn.Offset, err)
		}
		return Errorf(http.StatusBadRequest, "bad request body: %v", err)
	}
	if dec.More() {
		return Errorf(http.StatusBadRequest, "trailing data after the JSON body")
	}
	return nil
}
