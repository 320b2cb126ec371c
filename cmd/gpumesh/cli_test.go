package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api/client/clienttest"
)

// fakeNode is a fake node API for the commands under test: the real api.Handler
// over an in-memory backend on a loopback port.
type fakeNode struct {
	t    *testing.T
	b    *clienttest.Backend
	addr string
	env  map[string]string
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	b := clienttest.New()
	srv := b.Serve(t, "")
	return &fakeNode{t: t, b: b, addr: srv.Listener.Addr().String(), env: map[string]string{envAPI: srv.Listener.Addr().String(), envKey: testKeyFile(t)}}
}

// run runs a gpumesh command line against the node (GPUMESH_API points at
// it) and returns its exit status, stdout and stderr.
func (n *fakeNode) run(args ...string) (int, string, string) {
	n.t.Helper()
	var stdout, stderr bytes.Buffer
	code := n.runTo(context.Background(), &stdout, &stderr, args...)
	return code, stdout.String(), stderr.String()
}

func (n *fakeNode) runTo(ctx context.Context, stdout, stderr io.Writer, args ...string) int {
	return runEnv(ctx, args, env{
		stdin: strings.NewReader(""), stdout: stdout, stderr: stderr,
		getenv: func(k string) string { return n.env[k] },
	})
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

// oneLineErr checks that stderr is exactly one line starting with
// "gpumesh: " and holding every want.
func oneLineErr(t *testing.T, what, stderr string, want ...string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "gpumesh: ") {
		t.Errorf("%s: stderr is not one gpumesh line: %q", what, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: stderr %q lacks %q", what, stderr, w)
		}
	}
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

// table splits a table's output into rows of fields (runs of two or more
// spaces separate columns, so a cell may hold one space).
func table(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var cells []string
		for _, c := range strings.Split(line, "  ") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		rows = append(rows, cells)
	}
	return rows
}

// column returns the cell under header name in row, from a table whose
// first row is the header.
func column(t *testing.T, rows [][]string, row int, name string) string {
	t.Helper()
	for i, h := range rows[0] {
		if h == name {
			if i >= len(rows[row]) {
				t.Fatalf("row %d has no %s column: %q", row, name, rows[row])
			}
			return rows[row][i]
		}
	}
	t.Fatalf("no column %q in header %q", name, rows[0])
	return ""
}
