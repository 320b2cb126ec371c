package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market/owner"
)

// Two credentials reach the API:
//
//   - The node's admin token (Config.Token) guards the API as a whole: when
//     set, every request but the probes and the dashboard's static files
//     needs "Authorization: Bearer TOKEN" — the admin token or an owner
//     token.
//   - An owner's identity says whose jobs a request may see and steer. It
//     comes as a request signed with the owner's key (the owner.Header
//     header; see owner.SignRequest), or as an owner token
//     (Config.OwnerTokens) in the Authorization header, which the node maps
//     to the owner's key.
//
// The API checks both and hands the Backend a Caller in the request's
// context (CallerFrom); the Backend decides what the owner may do.

// Caller is who made an API request, as the API authenticated it.
type Caller struct {
	// Owner is the request's owner; "" when it carried no owner
	// credentials.
	Owner owner.ID
	// Key is the owner's key, when the request came with an owner token:
	// the node holds the key, and signs for the owner (specs sent
	// unsigned, requests it forwards to peers).
	Key *owner.Key
	// Proof is the owner's signed request, when it came signed; a node
	// forwards it to the peers that act on it, which verify it again.
	Proof *owner.Proof
	// Body is the request body Proof covers.
	Body []byte
	// Admin says the request presented the node's admin token
	// (Config.Token), which alone opens /debug/pprof/.
	Admin bool
}

type callerKey struct{}

type receivedKey struct{}

// ReceivedAt returns when the API took the request of ctx up, before it
// authenticated and read it; ok is false for a context that did not come
// from an API request. The node times the API's part of a submission by
// it (gpumesh_job_stage_seconds{stage="api"}).
func ReceivedAt(ctx context.Context) (at time.Time, ok bool) {
	at, ok = ctx.Value(receivedKey{}).(time.Time)
	return at, ok
}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller the API put in ctx; ok is false for a
// context that did not come from an API request (an in-process call).
func CallerFrom(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// ErrOwnerRequired is the error of a job request that carries no owner
// credentials.
var ErrOwnerRequired = errors.New("this request acts on jobs and needs the owner's key: sign it (header " + owner.Header + "; gpumesh does) or use an owner token")

// maxSignedBody bounds the body of a signed request, read whole to check
// its hash, but for the content-addressed uploads below.
const maxSignedBody = maxSpecBytes

// digestBodyPatterns are the routes whose body is content-addressed: it
// must hash to the digest that ends the path ("sha256:" and 64 hex
// digits), which the handler checks as the body streams in. Their signed
// requests name that digest as their body hash, so the body is not read
// here (a chunk is up to 8 MiB, a manifest up to 64 MiB).
var digestBodyPatterns = map[string]bool{
	"PUT /v1/payloads/{manifest}":                true,
	"PUT /v1/payloads/{manifest}/chunks/{chunk}": true,
}

// pathDigestHash returns the hex SHA-256 a content-addressed upload's
// body must have: the digest that ends its path.
func pathDigestHash(path string) (string, error) {
	last := path[strings.LastIndexByte(path, '/')+1:]
	hexPart, ok := strings.CutPrefix(last, "sha256:")
	if !ok || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q: want sha256: and 64 lower-case hex digits", last)
	}
	return hexPart, nil
}

// authenticate wraps mux with the checks above. The exemptions follow the
// route the request would take, not a prefix of its path.
func authenticate(cfg Config, mux *http.ServeMux) http.Handler {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	admin := []byte(cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), receivedKey{}, time.Now()))
		_, pattern := mux.Handler(r)
		switch pattern {
		case "GET /healthz", "GET /readyz", dashboardPattern:
			mux.ServeHTTP(w, r)
			return
		}
		var caller Caller
		gate := len(admin) == 0
		// A token that is sent must be right, even where none is needed:
		// a wrong one is a mistake to report (401), not to ignore and
		// answer as for a stranger (an empty job list).
		if authz := r.Header.Get("Authorization"); authz != "" {
			token, ok := strings.CutPrefix(authz, "Bearer ")
			if !ok || token == "" || strings.ContainsAny(token, " \t") {
				writeJSON(w, http.StatusUnauthorized, Error{Error: `malformed Authorization header: want "Bearer TOKEN"`})
				return
			}
			gate = false
			switch {
			case len(admin) > 0 && subtle.ConstantTimeCompare([]byte(token), admin) == 1:
				gate, caller.Admin = true, true
			default:
				if k, found := ownerToken(cfg.OwnerTokens, token); found {
					id := k.ID()
					caller.Owner, caller.Key, gate = id, &k, true
				}
			}
		}
		if !gate {
			writeJSON(w, http.StatusUnauthorized, Error{Error: "missing or wrong API token"})
			return
		}
		if h := r.Header.Get(owner.Header); h != "" {
			var p owner.Proof
			var body []byte
			var err error
			streamed := digestBodyPatterns[pattern]
			if streamed {
				var hash string
				if hash, err = pathDigestHash(r.URL.Path); err != nil {
					writeError(w, Errorf(http.StatusBadRequest, "%v", err))
					return
				}
				p, err = owner.ParseProofHash(h, r.Method, r.RequestURI, hash)
			} else {
				if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxSignedBody)); err != nil {
					writeError(w, Errorf(http.StatusRequestEntityTooLarge, "signed request body over %s", text.Bytes(maxSignedBody)))
					return
				}
				p, err = owner.ParseProof(h, r.Method, r.RequestURI, body)
			}
			if err == nil {
				err = p.Verify(now(), owner.RequestWindow)
			}
			if err != nil {
				writeError(w, Errorf(http.StatusUnauthorized, "%s: %v", owner.Header, err))
				return
			}
			if caller.Key != nil && caller.Owner != p.Owner {
				writeError(w, Errorf(http.StatusBadRequest, "the owner token is owner %s, but the request is signed by owner %s: send one of them", caller.Owner.Short(), p.Owner.Short()))
				return
			}
			caller.Owner, caller.Proof, caller.Body = p.Owner, &p, body
			if !streamed {
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
		}
		mux.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), caller)))
	})
}

// ownerToken finds token's key, comparing against every token in constant
// time.
func ownerToken(tokens map[string]owner.Key, token string) (owner.Key, bool) {
	var found owner.Key
	ok := false
	for t, k := range tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			found, ok = k, true
		}
	}
	return found, ok
}

// validateOwnerTokens checks the owner tokens of a Config.
func validateOwnerTokens(cfg Config) error {
	for t, k := range cfg.OwnerTokens {
		switch {
		case len(t) < 16:
			return fmt.Errorf("api: an owner token of %d characters: want at least 16", len(t))
		case strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			return errors.New("api: an owner token holds a space or control character")
		case !k.Valid():
			return errors.New("api: an owner token maps to no key")
		case t == cfg.Token:
			return errors.New("api: an owner token is the admin token")
		}
	}
	return nil
}
