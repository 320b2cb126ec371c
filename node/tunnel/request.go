package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// Kind is what a tunnel does at the job's end.
type Kind string

// The kinds of tunnel.
const (
	// KindExec runs a command inside the attempt (wire.ExecRequest in the
	// owner's signed body) and carries its terminal or streams as frames
	// (package wire).
	KindExec Kind = "exec"
	// KindForward carries bytes to and from a TCP port inside the
	// attempt's network (wire.ForwardRequest in the owner's signed body).
	KindForward Kind = "forward"
	// KindService carries bytes to and from a service's port (its spec's
	// Port) on a replica whose readiness probe answers: the HTTP proxy and
	// the ingress.
	KindService Kind = "service"
)

// Request opens a tunnel: the first frame of the stream.
type Request struct {
	Kind  Kind   `json:"kind"`
	Job   string `json:"job"`
	Share int    `json:"share"`
	// Epoch names the attempt the tunnel is for; 0 is whichever attempt
	// of the share runs on the node.
	Epoch uint64 `json:"epoch,omitempty"`
	// Proof is the owner's signed API request the tunnel serves, and Body
	// the body it covers (which says what an exec runs, or which port a
	// forward reaches). The job's end checks it against the job's owner.
	// Nil only for a public service reached through an ingress.
	Proof *owner.Proof `json:"proof,omitempty"`
	Body  []byte       `json:"body,omitempty"`
}

// Response answers a Request: the second frame, from the job's end. Status
// is an HTTP status: 200 means the tunnel is open, and what follows on the
// stream is its traffic.
type Response struct {
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
	Field  string `json:"field,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"` // the attempt the tunnel ends in
}

// Error is a refused tunnel: its HTTP status, the request field at fault
// ("command" for a command the job does not have), and why.
type Error struct {
	Status int
	Field  string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Errorf returns an *Error.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// maxHeader bounds a Request or Response frame (the body of an exec holds
// its command and environment).
const maxHeader = 1 << 20

func writeHeader(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

func readHeader(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHeader {
		return fmt.Errorf("tunnel header of %d bytes, at most %d", size, maxHeader)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// Paths of the API requests whose signed proofs open tunnels: the job's
// end checks the proof names the job and the kind.
func execPath(job string) string    { return "/v1/jobs/" + job + "/exec" }
func forwardPath(job string) string { return "/v1/jobs/" + job + "/forward" }

// HTTPPrefix is the path under which a node's API proxies a service job:
// /v1/jobs/ID/http/… reaches "/…" on a ready replica.
func HTTPPrefix(job string) string { return "/v1/jobs/" + job + "/http" }

// authorize checks that the request may open its tunnel into t: the
// owner's signed request for this job and this kind, or, for a public
// service, nothing.
func authorize(req *Request, t *Target, now time.Time) error {
	p := req.Proof
	if p == nil {
		if req.Kind == KindService && t.Public {
			return nil
		}
		return Errorf(http.StatusForbidden, "job %s: a tunnel needs its owner's signed request", req.Job)
	}
	if err := p.Verify(now, owner.RequestWindow); err != nil {
		return Errorf(http.StatusUnauthorized, "job %s: the owner's signed request: %v", req.Job, err)
	}
	if p.Owner != t.Owner {
		return Errorf(http.StatusForbidden, "job %s belongs to another owner (this request is owner %s)", req.Job, p.Owner.Short())
	}
	signed := func(method, path string) error {
		if p.Method != method || p.Path() != path {
			return Errorf(http.StatusUnauthorized, "job %s: the owner signed %s %s, not a %s tunnel", req.Job, p.Method, p.Path(), req.Kind)
		}
		if owner.BodyHash(req.Body) != p.BodySHA256 {
			return Errorf(http.StatusUnauthorized, "job %s: the %s request is not the one its owner signed", req.Job, req.Kind)
		}
		return nil
	}
	switch req.Kind {
	case KindExec:
		return signed(http.MethodPost, execPath(req.Job))
	case KindForward:
		return signed(http.MethodPost, forwardPath(req.Job))
	case KindService:
		if path := p.Path(); path != HTTPPrefix(req.Job) && !strings.HasPrefix(path, HTTPPrefix(req.Job)+"/") {
			return Errorf(http.StatusUnauthorized, "job %s: the owner signed %s %s, not a request to the service", req.Job, p.Method, path)
		}
		return nil
	}
	return Errorf(http.StatusBadRequest, "unknown tunnel kind %q", req.Kind)
}

// decodeBody reads the JSON body of an exec or forward request, strictly.
func decodeBody(body []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return &Error{Status: http.StatusBadRequest, Msg: "bad request body: " + err.Error()}
	}
	return nil
}

// CheckExec checks an exec request as the API takes it; the error names
// the field at fault.
func CheckExec(x *wire.ExecRequest) error {
	switch {
	case x.Share < 0:
		return &Error{Status: http.StatusBadRequest, Field: "share", Msg: fmt.Sprintf("share %d: must not be negative", x.Share)}
	case len(x.Command) == 0 || x.Command[0] == "":
		return &Error{Status: http.StatusBadRequest, Field: "command", Msg: "command: required: the program to run in the job and its arguments"}
	case len(x.Command) > 4096:
		return &Error{Status: http.StatusBadRequest, Field: "command", Msg: "command: at most 4096 arguments"}
	}
	for _, a := range x.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return &Error{Status: http.StatusBadRequest, Field: "command", Msg: "command: an argument holds a NUL byte"}
		}
	}
	if strings.ContainsFunc(x.Term, func(r rune) bool { return r <= ' ' || r > '~' }) || len(x.Term) > 64 {
		return &Error{Status: http.StatusBadRequest, Field: "term", Msg: "term: want a terminal type such as xterm-256color"}
	}
	return nil
}

// CheckForward checks a forward request as the API takes it.
func CheckForward(f *wire.ForwardRequest) error {
	switch {
	case f.Share < 0:
		return &Error{Status: http.StatusBadRequest, Field: "share", Msg: fmt.Sprintf("share %d: must not be negative", f.Share)}
	case f.Port < 1 || f.Port > 65535:
		return &Error{Status: http.StatusBadRequest, Field: "port", Msg: fmt.Sprintf("port %d: want 1 to 65535", f.Port)}
	}
	return nil
}

// AsError returns err's *Error, or one of status 502 saying what failed.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusBadGateway, Msg: err.Error()}
}
