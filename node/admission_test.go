package node

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
)

// holdDriver keeps n's driver busy until the returned function is called
// (idempotent; also called at the test's end): what waits for the driver
// stays in flight meanwhile.
func holdDriver(t *testing.T, n *Node) (free func()) {
	t.Helper()
	holding, release := make(chan struct{}), make(chan struct{})
	go n.do(context.Background(), func() { close(holding); <-release })
	<-holding
	done := false
	free = func() {
		if !done {
			done = true
			close(release)
		}
	}
	t.Cleanup(free)
	return free
}

func sleeper(id string) market.JobSpec {
	return market.JobSpec{ID: id, Cards: 1, MaxPriceCNY: 20, AllowSimulated: true, Command: []string{"sleep", "300"}}
}

// A coordinator with as many submissions in flight as it takes answers
// the next 429 with a Retry-After, before the job enters its market; the
// client sends the same submission again after the pause, it is taken,
// and each job runs once.
func TestSaturatedNodeAnswers429AndTheRetryStartsTheJobOnce(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(func(_ int, c *Config) { c.MaxSubmissions = 1 }), "a100-80g:4")
	n := sm.nodes[0]
	ctx := context.Background()
	noRetry, err := client.New(n.APIAddr(), client.WithOwnerKey(*testOwner(0)), client.WithSubmitRetry(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(noRetry.CloseIdleConnections)
	inFlight := func(id string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := apiClient(t, n, testOwner(0)).Submit(ctx, sleeper(id))
			errc <- err
		}()
		eventually(t, 10*time.Second, "submission "+id+" is in flight", func() bool { return n.admitted.inflight.Load() == 1 })
		return errc
	}

	// Without retries, the refusal is what the client sees.
	free := holdDriver(t, n)
	first := inFlight("first")
	_, err = noRetry.Submit(ctx, sleeper("second"))
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.RetryAfter != time.Second {
		t.Fatalf("a submission beyond MaxSubmissions: %v; want 429 with Retry-After 1s", err)
	}
	free()
	if err := <-first; err != nil {
		t.Fatalf("the submission in flight: %v", err)
	}
	var known bool
	n.do(ctx, func() { _, known = n.mk.Job("second") })
	if known {
		t.Fatal("the refused submission entered the market")
	}

	// With them (the default), the client waits as asked and sends the
	// same submission again; the note frees the driver.
	free = holdDriver(t, n)
	third := inFlight("third")
	var notes []client.RetryNote
	retrying, err := client.New(n.APIAddr(), client.WithOwnerKey(*testOwner(0)), client.WithSubmitRetry(20*time.Second, func(note client.RetryNote) {
		notes = append(notes, note)
		free()
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(retrying.CloseIdleConnections)
	for _, id := range []string{"fourth", "second"} {
		rec, err := retrying.Submit(ctx, sleeper(id))
		if err != nil || rec.ID != id {
			t.Fatalf("submission %s with retries: %v (record of %q)", id, err, rec.ID)
		}
	}
	if err := <-third; err != nil {
		t.Fatalf("the submission in flight: %v", err)
	}
	if len(notes) != 1 || notes[0].Status != http.StatusTooManyRequests || notes[0].Job != "fourth" || notes[0].Wait < 800*time.Millisecond {
		t.Errorf("retry notes %+v; want one 429 for job fourth, waiting about 1s", notes)
	}
	for _, id := range []string{"first", "second", "third", "fourth"} {
		waitState(t, n, id, 20*time.Second, market.JobRunning)
		if as := attemptsOf(sm, id); len(as) != 1 {
			t.Errorf("job %s: %d attempts, want 1: %v", id, len(as), as)
		}
	}
	if got := n.admitted.refused.Load(); got != 2 {
		t.Errorf("%d submissions refused as busy, want 2", got)
	}
	if got := n.admitted.inflight.Load(); got != 0 {
		t.Errorf("%d submissions still counted in flight", got)
	}
}

// A driver with half its queue waiting is saturated too: a submission is
// refused at once rather than queued behind it.
func TestDriverBacklogAnswers429(t *testing.T) {
	sm := newSimMesh(t, "a100-80g:1")
	n := sm.nodes[0]
	free := holdDriver(t, n)
	for range n.busyQueue() {
		if !n.post(func() {}) {
			t.Fatal("the driver's queue is full before half of it")
		}
	}
	_, err := n.Submit(context.Background(), sleeper("backlogged"))
	var he *api.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusTooManyRequests || he.RetryAfter <= 0 {
		t.Fatalf("submission behind %d inputs: %v, want a 429", n.busyQueue(), err)
	}
	free()
	eventually(t, 10*time.Second, "the driver works off its queue", func() bool { return len(n.inputs) < n.busyQueue() })
	if _, err := n.Submit(context.Background(), sleeper("backlogged")); err != nil {
		t.Fatalf("once the queue drained: %v", err)
	}
}
