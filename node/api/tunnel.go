package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// Tunneler is implemented by a Backend that reaches into running jobs:
// gpumesh exec and port-forward, and the proxy of service jobs. Without it
// those routes answer 404. Its methods are called from request goroutines,
// concurrently, and return *HTTPError for expected failures (404 for an
// unknown job or share, 409 for one that is not running, 400 for a bad
// port, 404 with Field "command" for a command the job does not have).
type Tunneler interface {
	// OpenExec starts the command of body (a wire.ExecRequest, as the
	// owner signed it) in the job and returns the tunnel carrying its
	// session (package wire's frames) once it runs.
	OpenExec(ctx context.Context, job string, body []byte) (wire.HalfCloser, error)
	// OpenForward connects to the port of body (a wire.ForwardRequest)
	// inside the job's network and returns the tunnel carrying its bytes.
	OpenForward(ctx context.Context, job string, body []byte) (wire.HalfCloser, error)
	// ServeService answers a request of an owner (the caller is one) to
	// a service job: path is the path on the service ("/" and below).
	ServeService(w http.ResponseWriter, r *http.Request, job, path string)
}

// maxTunnelBody bounds the body of an exec or forward request.
const maxTunnelBody = 1 << 20

// tunnel serves POST /v1/jobs/{id}/exec and /forward: the request must ask
// for the gpumesh-tunnel upgrade; the answer is 101 and the tunnel, or an
// error before anything was started.
func (h *handlers) tunnel(open func(Tunneler, context.Context, string, []byte) (wire.HalfCloser, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, ok := h.b.(Tunneler)
		if !ok {
			writeError(w, Errorf(http.StatusNotFound, "this node opens no tunnels"))
			return
		}
		if !upgradeAsked(r) {
			writeError(w, Errorf(http.StatusBadRequest, "%s opens a tunnel: send \"Connection: Upgrade\" and \"Upgrade: %s\" (gpumesh exec and port-forward do)", r.URL.Path, wire.Upgrade))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTunnelBody))
		if err != nil {
			writeError(w, Errorf(http.StatusRequestEntityTooLarge, "request body over %s", text.Bytes(maxTunnelBody)))
			return
		}
		tc, err := open(t, r.Context(), r.PathValue("id"), body)
		if err != nil {
			writeError(w, err)
			return
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			tc.Close()
			writeError(w, Errorf(http.StatusInternalServerError, "the connection cannot carry a tunnel"))
			return
		}
		conn, brw, err := hj.Hijack()
		if err != nil {
			tc.Close()
			return
		}
		h.tunnels.Add(1)
		defer h.tunnels.Done()
		var hc wire.HalfCloser = &hijacked{Conn: conn, r: brw.Reader}
		if tc, ok := conn.(*net.TCPConn); ok && brw.Reader.Buffered() == 0 {
			hc = tc // nothing read ahead: the bare connection
		}
		if _, err := fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", wire.Upgrade); err != nil {
			hc.Close()
			tc.Close()
			return
		}
		// The server's Close ends the tunnel too.
		stop := context.AfterFunc(r.Context(), func() { hc.Close(); tc.Close() })
		defer stop()
		wire.Splice(hc, tc)
	}
}

func upgradeAsked(r *http.Request) bool {
	connUpgrade := false
	for _, v := range r.Header.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "upgrade") {
				connUpgrade = true
			}
		}
	}
	return connUpgrade && strings.EqualFold(r.Header.Get("Upgrade"), wire.Upgrade)
}

// hijacked is a hijacked connection: what the server had buffered of it
// is read first, then the connection itself. (Reading on through the
// server's reader would let its end cancel the request's context, which
// ends the tunnel at the client's first half-close.)
type hijacked struct {
	net.Conn
	r *bufio.Reader
}

func (h *hijacked) Read(p []byte) (int, error) {
	if h.r != nil {
		if n := h.r.Buffered(); n > 0 {
			return h.r.Read(p[:min(len(p), n)])
		}
		h.r = nil
	}
	return h.Conn.Read(p)
}

func (h *hijacked) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return h.Conn.Close()
}

// service serves /v1/jobs/{id}/http and below: the request goes to a ready
// replica of the service job, without the node's credentials.
func (h *handlers) service(w http.ResponseWriter, r *http.Request) {
	t, ok := h.b.(Tunneler)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node proxies no services"))
		return
	}
	if c, _ := CallerFrom(r.Context()); c.Owner == "" {
		writeError(w, &HTTPError{Status: http.StatusForbidden, Err: ErrOwnerRequired})
		return
	}
	job := r.PathValue("id")
	path := strings.TrimPrefix(r.URL.Path, "/v1/jobs/"+job+"/http")
	if path == "" {
		path = "/"
	}
	r.Header.Del("Authorization")
	r.Header.Del(owner.Header)
	t.ServeService(w, r, job, path)
}
