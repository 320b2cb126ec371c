package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
)

// maxSpecBytes bounds a job spec body.
const maxSpecBytes = 1 << 20

// Handler returns the API's routes over b, behind the token check of cfg.
// dashboard, when not nil, is served at / and below (static files).
func Handler(cfg Config, b Backend, dashboard http.Handler) http.Handler {
	mux := http.NewServeMux()
	h := &handlers{b: b}
	mux.HandleFunc("POST /v1/jobs", h.submit)
	mux.HandleFunc("GET /v1/jobs", h.list)
	mux.HandleFunc("GET /v1/jobs/{id}", h.get)
	mux.HandleFunc("DELETE /v1/jobs/{id}", h.cancel)
	mux.HandleFunc("POST /v1/jobs/{id}/scale", h.scale)
	mux.HandleFunc("GET /v1/jobs/{id}/logs", h.logs)
	mux.HandleFunc("GET /v1/jobs/{id}/checkpoint", h.checkpoint)
	mux.HandleFunc("GET /v1/jobs/{id}/files", h.files)
	mux.HandleFunc("GET /v1/jobs/{id}/bill", h.bill)
	mux.HandleFunc("GET /v1/earnings", h.earnings)
	mux.HandleFunc("POST /v1/jobs/{id}/exec", h.tunnel(Tunneler.OpenExec))
	mux.HandleFunc("POST /v1/jobs/{id}/forward", h.tunnel(Tunneler.OpenForward))
	mux.HandleFunc("/v1/jobs/{id}/http", h.service)
	mux.HandleFunc("/v1/jobs/{id}/http/", h.service)
	mux.HandleFunc("GET /v1/info", h.info(cfg))
	mux.HandleFunc("PUT /v1/payloads/{manifest}", h.payloadManifest)
	mux.HandleFunc("POST /v1/secrets", h.secrets)
	mux.HandleFunc("PUT /v1/payloads/{manifest}/chunks/{chunk}", h.payloadChunk)
	mux.HandleFunc("GET /v1/peers", h.peers)
	mux.HandleFunc("GET /v1/cards", h.cards)
	mux.HandleFunc("GET /v1/offers", h.offers)
	mux.HandleFunc("GET /v1/status", h.status)
	mux.HandleFunc("GET /v1/events", h.events)
	mux.HandleFunc("POST /v1/drain", h.drain)
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /metrics", h.metrics)
	mux.Handle(pprofPrefix, profiles(cfg))
	// What no route takes lands on the two catch-all patterns: the
	// dashboard's static files, and else a JSON 404, or a 405 naming the
	// methods the path has routes for. The dashboard shares "/" with the
	// 404s: a "GET /" pattern would conflict with "/v1/" (neither is more
	// specific), which ServeMux refuses with a panic.
	unrouted := func(w http.ResponseWriter, r *http.Request) {
		allow := allowedMethods(mux, dashboard, r)
		switch {
		case len(allow) == 0:
			writeJSON(w, http.StatusNotFound, Error{Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
		case slices.Contains(allow, r.Method): // only the dashboard's files get here
			dashboard.ServeHTTP(w, r)
		default:
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, Error{Error: fmt.Sprintf("method %s not allowed on %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
		}
	}
	mux.HandleFunc("/v1/", unrouted)
	mux.HandleFunc(dashboardPattern, unrouted)
	return &root{Handler: authenticate(cfg, mux), h: h}
}

// root is the API's handler: Server.Close waits for its tunnels, whose
// connections the HTTP server no longer tracks once they are hijacked.
type root struct {
	http.Handler
	h *handlers
}

func (r *root) waitTunnels() { r.h.tunnels.Wait() }

// dashboardPattern is the route of the dashboard's static files: they hold
// no data, so they are served without the token, and the page can ask for
// one when the API answers 401.
const dashboardPattern = "/"

// routeMethods are the methods a 405's Allow header may name.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists the methods that have a route for r's path: the
// API's own routes (every one names its method), and GET and HEAD where
// the dashboard has a file at the path.
func allowedMethods(mux *http.ServeMux, dashboard http.Handler, r *http.Request) []string {
	hasFile := sync.OnceValue(func() bool {
		return dashboard != nil && serves(dashboard, &http.Request{Method: http.MethodHead, URL: r.URL, Host: r.Host, Header: http.Header{}})
	})
	var allow []string
	for _, m := range routeMethods {
		_, pattern := mux.Handler(&http.Request{Method: m, URL: r.URL, Host: r.Host})
		switch {
		case strings.Contains(pattern, " "): // "METHOD /path"
			allow = append(allow, m)
		case pattern == dashboardPattern && (m == http.MethodGet || m == http.MethodHead) && hasFile():
			allow = append(allow, m)
		}
	}
	return allow
}

// serves reports whether h answers r without an error status, sending
// nothing anywhere.
func serves(h http.Handler, r *http.Request) bool {
	var sw statusWriter
	h.ServeHTTP(&sw, r)
	return sw.code == 0 || sw.code < http.StatusBadRequest
}

// statusWriter is a ResponseWriter that keeps only the status.
type statusWriter struct {
	header http.Header
	code   int
}

func (s *statusWriter) Header() http.Header {
	if s.header == nil {
		s.header = http.Header{}
	}
	return s.header
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(p), nil
}

type handlers struct {
	b       Backend
	tunnels sync.WaitGroup // hijacked connections carrying tunnels
}

func (h *handlers) submit(w http.ResponseWriter, r *http.Request) {
	signed, err := decodeSubmission(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var rec market.JobRecord
	if ss, ok := h.b.(SignedSubmitter); ok {
		rec, err = ss.SubmitSigned(r.Context(), signed)
	} else {
		rec, err = h.b.Submit(r.Context(), signed.Spec)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, rec)
}

// decodeSubmission reads the body of POST /v1/jobs: a signed spec
// ({"spec": ..., "signature": ...}) or a bare job spec, which only an owner
// whose key the node holds may send.
func decodeSubmission(r *http.Request) (market.SignedSpec, error) {
	body, err := readBody(r, maxSpecBytes)
	if err != nil {
		return market.SignedSpec{}, err
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) == nil && probe["signature"] != nil {
		s, err := market.DecodeSignedSpec(body)
		if err != nil {
			return market.SignedSpec{}, Errorf(http.StatusBadRequest, "%v", err)
		}
		return s, nil
	}
	var spec market.JobSpec
	if err := decodeJSONBytes(body, &spec); err != nil {
		return market.SignedSpec{}, err
	}
	return market.SignedSpec{Spec: spec}, nil
}

func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	if jl, ok := h.b.(JobLister); ok {
		list, err := jl.ListJobs(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		if list.Jobs == nil {
			list.Jobs = []market.JobRecord{}
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	jobs, err := h.b.Jobs(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if jobs == nil {
		jobs = []market.JobRecord{}
	}
	writeJSON(w, http.StatusOK, JobList{Jobs: jobs})
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	rec, err := h.b.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (h *handlers) cancel(w http.ResponseWriter, r *http.Request) {
	rec, err := h.b.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (h *handlers) scale(w http.ResponseWriter, r *http.Request) {
	var req ScaleRequest
	if err := decodeJSON(r, 4096, &req); err != nil {
		writeError(w, err)
		return
	}
	rec, err := h.b.Scale(r.Context(), r.PathValue("id"), req.Cards)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

func (h *handlers) logs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := LogRequest{Job: r.PathValue("id"), Stream: q.Get("stream"), Follow: q.Get("follow") == "1" || q.Get("follow") == "true"}
	var err error
	if s := q.Get("share"); s != "" {
		if req.Share, err = strconv.Atoi(s); err != nil || req.Share < 0 {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "share", Err: fmt.Errorf("share %q: want a number ≥ 0", s)})
			return
		}
	}
	if s := q.Get("epoch"); s != "" {
		if req.Epoch, err = strconv.ParseUint(s, 10, 64); err != nil || req.Epoch == 0 {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "epoch", Err: fmt.Errorf("epoch %q: want a number ≥ 1", s)})
			return
		}
	}
	if s := q.Get("offset"); s != "" {
		if req.Offset, err = strconv.ParseInt(s, 10, 64); err != nil || req.Offset < 0 {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "offset", Err: fmt.Errorf("offset %q: want a number ≥ 0", s)})
			return
		}
	}
	if req.Stream != "" && req.Stream != "stdout" && req.Stream != "stderr" {
		writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "stream", Err: fmt.Errorf("stream %q: want stdout or stderr", req.Stream)})
		return
	}
	// Headers go out with the first chunk, so an error found before any
	// output still gets its status code.
	lw := &lazyWriter{w: w}
	flush := func() {
		lw.start()
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	if err := h.b.Logs(r.Context(), req, lw, flush); err != nil && !lw.started {
		writeError(w, err)
	}
}

// lazyWriter writes the log response's headers on the first byte.
type lazyWriter struct {
	w           http.ResponseWriter
	started     bool
	contentType string // default text/plain; charset=utf-8
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		ct := l.contentType
		if ct == "" {
			ct = "text/plain; charset=utf-8"
		}
		l.w.Header().Set("Content-Type", ct)
		l.w.Header().Set("X-Content-Type-Options", "nosniff")
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}

func (h *handlers) checkpoint(w http.ResponseWriter, r *http.Request) {
	cr, ok := h.b.(CheckpointReader)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node serves no checkpoints"))
		return
	}
	req := CheckpointRequest{Job: r.PathValue("id")}
	if s := r.URL.Query().Get("share"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "share", Err: fmt.Errorf("share %q: want a number ≥ 0", s)})
			return
		}
		req.Share = n
	}
	lw := &lazyWriter{w: w, contentType: "application/octet-stream"}
	if err := cr.Checkpoint(r.Context(), req, lw); err != nil && !lw.started {
		writeError(w, err)
	}
}

// files serves a file or directory of a share's working directory as a tar
// archive (FileCopier).
func (h *handlers) files(w http.ResponseWriter, r *http.Request) {
	fc, ok := h.b.(FileCopier)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node copies no files out of jobs"))
		return
	}
	q := r.URL.Query()
	req := FilesRequest{Job: r.PathValue("id"), Path: q.Get("path")}
	if s := q.Get("share"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "share", Err: fmt.Errorf("share %q: want a number ≥ 0", s)})
			return
		}
		req.Share = n
	}
	lw := &lazyWriter{w: w, contentType: "application/x-tar"}
	err := fc.Files(r.Context(), req, lw)
	switch {
	case err != nil && !lw.started:
		writeError(w, err)
	case err != nil:
		// Cut the response: the client reads a broken stream, never a
		// tar that ends early but looks whole.
		panic(http.ErrAbortHandler)
	}
}

// info serves what a client needs to know of the node before it signs.
func (h *handlers) info(cfg Config) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, _ := CallerFrom(r.Context())
		writeJSON(w, http.StatusOK, Info{Network: cfg.Network, Owner: string(c.Owner)})
	}
}

// Payload uploads. Their bodies are content-addressed: the manifest's
// body hashes to the manifest's digest, a chunk's to the chunk's, and an
// owner signs such a request with that digest as its body hash
// (BodyHashHeader), so the body is checked as it streams in, never held
// whole for the signature.
func (h *handlers) payloadManifest(w http.ResponseWriter, r *http.Request) {
	ps, ok := h.b.(PayloadStore)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node takes no payloads"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxManifestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			err = Errorf(http.StatusRequestEntityTooLarge, "payload manifest over %s: a tree this large must be sent as several", text.Bytes(MaxManifestBytes))
		} else {
			err = Errorf(http.StatusBadRequest, "payload manifest: %v", err)
		}
		writeError(w, err)
		return
	}
	if got := "sha256:" + owner.BodyHash(body); got != r.PathValue("manifest") {
		writeError(w, Errorf(http.StatusBadRequest, "payload manifest %.80s: the body sent hashes to %s", r.PathValue("manifest"), got))
		return
	}
	up, err := ps.PutPayloadManifest(r.Context(), body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, up)
}

func (h *handlers) payloadChunk(w http.ResponseWriter, r *http.Request) {
	ps, ok := h.b.(PayloadStore)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node takes no payloads"))
		return
	}
	body := http.MaxBytesReader(w, r.Body, MaxChunkBytes)
	if err := ps.PutPayloadChunk(r.Context(), r.PathValue("manifest"), r.PathValue("chunk"), body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			err = Errorf(http.StatusRequestEntityTooLarge, "chunk over %s", text.Bytes(MaxChunkBytes))
		}
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// secrets keeps an owner's secrets for a job to name (SecretStore).
func (h *handlers) secrets(w http.ResponseWriter, r *http.Request) {
	ss, ok := h.b.(SecretStore)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node keeps no secrets"))
		return
	}
	var req SecretsRequest
	if err := decodeJSON(r, MaxSecretsBytes, &req); err != nil {
		writeError(w, err)
		return
	}
	ref, err := ss.PutSecrets(r.Context(), req.Values)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ref)
}

// The largest bodies of the payload routes: node/blob's MaxManifestSize
// and MaxChunkSize (the API does not import the store).
const (
	MaxManifestBytes = 64 << 20
	MaxChunkBytes    = 8 << 20
)

func (h *handlers) peers(w http.ResponseWriter, r *http.Request) {
	peers, err := h.b.Peers(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, PeerList{Peers: peers})
}

func (h *handlers) cards(w http.ResponseWriter, r *http.Request) {
	cards, err := h.b.Cards(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if cards == nil {
		cards = []Card{}
	}
	writeJSON(w, http.StatusOK, CardList{Cards: cards})
}

func (h *handlers) status(w http.ResponseWriter, r *http.Request) {
	st, err := h.b.Status(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// events streams server-sent events, as the caller may see them
// (Event.ForCaller), until the client goes or the server closes; a comment
// line every 15 s keeps proxies from closing it.
func (h *handlers) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, Errorf(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	caller, _ := CallerFrom(r.Context())
	ch, stop := h.b.Subscribe()
	defer stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": gpumesh events\n\n")
	flusher.Flush()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev, ok = ev.ForCaller(caller.Owner); !ok {
				continue
			}
			data, _ := json.Marshal(ev)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, data)
			flusher.Flush()
		}
	}
}

// DrainRequest is the body of POST /v1/drain.
type DrainRequest struct {
	// Timeout bounds the wait for the shares to move, e.g. "2m"; default
	// 5m. When it passes, the node stops what is left.
	Timeout string `json:"timeout,omitempty"`
}

// DrainResult is the answer of POST /v1/drain.
type DrainResult struct {
	Drained bool   `json:"drained"` // every share moved before the timeout
	Error   string `json:"error,omitempty"`
}

func (h *handlers) drain(w http.ResponseWriter, r *http.Request) {
	var req DrainRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, 4096, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	timeout := 5 * time.Minute
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "timeout", Err: fmt.Errorf("timeout %q: want a positive duration like 2m", req.Timeout)})
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	err := h.b.Drain(ctx)
	res := DrainResult{Drained: err == nil}
	if err != nil {
		res.Error = err.Error()
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *handlers) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
}

func (h *handlers) readyz(w http.ResponseWriter, _ *http.Request) {
	body := Health{Status: "ok", Checks: map[string]bool{}}
	var failing []string
	for name, err := range h.b.Ready() {
		body.Checks[name] = err == nil
		if err != nil {
			if body.NotReady == nil {
				body.NotReady = map[string]string{}
			}
			body.NotReady[name] = err.Error()
			failing = append(failing, name)
		}
	}
	if len(failing) == 0 {
		writeJSON(w, http.StatusOK, body)
		return
	}
	sort.Strings(failing)
	for i, name := range failing {
		failing[i] = name + ": " + body.NotReady[name]
	}
	body.Status, body.Reason = "unready", strings.Join(failing, "; ")
	writeJSON(w, http.StatusServiceUnavailable, body)
}

func (h *handlers) metrics(w http.ResponseWriter, r *http.Request) {
	m := h.b.Metrics()
	if m == nil {
		writeJSON(w, http.StatusNotFound, Error{Error: "metrics are not enabled"})
		return
	}
	m.ServeHTTP(w, r)
}
