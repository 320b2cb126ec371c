package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
)

// ownerJobs is a Backend whose only reachable method is Jobs: the caller's
// jobs, one for an owner and none for anyone else, as the node answers.
type ownerJobs struct{ Backend }

func (ownerJobs) Jobs(ctx context.Context) ([]market.JobRecord, error) {
	if c, _ := CallerFrom(ctx); c.Owner != "" {
		return []market.JobRecord{{ID: "j-mine", Spec: market.JobSpec{Owner: string(c.Owner)}}}, nil
	}
	return nil, nil
}

// answer is what a request got back: the status, the Allow header and the
// error of the JSON body ("" when the body is no JSON error).
type answer struct {
	status int
	allow  string
	error  string
	body   string
}

func do(t *testing.T, h http.Handler, method, path, auth string) answer {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, allow: resp.Header.Get("Allow"), body: string(raw)}
	var e Error
	if resp.Header.Get("Content-Type") == "application/json" && json.Unmarshal(raw, &e) == nil {
		a.error = e.Error
	}
	return a
}

// Every token that is sent must be right, whether or not the node needs
// one: a wrong or malformed one is a 401, never the empty answer a
// stranger gets.
func TestWrongOrMalformedTokenIs401(t *testing.T) {
	const ownerTok = "alice-owner-token-0123"
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	open := Handler(Config{OwnerTokens: map[string]owner.Key{ownerTok: k}}, ownerJobs{}, nil)
	guarded := Handler(Config{Token: "admin-s3cret", OwnerTokens: map[string]owner.Key{ownerTok: k}}, ownerJobs{}, nil)
	for _, tc := range []struct {
		name    string
		h       http.Handler
		auth    string
		status  int
		want    string // in the error, or in the body of a 200
		wantJob bool
	}{
		{"no token where none is needed", open, "", 200, `"jobs": []`, false},
		{"owner token where none is needed", open, "Bearer " + ownerTok, 200, "j-mine", true},
		{"wrong token where none is needed", open, "Bearer not-a-token-anybody-has", 401, "missing or wrong API token", false},
		{"basic auth", open, "Basic YWxpY2U6c2VjcmV0", 401, `malformed Authorization header: want "Bearer TOKEN"`, false},
		{"bearer with no token", open, "Bearer ", 401, "malformed Authorization header", false},
		{"bearer with two words", open, "Bearer two words", 401, "malformed Authorization header", false},
		{"no token where one is needed", guarded, "", 401, "missing or wrong API token", false},
		{"wrong token where one is needed", guarded, "Bearer nope", 401, "missing or wrong API token", false},
		{"admin token", guarded, "Bearer admin-s3cret", 200, `"jobs": []`, false},
		{"owner token where one is needed", guarded, "Bearer " + ownerTok, 200, "j-mine", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, tc.h, "GET", "/v1/jobs", tc.auth)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			if tc.status != 200 && a.error != tc.want && !strings.HasPrefix(a.error, tc.want) {
				t.Errorf("error %q, want %q", a.error, tc.want)
			}
			if tc.status == 200 && !strings.Contains(a.body, tc.want) {
				t.Errorf("body %s lacks %s", a.body, tc.want)
			}
		})
	}
	// The probes never ask for a token, even a wrong one.
	if a := do(t, open, "GET", "/healthz", "Bearer wrong"); a.status != 200 {
		t.Errorf("/healthz with a wrong token: %d %s", a.status, a.body)
	}
}

// A path no route serves is a JSON 404; a path served for other methods is
// a JSON 405 whose Allow header names them; dashboard files are served
// as they are.
func TestUnknownPathIs404AndWrongMethodIs405(t *testing.T) {
	dash := http.FileServerFS(fstest.MapFS{
		"index.html": {Data: []byte("<html>gpumesh</html>")},
		"app.js":     {Data: []byte("// app")},
	})
	withDash := Handler(Config{}, backendless{}, dash)
	bare := Handler(Config{}, backendless{}, nil)
	for _, tc := range []struct {
		name         string
		h            http.Handler
		method, path string
		status       int
		allow        string
		want         string // the JSON error, or the body of a 200
	}{
		{"unknown API path", bare, "GET", "/v1/nope", 404, "", "no such endpoint: GET /v1/nope"},
		{"unknown path outside the API", bare, "GET", "/nope", 404, "", "no such endpoint: GET /nope"},
		{"unknown path beside the dashboard", withDash, "GET", "/nope.js", 404, "", "no such endpoint: GET /nope.js"},
		{"unknown path beside the dashboard, POST", withDash, "POST", "/nope.js", 404, "", "no such endpoint: POST /nope.js"},
		{"the dashboard's page", withDash, "GET", "/", 200, "", "<html>gpumesh</html>"},
		{"a dashboard file", withDash, "GET", "/app.js", 200, "", "// app"},
		{"PUT on the job list", bare, "PUT", "/v1/jobs", 405, "GET, HEAD, POST", "method PUT not allowed on /v1/jobs: use GET or HEAD or POST"},
		{"POST on a job", bare, "POST", "/v1/jobs/j1", 405, "GET, HEAD, DELETE", "method POST not allowed on /v1/jobs/j1: use GET or HEAD or DELETE"},
		{"GET on scale", bare, "GET", "/v1/jobs/j1/scale", 405, "POST", "method GET not allowed on /v1/jobs/j1/scale: use POST"},
		{"GET on a payload", bare, "GET", "/v1/payloads/sha256:ab", 405, "PUT", "method GET not allowed on /v1/payloads/sha256:ab: use PUT"},
		{"DELETE on a probe", bare, "DELETE", "/healthz", 405, "GET, HEAD", "method DELETE not allowed on /healthz: use GET or HEAD"},
		{"POST on the dashboard's page", withDash, "POST", "/", 405, "GET, HEAD", "method POST not allowed on /: use GET or HEAD"},
		{"POST where no dashboard is", bare, "POST", "/", 404, "", "no such endpoint: POST /"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, tc.h, tc.method, tc.path, "")
			if a.status != tc.status || a.allow != tc.allow {
				t.Fatalf("%s %s: %d Allow %q %s; want %d Allow %q", tc.method, tc.path, a.status, a.allow, a.body, tc.status, tc.allow)
			}
			got := a.error
			if tc.status == 200 {
				got = a.body
			}
			if got != tc.want {
				t.Errorf("%s %s: %q, want %q (body %s)", tc.method, tc.path, got, tc.want, a.body)
			}
		})
	}
}

// payloadSink is a Backend whose only reachable methods take payloads:
// they read the whole upload, as the node's store does.
type payloadSink struct{ Backend }

func (payloadSink) PutPayloadManifest(context.Context, []byte) (PayloadUpload, error) {
	return PayloadUpload{}, nil
}

func (payloadSink) PutPayloadChunk(_ context.Context, _, _ string, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A body over its limit is a 413 that says the limit in MiB, not in bytes
// ("payload over 67108864 bytes").
func TestOversizeBodyIs413InMiB(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}, payloadSink{}, nil))
	defer srv.Close()
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		method, path string
		size         int64
		want         string
	}{
		{"PUT", "/v1/payloads/" + d, MaxManifestBytes + 1, "payload manifest over 64 MiB: a tree this large must be sent as several"},
		{"PUT", "/v1/payloads/" + d + "/chunks/" + d, MaxChunkBytes + 1, "chunk over 8 MiB"},
		{"POST", "/v1/jobs", maxSpecBytes + 1, "request body over 1 MiB"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, io.LimitReader(zeros{}, tc.size))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || err != nil || e.Error != tc.want {
			t.Errorf("%s %s of %d bytes: %d %q (%v), want 413 %q", tc.method, tc.path, tc.size, resp.StatusCode, e.Error, err, tc.want)
		}
	}
}

// busyNode is a Backend whose submissions are refused as a saturated
// node refuses them.
type busyNode struct{ Backend }

func (busyNode) Submit(context.Context, market.JobSpec) (market.JobRecord, error) {
	return market.JobRecord{}, Busy(1500*time.Millisecond, "job j1: node X is saturated")
}

// A saturated node answers 429 with a Retry-After in whole seconds,
// rounded up, and the JSON error.
func TestBusyIs429WithRetryAfter(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}, busyNode{}, nil))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/jobs", "application/json", strings.NewReader(`{"id":"j1","cards":1,"max_price_cny":5,"command":["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" || e.Error != "job j1: node X is saturated" {
		t.Errorf("%d Retry-After %q %q; want 429, 2, the error", resp.StatusCode, resp.Header.Get("Retry-After"), e.Error)
	}
	for d, want := range map[time.Duration]string{time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", time.Minute: "60"} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %q, want %q", d, got, want)
		}
	}
}

// Go's profiles are the admin's: served with the node's API token, refused
// to an owner token (403) and by a node without a token (404).
func TestProfilesNeedTheAdminToken(t *testing.T) {
	const ownerTok = "alice-owner-token-0123"
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	open := Handler(Config{OwnerTokens: map[string]owner.Key{ownerTok: k}}, backendless{}, nil)
	guarded := Handler(Config{Token: "admin-s3cret", OwnerTokens: map[string]owner.Key{ownerTok: k}}, backendless{}, nil)
	for _, tc := range []struct {
		name   string
		h      http.Handler
		path   string
		auth   string
		status int
		want   string
	}{
		{"no token on the node", open, "/debug/pprof/", "", 404, "only by a node with an API token"},
		{"owner token on a node without one", open, "/debug/pprof/heap", "Bearer " + ownerTok, 404, "only by a node with an API token"},
		{"owner token", guarded, "/debug/pprof/", "Bearer " + ownerTok, 403, "not an owner's"},
		{"no token", guarded, "/debug/pprof/", "", 401, "missing or wrong API token"},
		{"admin token: the index", guarded, "/debug/pprof/", "Bearer admin-s3cret", 200, "goroutine"},
		{"admin token: a heap profile", guarded, "/debug/pprof/heap?debug=1", "Bearer admin-s3cret", 200, "heap profile"},
		{"admin token: the command line", guarded, "/debug/pprof/cmdline", "Bearer admin-s3cret", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, tc.h, "GET", tc.path, tc.auth)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %.200s", a.status, tc.status, a.body)
			}
			got := a.error
			if tc.status == 200 {
				got = a.body
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("%.200q does not say %q", got, tc.want)
			}
		})
	}
}
