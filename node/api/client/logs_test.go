package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
)

func TestLogs(t *testing.T) {
	b, c := newClient(t, "")
	b.AddJob(placed(rec("j1", market.JobRunning, 1), 0, 1))
	b.SetLog("j1", 0, "stdout", "hello\nworld\n")
	b.SetLog("j1", 1, "stderr", "oops on share 1\n")
	ctx := context.Background()
	cases := []struct {
		req  api.LogRequest
		want string
	}{
		{api.LogRequest{Job: "j1"}, "hello\nworld\n"},
		{api.LogRequest{Job: "j1", Offset: 6}, "world\n"},
		{api.LogRequest{Job: "j1", Share: 1, Stream: "stderr"}, "oops on share 1\n"},
	}
	for _, tc := range cases {
		var out bytes.Buffer
		n, err := c.Logs(ctx, tc.req, &out)
		if err != nil || out.String() != tc.want || n != int64(len(tc.want)) {
			t.Errorf("%+v: %q (%d), %v", tc.req, out.String(), n, err)
		}
	}
	_, err := c.Logs(ctx, api.LogRequest{Job: "j1", Share: 7}, io.Discard)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Field != "share" {
		t.Errorf("missing share: %v", err)
	}
	b.AddJob(rec("j2", market.JobPending, 0))
	_, err = c.Logs(ctx, api.LogRequest{Job: "j2"}, io.Discard)
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Field != "" || !strings.Contains(ae.Message, "not been placed yet") {
		t.Errorf("unplaced job: %v", err)
	}
	_, err = c.Logs(ctx, api.LogRequest{Job: "j1", Stream: "stdin"}, io.Discard)
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != "stream" {
		t.Errorf("bad stream: %v", err)
	}
}

// A request for one attempt's output names its epoch; an epoch the share
// never had is a 404 on "epoch".
func TestLogsOfOneAttempt(t *testing.T) {
	b, c := newClient(t, "")
	r := placed(rec("j1", market.JobRunning, 2), 0)
	r.Placements = append(r.Placements, market.Placement{Share: 0, Epoch: 2, Node: "n2", State: market.PlacementRunning, StartedAt: time.Now()})
	r.Placements[0].State = market.PlacementLost
	b.AddJob(r)
	b.SetLog("j1", 0, "stdout", "second\n")
	b.SetAttemptLog("j1", 0, 1, "stdout", "first\n")
	b.SetAttemptLog("j1", 0, 2, "stdout", "second\n")
	ctx := context.Background()
	for epoch, want := range map[uint64]string{0: "second\n", 1: "first\n", 2: "second\n"} {
		var out bytes.Buffer
		if _, err := c.Logs(ctx, api.LogRequest{Job: "j1", Epoch: epoch}, &out); err != nil || out.String() != want {
			t.Errorf("epoch %d: %q, %v; want %q", epoch, out.String(), err, want)
		}
	}
	_, err := c.Logs(ctx, api.LogRequest{Job: "j1", Epoch: 3}, io.Discard)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Field != "epoch" {
		t.Errorf("epoch 3: %v, want a 404 on epoch", err)
	}
}

// placed gives r a running placement of each share.
func placed(r market.JobRecord, shares ...int) market.JobRecord {
	for _, sh := range shares {
		r.Placements = append(r.Placements, market.Placement{Share: sh, Epoch: 1, Node: "n1", State: market.PlacementRunning, StartedAt: time.Now()})
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Following delivers each chunk as the node sends it, before the next one
// exists, and returns when the attempt ends.
func TestLogsFollow(t *testing.T) {
	b, c := newClient(t, "")
	b.AddJob(placed(rec("j1", market.JobRunning, 1), 0))
	b.SetLog("j1", 0, "stdout", "step 1\n")
	feed := b.Feed("j1", 0, "stdout")
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Logs(context.Background(), api.LogRequest{Job: "j1", Follow: true}, &out)
		done <- err
	}()
	waitFor(t, "the stored output", func() bool { return out.String() == "step 1\n" })
	feed <- []byte("step 2\n")
	waitFor(t, "the first fed chunk", func() bool { return out.String() == "step 1\nstep 2\n" })
	feed <- []byte("step 3\n")
	close(feed)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "step 1\nstep 2\nstep 3\n" {
		t.Errorf("followed %q", got)
	}
}

func TestLogsFollowEndsWithContext(t *testing.T) {
	b, c := newClient(t, "")
	b.AddJob(placed(rec("j1", market.JobRunning, 1), 0))
	b.SetLog("j1", 0, "stdout", "started\n")
	b.Feed("j1", 0, "stdout")
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := c.Logs(ctx, api.LogRequest{Job: "j1", Follow: true}, &out)
		done <- err
	}()
	waitFor(t, "the stream to start", func() bool { return out.String() == "started\n" })
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "j1") {
		t.Errorf("err = %v", err)
	}
}
