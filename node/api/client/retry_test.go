package client

import (
	"context"
	"encoding/json"
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
)

// answers is a node that answers POST /v1/jobs with the statuses given,
// one per request (the last one again after them), and keeps the bodies.
type answers struct {
	mu       sync.Mutex
	statuses []int
	after    []string // Retry-After of each answer; "" none
	bodies   [][]byte
}

func (a *answers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.URL.Path == "/v1/info" {
		w.Write([]byte(`{"network":"gpumesh"}`))
		return
	}
	i := min(len(a.bodies), len(a.statuses)-1)
	a.bodies = append(a.bodies, body)
	if i < len(a.after) && a.after[i] != "" {
		w.Header().Set("Retry-After", a.after[i])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.statuses[i])
	if a.statuses[i] == http.StatusCreated {
		var s struct {
			Spec market.JobSpec `json:"spec"`
			market.JobSpec
		}
		json.Unmarshal(body, &s)
		id := s.Spec.ID
		if id == "" {
			id = s.ID
		}
		json.NewEncoder(w).Encode(market.JobRecord{ID: id, State: market.JobPending})
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"error": http.StatusText(a.statuses[i]) + " now"})
}

func (a *answers) sent() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bodies
}

// fakeTime is a clock that only the client's pauses move.
type fakeTime struct {
	mu     sync.Mutex
	now    time.Time
	pauses []time.Duration
}

func (f *fakeTime) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) sleep(_ context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, d)
	f.now = f.now.Add(d)
	return nil
}

func retryClient(t *testing.T, a *answers, opts ...Option) (*Client, *fakeTime) {
	t.Helper()
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	c, err := New(srv.Listener.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	ft := &fakeTime{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	c.sleep, c.clock = ft.sleep, ft.clock
	return c, ft
}

func within(d, want time.Duration) bool { return d >= want*8/10 && d <= want*12/10 }

// A saturated node's 429 and an unavailable coordinator's 503 get the
// same submission again — the same ID, the same signature, byte for byte
// — after the pause the node asked for (else a backoff), and each retry is
// told before its pause.
func TestSubmitSendsTheSameSubmissionAgainAfter429And503(t *testing.T) {
	key, err := owner.KeyFromSeed([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	a := &answers{statuses: []int{429, 503, 201}, after: []string{"2", ""}}
	var notes []RetryNote
	c, ft := retryClient(t, a, WithOwnerKey(key), WithSubmitRetry(30*time.Second, func(n RetryNote) { notes = append(notes, n) }))
	rec, err := c.Submit(context.Background(), market.JobSpec{Cards: 1, MaxPriceCNY: 5, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	bodies := a.sent()
	if len(bodies) != 3 {
		t.Fatalf("%d submissions sent, want 3", len(bodies))
	}
	for i := 1; i < 3; i++ {
		if string(bodies[i]) != string(bodies[0]) {
			t.Errorf("try %d sent\n%s\nwant the first try's\n%s", i+1, bodies[i], bodies[0])
		}
	}
	var s market.SignedSpec
	if err := json.Unmarshal(bodies[0], &s); err != nil || s.Spec.ID == "" || rec.ID != s.Spec.ID {
		t.Fatalf("the submission carries job %q (%v); the record says %q", s.Spec.ID, err, rec.ID)
	}
	if len(ft.pauses) != 2 || !within(ft.pauses[0], 2*time.Second) || !within(ft.pauses[1], retryFirst) {
		t.Errorf("pauses %v, want about 2s (Retry-After) then %v (backoff)", ft.pauses, retryFirst)
	}
	if len(notes) != 2 || notes[0].Status != 429 || notes[1].Status != 503 || notes[0].Job != rec.ID || notes[1].Try != 2 {
		t.Fatalf("notes %+v", notes)
	}
	for _, w := range []string{rec.ID, "429", "saturated", "Too Many Requests now", "submitting it again with the same ID", "try 2"} {
		if !strings.Contains(notes[0].String(), w) {
			t.Errorf("note %q does not say %q", notes[0], w)
		}
	}
}

// A spec sent unsigned without an ID (an owner-token client) gets one
// here: a retry must not become a second job with a node-made ID.
func TestSubmitGivesAnUnsignedSpecAnIDBeforeItRetries(t *testing.T) {
	a := &answers{statuses: []int{503, 201}}
	c, _ := retryClient(t, a, WithToken("owner-token-0123456789"))
	rec, err := c.Submit(context.Background(), market.JobSpec{Cards: 1, MaxPriceCNY: 5, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	bodies := a.sent()
	var first market.JobSpec
	if err := json.Unmarshal(bodies[0], &first); err != nil || first.ID == "" {
		t.Fatalf("unsigned spec sent without an ID: %s (%v)", bodies[0], err)
	}
	if len(bodies) != 2 || string(bodies[1]) != string(bodies[0]) || rec.ID != first.ID {
		t.Errorf("tries %q, record %q", bodies, rec.ID)
	}
}

// The retries stop at the bound, and the error says how many tries were
// made; other errors are not retried at all; with a bound of 0 nothing is.
func TestSubmitRetriesAreBounded(t *testing.T) {
	a := &answers{statuses: []int{429}, after: []string{"1"}}
	c, ft := retryClient(t, a, WithSubmitRetry(5*time.Second, nil))
	_, err := c.Submit(context.Background(), market.JobSpec{ID: "j-busy", Cards: 1, MaxPriceCNY: 5, Command: []string{"true"}})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.RetryAfter != time.Second {
		t.Fatalf("err = %v, want the last 429 with its Retry-After", err)
	}
	var slept time.Duration
	for _, p := range ft.pauses {
		slept += p
	}
	if slept > 5*time.Second || len(a.sent()) < 4 || !strings.Contains(err.Error(), "gave up after") {
		t.Errorf("%d tries, %v of pauses, err %v: want about 5 within 5s, and the error to say so", len(a.sent()), slept, err)
	}

	for _, status := range []int{400, 409, 500, 502} {
		a := &answers{statuses: []int{status, 201}}
		c, _ := retryClient(t, a)
		if _, err := c.Submit(context.Background(), market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 5, Command: []string{"true"}}); err == nil || len(a.sent()) != 1 {
			t.Errorf("status %d: %d tries, err %v; want 1 try and its error", status, len(a.sent()), err)
		}
	}
	a = &answers{statuses: []int{503, 201}}
	c, _ = retryClient(t, a, WithSubmitRetry(0, nil))
	if _, err := c.Submit(context.Background(), market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 5, Command: []string{"true"}}); err == nil || len(a.sent()) != 1 {
		t.Errorf("retry bound 0: %d tries, err %v", len(a.sent()), err)
	}
	if _, err := New("127.0.0.1:1", WithSubmitRetry(-time.Second, nil)); err == nil {
		t.Error("a negative retry bound was accepted")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, " 0 ": 0, "-4": 0, "soon": 0, "99999": time.Hour,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	} {
		if got := parseRetryAfter(h, now); got != want {
			t.Errorf("Retry-After %q = %v, want %v", h, got, want)
		}
	}
}
