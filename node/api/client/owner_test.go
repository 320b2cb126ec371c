package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/api/client/clienttest"
)

// callerBackend records who the API says called, and takes signed specs.
type callerBackend struct {
	*clienttest.Backend
	mu      sync.Mutex
	callers []api.Caller
	signed  []market.SignedSpec
}

func (b *callerBackend) saw(ctx context.Context) {
	c, ok := api.CallerFrom(ctx)
	if !ok {
		panic("an API request without a Caller")
	}
	b.mu.Lock()
	b.callers = append(b.callers, c)
	b.mu.Unlock()
}

func (b *callerBackend) last() api.Caller {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.callers) == 0 {
		return api.Caller{Owner: "nobody called"}
	}
	return b.callers[len(b.callers)-1]
}

func (b *callerBackend) Jobs(ctx context.Context) ([]market.JobRecord, error) {
	b.saw(ctx)
	return b.Backend.Jobs(ctx)
}

func (b *callerBackend) ListJobs(ctx context.Context) (api.JobList, error) {
	b.saw(ctx)
	return b.Backend.ListJobs(ctx)
}

func (b *callerBackend) Scale(ctx context.Context, id string, cards int) (market.JobRecord, error) {
	b.saw(ctx)
	return market.JobRecord{ID: id, Cards: cards}, nil
}

func (b *callerBackend) SubmitSigned(ctx context.Context, s market.SignedSpec) (market.JobRecord, error) {
	b.saw(ctx)
	b.mu.Lock()
	b.signed = append(b.signed, s)
	b.mu.Unlock()
	return market.JobRecord{ID: s.Spec.ID, Spec: s.Spec, State: market.JobPending}, nil
}

func testKey(t *testing.T, b byte) owner.Key {
	t.Helper()
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const (
	adminToken = "admin-token-0123456789"
	ownerToken = "owner-token-0123456789"
)

// serveOwners serves a callerBackend behind an admin token, with one owner
// token for tokenKey, on mesh "lab".
func serveOwners(t *testing.T, tokenKey owner.Key) (*callerBackend, *httptest.Server) {
	t.Helper()
	b := &callerBackend{Backend: clienttest.New()}
	cfg := api.Config{Token: adminToken, Network: "lab", OwnerTokens: map[string]owner.Key{ownerToken: tokenKey}}
	srv := httptest.NewServer(api.Handler(cfg, b, nil))
	t.Cleanup(srv.Close)
	return b, srv
}

func newOwnerClient(t *testing.T, srv *httptest.Server, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(srv.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestTheAPIKnowsWhichOwnerCalls(t *testing.T) {
	alice, bob := testKey(t, 1), testKey(t, 2)
	b, srv := serveOwners(t, bob)
	ctx := context.Background()

	signed := newOwnerClient(t, srv, client.WithToken(adminToken), client.WithOwnerKey(alice))
	if _, err := signed.Jobs(ctx); err != nil {
		t.Fatal(err)
	}
	if c := b.last(); c.Owner != alice.ID() || c.Proof == nil || c.Key != nil {
		t.Errorf("signed request: caller %+v, want alice with her proof", c)
	}
	byToken := newOwnerClient(t, srv, client.WithToken(ownerToken))
	if _, err := byToken.Jobs(ctx); err != nil {
		t.Fatal(err)
	}
	if c := b.last(); c.Owner != bob.ID() || c.Key == nil || c.Key.ID() != bob.ID() || c.Proof != nil {
		t.Errorf("owner token: caller %+v, want bob with his key", c)
	}
	admin := newOwnerClient(t, srv, client.WithToken(adminToken))
	if _, err := admin.Jobs(ctx); err != nil {
		t.Fatal(err)
	}
	if c := b.last(); c.Owner != "" {
		t.Errorf("admin token: caller %+v, want no owner", c)
	}
	info, err := signed.Info(ctx)
	if err != nil || info.Network != "lab" || info.Owner != string(alice.ID()) {
		t.Errorf("info %+v, %v", info, err)
	}
	// An owner's signature does not open the node: the admin token or an
	// owner token still must come.
	keyOnly := newOwnerClient(t, srv, client.WithOwnerKey(alice))
	if _, err := keyOnly.Jobs(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("signed but no token: %v", err)
	}
}

func TestSignedRequestsAreRefusedWhenTheyDoNotVerify(t *testing.T) {
	alice := testKey(t, 3)
	_, srv := serveOwners(t, testKey(t, 4))
	ctx := context.Background()

	stale := newOwnerClient(t, srv, client.WithToken(adminToken), client.WithOwnerKey(alice),
		client.WithClock(func() time.Time { return time.Now().Add(-owner.RequestWindow - time.Minute) }))
	_, err := stale.Jobs(ctx)
	if !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "time window") {
		t.Errorf("a request signed 3 minutes ago: %v", err)
	}

	do := func(method, path, header, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set(owner.Header, header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	now := time.Now()
	// A proof captured for one request does not carry over to another.
	listProof := owner.SignRequest(alice, "GET", "/v1/jobs", nil, now).HeaderValue()
	if code, body := do("DELETE", "/v1/jobs/j1", listProof, ""); code != 401 || !strings.Contains(body, "signature does not verify") {
		t.Errorf("a list proof replayed as a cancel: %d %s", code, body)
	}
	scale4 := owner.SignRequest(alice, "POST", "/v1/jobs/j1/scale", []byte(`{"cards":4}`), now).HeaderValue()
	if code, body := do("POST", "/v1/jobs/j1/scale", scale4, `{"cards":64}`); code != 401 || !strings.Contains(body, "signature does not verify") {
		t.Errorf("a scale to 4 with its body changed to 64: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/jobs/j1/scale", scale4, `{"cards":4}`); code != 200 {
		t.Errorf("the scale as signed: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/jobs", "o1nope.1.AAAA", ""); code != 401 || !strings.Contains(body, "not an owner ID") {
		t.Errorf("a malformed header: %d %s", code, body)
	}
	// An owner token and a signature of another owner contradict each other.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+ownerToken)
	req.Header.Set(owner.Header, listProof)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bob's owner token and alice's signature: %d, want 400", resp.StatusCode)
	}
}

func TestSubmitSignsForTheNodesMesh(t *testing.T) {
	alice := testKey(t, 5)
	b, srv := serveOwners(t, testKey(t, 6))
	ctx := context.Background()
	c := newOwnerClient(t, srv, client.WithToken(adminToken), client.WithOwnerKey(alice))
	s := spec("")
	rec, err := c.Submit(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	got := b.signed[len(b.signed)-1]
	b.mu.Unlock()
	if rec.ID == "" || got.Spec.ID != rec.ID {
		t.Fatalf("submitted %q, record %q: the client gives an unnamed spec an ID before signing", got.Spec.ID, rec.ID)
	}
	if err := got.Verify("lab"); err != nil {
		t.Fatalf("the node received a spec that does not verify for its mesh: %v", err)
	}
	if got.Spec.Owner != string(alice.ID()) {
		t.Errorf("owner %q", got.Spec.Owner)
	}
	// With an owner token the spec goes bare: the node signs it.
	byToken := newOwnerClient(t, srv, client.WithToken(ownerToken))
	if _, err := byToken.Submit(ctx, spec("j-bare")); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	bare := b.signed[len(b.signed)-1]
	b.mu.Unlock()
	if bare.Signed() || bare.Spec.ID != "j-bare" {
		t.Errorf("bare submission reached the backend as %+v", bare)
	}
	// A signed body the API cannot read is a 400 naming the trouble.
	req, _ := http.NewRequest("POST", srv.URL+"/v1/jobs", strings.NewReader(`{"spec":{"id":"j"},"signature":{"sig":"AAAA"}}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "signature of 3 bytes") {
		t.Errorf("malformed signed spec: %d %s", resp.StatusCode, body)
	}
}

func TestCheckpointRouteNeedsABackendThatServesThem(t *testing.T) {
	_, c := newClient(t, "")
	_, err := c.Checkpoint(context.Background(), "j1", 0, io.Discard)
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "serves no checkpoints") {
		t.Errorf("checkpoint from a backend without them: %v", err)
	}
}
