package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/api/client/clienttest"
)

var fast = client.WaitOptions{MinInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond, Patience: 200 * time.Millisecond}

func rec(id string, state market.JobState, epoch uint64) market.JobRecord {
	return market.JobRecord{ID: id, State: state, Epoch: epoch, Reason: string(state) + " because"}
}

func TestWaitUntilTerminal(t *testing.T) {
	b, c := newClient(t, "")
	b.AddJob(rec("j1", market.JobPending, 0))
	b.Script("j1",
		rec("j1", market.JobPending, 0), rec("j1", market.JobPending, 0), rec("j1", market.JobPlacing, 1),
		rec("j1", market.JobRunning, 1), rec("j1", market.JobRerouting, 1), rec("j1", market.JobRunning, 2),
		rec("j1", market.JobRunning, 2), rec("j1", market.JobFailed, 2))
	var seen []string
	o := fast
	o.OnChange = func(r market.JobRecord) { seen = append(seen, string(r.State)) }
	got, err := c.Wait(context.Background(), "j1", o)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != market.JobFailed {
		t.Errorf("final state %s", got.State)
	}
	if want := "pending placing running rerouting running failed"; strings.Join(seen, " ") != want {
		t.Errorf("changes seen %q, want %q", strings.Join(seen, " "), want)
	}
	if n := b.Gets("j1"); n != 8 {
		t.Errorf("%d polls, want 8 (one per scripted record, none after the end)", n)
	}
}

// A pending job whose reason changes is a change: a waiting owner sees
// what the job waits for now.
func TestWaitSeesReasonChanges(t *testing.T) {
	b, c := newClient(t, "")
	waiting := func(why string) market.JobRecord {
		return market.JobRecord{ID: "j1", State: market.JobPending, Reason: why}
	}
	b.AddJob(waiting("a"))
	b.Script("j1", waiting("a"), waiting("a"), waiting("b"), waiting("b"), rec("j1", market.JobSucceeded, 1))
	var seen []string
	o := fast
	o.OnChange = func(r market.JobRecord) { seen = append(seen, r.Reason) }
	if _, err := c.Wait(context.Background(), "j1", o); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(seen, "|"), "a|b|succeeded because"; got != want {
		t.Errorf("changes seen %q, want %q", got, want)
	}
}

func TestWaitContextEnds(t *testing.T) {
	b, c := newClient(t, "")
	b.AddJob(rec("j1", market.JobRunning, 1))
	ctx, cancel := context.WithCancel(context.Background())
	o := fast
	o.OnChange = func(market.JobRecord) { cancel() }
	got, err := c.Wait(ctx, "j1", o)
	if !errors.Is(err, context.Canceled) || got.State != market.JobRunning {
		t.Errorf("got %s, %v", got.State, err)
	}
}

func TestWaitUnknownJobEndsAtOnce(t *testing.T) {
	b, c := newClient(t, "")
	_, err := c.Wait(context.Background(), "nope", fast)
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("err = %v", err)
	}
	if n := b.Gets("nope"); n != 1 {
		t.Errorf("%d polls of an unknown job, want 1", n)
	}
}

// A node that answers 503 for a while, then the record: Wait rides it out.
func TestWaitThroughServerErrors(t *testing.T) {
	b := clienttest.New()
	b.AddJob(rec("j1", market.JobRunning, 1))
	b.Script("j1", rec("j1", market.JobSucceeded, 1))
	var failures atomic.Int32
	h := api.Handler(api.Config{}, b, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failures.Add(1) <= 3 {
			http.Error(w, `{"error":"starting"}`, http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	defer c.CloseIdleConnections()
	got, err := c.Wait(context.Background(), "j1", fast)
	if err != nil || got.State != market.JobSucceeded {
		t.Fatalf("got %s, %v", got.State, err)
	}
	if n := failures.Load(); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
}

func TestWaitGivesUpOnUnreachableNode(t *testing.T) {
	c, _ := client.New(closedAddr(t))
	start := time.Now()
	_, err := c.Wait(context.Background(), "j1", fast)
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "gave up after 200ms") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d < fast.Patience {
		t.Errorf("gave up after %v, before its patience of %v", d, fast.Patience)
	}
}

func TestWaitUntilRunning(t *testing.T) {
	b, c := newClient(t, "")
	b.AddJob(rec("j1", market.JobPending, 0))
	b.Script("j1", rec("j1", market.JobPending, 0), rec("j1", market.JobPlacing, 1), rec("j1", market.JobRunning, 1), rec("j1", market.JobSucceeded, 1))
	got, err := c.WaitUntil(context.Background(), "j1", fast, func(r market.JobRecord) bool { return r.State == market.JobRunning })
	if err != nil || got.State != market.JobRunning || b.Gets("j1") != 3 {
		t.Errorf("got %s after %d polls, %v", got.State, b.Gets("j1"), err)
	}
	// A job that ends without reaching the condition ends the wait too.
	b.AddJob(rec("j2", market.JobPending, 0))
	b.Script("j2", rec("j2", market.JobFailed, 0))
	got, err = c.WaitUntil(context.Background(), "j2", fast, func(r market.JobRecord) bool { return r.State == market.JobRunning })
	if err != nil || got.State != market.JobFailed {
		t.Errorf("got %s, %v", got.State, err)
	}
}
