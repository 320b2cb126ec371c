package node

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// logTail keeps the last lines the nodes of a test mesh logged, so that a
// test that fails (most often under the load of the whole suite, where it
// cannot be rerun with GPUMESH_TEST_LOG) shows what the nodes did.
type logTail struct {
	mu    sync.Mutex
	lines []string
	next  int // where the next line goes once lines is full
}

// logTailLines bounds what a failing test prints.
const logTailLines = 300

// Write takes one record of a slog.TextHandler.
func (l *logTail) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < logTailLines {
		l.lines = append(l.lines, line)
	} else {
		l.lines[l.next] = line
		l.next = (l.next + 1) % logTailLines
	}
	return len(p), nil
}

// last returns the lines kept, oldest first.
func (l *logTail) last() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(append([]string(nil), l.lines[l.next:]...), l.lines[:l.next]...)
}

// meshLogger is the logger of a test mesh's nodes: stderr when
// GPUMESH_TEST_LOG is set, otherwise info and above kept in a tail that
// t prints if it fails.
func meshLogger(t *testing.T) *slog.Logger {
	if l := testLogger(); l != nil {
		return l
	}
	tail := &logTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last %d lines the nodes logged:\n%s", logTailLines, strings.Join(tail.last(), "\n"))
		}
	})
	return slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func TestLogTailKeepsTheLastLines(t *testing.T) {
	tail := &logTail{}
	for i := range logTailLines + 5 {
		_, _ = tail.Write([]byte(strings.Repeat("x", i%3) + "line\n"))
	}
	got := tail.last()
	if len(got) != logTailLines {
		t.Fatalf("kept %d lines, want %d", len(got), logTailLines)
	}
	// The oldest kept is line 5 (5%3 = 2 x's), the newest line 304 (1 x).
	if got[0] != "xxline" || got[len(got)-1] != "xline" {
		t.Errorf("kept %q … %q, want the last lines oldest first", got[0], got[len(got)-1])
	}
}
