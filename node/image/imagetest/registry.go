// Package imagetest serves OCI images to tests: go-containerregistry's
// in-process registry on a loopback port, counting the blob downloads it
// answers, optionally behind basic authentication or a bandwidth limit.
package imagetest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/time/rate"
)

// Registry is an in-process OCI registry for one test.
type Registry struct {
	// Host is "127.0.0.1:PORT": references name it first
	// ("127.0.0.1:PORT/team/app:v1"); the clients speak plain HTTP to it.
	Host string
	// URL is "http://" + Host.
	URL string

	srv  *httptest.Server
	user string
	pass string

	mu        sync.Mutex
	blobGets  map[string]int // digest → GET requests of the blob
	blobBytes int64
	fail      map[string]int // path prefix → status to answer
	corrupt   map[string]bool
	limiter   *rate.Limiter
}

// Option configures a Registry.
type Option func(*Registry)

// WithBasicAuth makes the registry answer 401 to requests without these
// credentials.
func WithBasicAuth(user, pass string) Option {
	return func(r *Registry) { r.user, r.pass = user, pass }
}

// WithBandwidth limits the blob bytes the registry sends, all clients
// together, to bytesPerSecond.
func WithBandwidth(bytesPerSecond int) Option {
	return func(r *Registry) {
		r.limiter = rate.NewLimiter(rate.Limit(bytesPerSecond), 256<<10)
	}
}

// New starts a registry, stopped when the test ends.
func New(t testing.TB, opts ...Option) *Registry {
	t.Helper()
	r := &Registry{blobGets: map[string]int{}, fail: map[string]int{}, corrupt: map[string]bool{}}
	for _, o := range opts {
		o(r)
	}
	reg := registry.New(registry.Logger(discardLogger()))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.user != "" {
			if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="imagetest"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		r.mu.Lock()
		for prefix, code := range r.fail {
			if strings.HasPrefix(req.URL.Path, prefix) {
				r.mu.Unlock()
				w.WriteHeader(code)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			digest := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
			r.blobGets[digest]++
			bad := r.corrupt[digest]
			r.mu.Unlock()
			reg.ServeHTTP(&countingWriter{ResponseWriter: w, r: r, ctx: req.Context(), corrupt: bad}, req)
			return
		}
		r.mu.Unlock()
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.URL = r.srv.URL
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Push writes img under repoTag ("team/app:v1", without the host) and
// returns its reference by digest, "HOST/team/app@sha256:…".
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref := r.ref(t, repoTag)
	if err := remote.Write(ref, img, r.opts()...); err != nil {
		t.Fatalf("imagetest: pushing %s: %v", repoTag, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Name() + "@" + d.String()
}

// PushIndex writes a manifest list under repoTag and returns its
// reference by digest.
func (r *Registry) PushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref := r.ref(t, repoTag)
	if err := remote.WriteIndex(ref, idx, r.opts()...); err != nil {
		t.Fatalf("imagetest: pushing %s: %v", repoTag, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Name() + "@" + d.String()
}

func (r *Registry) ref(t testing.TB, repoTag string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		t.Fatalf("imagetest: %v", err)
	}
	return ref
}

func (r *Registry) opts() []remote.Option {
	if r.user == "" {
		return nil
	}
	return []remote.Option{remote.WithAuth(&basic{r.user, r.pass})}
}

// BlobGets returns how many times each blob (by digest) was downloaded.
func (r *Registry) BlobGets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.blobGets))
	for k, v := range r.blobGets {
		out[k] = v
	}
	return out
}

// BlobBytes returns the blob bytes the registry sent.
func (r *Registry) BlobBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blobBytes
}

// Fail makes the registry answer every request whose path starts with
// prefix with status code (0: answer normally again).
func (r *Registry) Fail(prefix string, code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if code == 0 {
		delete(r.fail, prefix)
		return
	}
	r.fail[prefix] = code
}

// Corrupt makes the registry serve blob digest with its first byte
// changed.
func (r *Registry) Corrupt(digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.corrupt[digest] = true
}

// countingWriter counts (and, with a bandwidth limit, paces) blob bytes.
type countingWriter struct {
	http.ResponseWriter
	r       *Registry
	ctx     context.Context
	corrupt bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.corrupt && len(p) > 0 {
		w.corrupt = false
		p = append([]byte{p[0] ^ 0xff}, p[1:]...)
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), 64<<10)
		if w.r.limiter != nil {
			if err := w.r.limiter.WaitN(w.ctx, n); err != nil {
				return written, err
			}
		}
		m, err := w.ResponseWriter.Write(p[:n])
		written += m
		w.r.mu.Lock()
		w.r.blobBytes += int64(m)
		w.r.mu.Unlock()
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

func (w *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	return io.CopyBuffer(writerOnly{w}, src, make([]byte, 64<<10))
}

type writerOnly struct{ io.Writer }
