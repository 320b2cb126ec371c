package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/api/client/clienttest"
)

// The payload test runs the real executor, which owns goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient serves a fake backend and returns a client of it.
func newClient(t *testing.T, token string, opts ...client.Option) (*clienttest.Backend, *client.Client) {
	t.Helper()
	b := clienttest.New()
	srv := b.Serve(t, token)
	c, err := client.New(srv.Listener.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return b, c
}

func spec(id string) market.JobSpec {
	return market.JobSpec{ID: id, Cards: 2, Models: []string{"h100-sxm-80g"}, MaxPriceCNY: 30, Command: []string{"python", "train.py"}}
}

func TestNewAddress(t *testing.T) {
	good := []string{"127.0.0.1:7070", "localhost:1", "[::1]:7070", "http://10.0.0.2:7070", "https://node.example:443/", "http://[::1]:80"}
	for _, a := range good {
		if _, err := client.New(a); err != nil {
			t.Errorf("New(%q): %v", a, err)
		}
	}
	bad := []string{"", "7070", "127.0.0.1", ":7070", "ftp://h:1", "http://h", "http://h:1/v1", "http://u@h:1", "http://h:1?x=1", "http://:80", "0:A", "h:0", "h:65536", "a b:80", "http://h:1#f"}
	for _, a := range bad {
		_, err := client.New(a)
		if err == nil {
			t.Errorf("New(%q) accepted", a)
			continue
		}
		if !strings.Contains(err.Error(), "API address") {
			t.Errorf("New(%q): %v does not say which address", a, err)
		}
	}
}

func TestOptionsRefuseBadValues(t *testing.T) {
	for _, o := range []client.Option{client.WithToken(""), client.WithToken("a b"), client.WithToken("a\nb"),
		client.WithHTTPClient(nil), client.WithTimeout(-time.Second)} {
		if _, err := client.New("127.0.0.1:1", o); err == nil {
			t.Error("a bad option was accepted")
		}
	}
}

func TestJobRoundTrip(t *testing.T) {
	b, c := newClient(t, "")
	ctx := context.Background()
	rec, err := c.Submit(ctx, spec("j1"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != "j1" || rec.State != market.JobPending || rec.Cards != 2 || rec.Spec.Models[0] != "h100-sxm-80g" {
		t.Errorf("submit returned %+v", rec)
	}
	// A retried submit of the same spec is the same job.
	again, err := c.Submit(ctx, spec("j1"))
	if err != nil || again.ID != "j1" || !again.SubmittedAt.Equal(rec.SubmittedAt) {
		t.Errorf("resubmit: %+v, %v", again, err)
	}
	if got := b.Submitted(); len(got) != 2 || got[0].MaxPriceCNY != 30 {
		t.Errorf("backend saw %+v", got)
	}
	jobs, err := c.Jobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "j1" {
		t.Fatalf("jobs: %+v, %v", jobs, err)
	}
	got, err := c.Job(ctx, "j1")
	if err != nil || got.ID != "j1" || got.Coordinator != clienttest.Coordinator {
		t.Fatalf("job: %+v, %v", got, err)
	}
	cancelled, err := c.Cancel(ctx, "j1")
	if err != nil || cancelled.State != market.JobCancelled {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
}

func TestScale(t *testing.T) {
	b, c := newClient(t, "")
	s := spec("e1")
	s.Elastic = &market.Elastic{Min: 1, Max: 8}
	b.AddJob(market.JobRecord{ID: "e1", Spec: s, State: market.JobRunning, Cards: 2})
	rec, err := c.Scale(context.Background(), "e1", 6)
	if err != nil || rec.Cards != 6 {
		t.Fatalf("scale: %+v, %v", rec, err)
	}
	_, err = c.Scale(context.Background(), "e1", 9)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "cards" || !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("scale out of range: %v", err)
	}
}

func TestErrors(t *testing.T) {
	_, c := newClient(t, "")
	ctx := context.Background()

	_, err := c.Job(ctx, "nope")
	var ae *client.APIError
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrNotFound) || ae.Message != `job "nope" not found` {
		t.Errorf("unknown job: %v", err)
	}
	if ae != nil && (ae.Method != "GET" || ae.Path != "/v1/jobs/nope") {
		t.Errorf("unknown job: request named as %s %s", ae.Method, ae.Path)
	}

	bad := spec("j2")
	bad.Cards = 0
	_, err = c.Submit(ctx, bad)
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "cards" || !errors.Is(err, client.ErrBadRequest) ||
		!strings.Contains(ae.Message, "between 1 and") {
		t.Errorf("bad spec: %v", err)
	}

	// An ID with a slash stays one path segment.
	_, err = c.Job(ctx, "a/b")
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Path != "/v1/jobs/a%2Fb" {
		t.Errorf("escaped id: %v", err)
	}
}

func TestToken(t *testing.T) {
	b := clienttest.New()
	srv := b.Serve(t, "s3cret")
	addr := srv.Listener.Addr().String()
	without, _ := client.New(addr)
	defer without.CloseIdleConnections()
	_, err := without.Jobs(context.Background())
	if !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "missing or wrong API token") {
		t.Errorf("no token: %v", err)
	}
	with, _ := client.New("http://"+addr, client.WithToken("s3cret"))
	defer with.CloseIdleConnections()
	if _, err := with.Jobs(context.Background()); err != nil {
		t.Errorf("with token: %v", err)
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachable(t *testing.T) {
	addr := closedAddr(t)
	c, _ := client.New(addr)
	_, err := c.Jobs(context.Background())
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || ue.Addr != addr {
		t.Fatalf("err = %v (%T), want an UnreachableError for %s", err, err, addr)
	}
	if !strings.Contains(err.Error(), "cannot reach the gpumesh API at "+addr) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("message: %v", err)
	}
}

// A proxy's HTML error page still gives an APIError with the status.
func TestNonJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<html>upstream\x07 down</html>\nmore"))
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	defer c.CloseIdleConnections()
	_, err := c.Peers(context.Background())
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Message != "Bad Gateway: <html>upstream down</html>" {
		t.Errorf("err = %#v", err)
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, _ := client.New(srv.URL, client.WithTimeout(50*time.Millisecond))
	defer c.CloseIdleConnections()
	start := time.Now()
	_, err := c.Jobs(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestPeersAndCards(t *testing.T) {
	b, c := newClient(t, "")
	b.SetPeers([]api.Peer{{ID: "12D3KooWself", Self: true, State: "alive", Cards: 8, FreeCards: 6, Addrs: []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWself"}}})
	peers, err := c.Peers(context.Background())
	if err != nil || len(peers) != 1 || !peers[0].Self || peers[0].FreeCards != 6 {
		t.Errorf("peers: %+v, %v", peers, err)
	}
	cards, err := c.Cards(context.Background())
	if err != nil || cards == nil || len(cards) != 0 {
		t.Errorf("cards: %+v, %v", cards, err)
	}
	st, err := c.Status(context.Background())
	if err != nil || !strings.Contains(string(st), `"peers": 1`) {
		t.Errorf("status: %s, %v", st, err)
	}
}

// The API takes a job's images as the CLI sends them: by digest, for
// every vendor or per vendor; a tag is refused, naming the field.
func TestSubmitImages(t *testing.T) {
	b, c := newClient(t, "")
	ctx := context.Background()
	digest := "@sha256:" + strings.Repeat("0f", 32)
	s := spec("img1")
	s.Command = nil
	s.Images = []market.ImageRef{{Vendor: "nvidia", Ref: "nvcr.io/nvidia/pytorch" + digest}, {Ref: "docker.io/library/ubuntu" + digest}}
	rec, err := c.Submit(ctx, s)
	if err != nil || len(rec.Spec.Images) != 2 || rec.Spec.Images[0] != s.Images[0] {
		t.Fatalf("submit: %+v, %v", rec.Spec.Images, err)
	}
	if got := b.Submitted(); len(got) != 1 || len(got[0].Images) != 2 {
		t.Fatalf("the node got %+v", got)
	}
	bad := spec("img2")
	bad.Images = []market.ImageRef{{Ref: "ubuntu:22.04"}}
	_, err = c.Submit(ctx, bad)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "images[0].ref" || !strings.Contains(ae.Message, "names no digest") {
		t.Errorf("a tag: %v", err)
	}
}
