package fence

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// wait is how long a test waits for what must happen; it is long because
// the tests share a loaded machine, and only a failing test waits it out.
const wait = 15 * time.Second

// served is a keeper loop run in this process on pipes, with a kill that
// only records what it was asked to kill.
type served struct {
	t      *testing.T
	in     *io.PipeWriter
	events chan string // lines the keeper wrote; closed at its end
	kills  chan target
	code   chan int
}

// refusedPGID stands for the keeper's or the node's own group.
const refusedPGID = 99

func serveInProcess(t *testing.T, maxKeys int) *served {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &served{t: t, in: inW, events: make(chan string, 100), kills: make(chan target, 100), code: make(chan int, 1)}
	srv := server{
		kill:       func(tg target) error { s.kills <- tg; return nil },
		refuse:     func(pgid int) bool { return pgid == refusedPGID },
		maxKeys:    maxKeys,
		flushGrace: wait,
	}
	go func() {
		s.code <- srv.serve(inR, outW)
		outW.Close()
	}()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(s.events)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			s.events <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		inW.Close() // ends the loop if the test did not
		<-readerDone
	})
	if got := s.next(); got != "ready 1" {
		t.Fatalf("first line %q, want ready 1", got)
	}
	return s
}

func (s *served) send(lines ...string) {
	s.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(s.in, l); err != nil {
			s.t.Fatal(err)
		}
	}
}

// next returns the next event line, "" after the last.
func (s *served) next() string {
	s.t.Helper()
	select {
	case e := <-s.events:
		return e
	case <-time.After(wait):
		s.t.Fatal("no event")
		return ""
	}
}

// kill returns the next target the keeper killed.
func (s *served) kill() target {
	s.t.Helper()
	select {
	case tg := <-s.kills:
		return tg
	case <-time.After(wait):
		s.t.Fatal("nothing killed")
		return target{}
	}
}

func (s *served) exit() int {
	s.t.Helper()
	select {
	case c := <-s.code:
		return c
	case <-time.After(wait):
		s.t.Fatal("the keeper loop did not return")
		return -1
	}
}

func TestServeAnswersMalformedLinesAndGoesOn(t *testing.T) {
	s := serveInProcess(t, MaxKeys)
	bad := []struct{ line, want string }{
		{"arm k 1 - 10\n", `error arm k: pgid "1": want a decimal integer from 2`},
		{"arm k 5 - 1e3\n", `error arm k: millis "1e3"`},
		{"arm k 5 cg 10\n", `error arm k: cgroup dir "cg"`},
		{"disarm\n", "error disarm: want 1 argument (KEY), got 0"},
		{"stop\n", `error unknown command "stop" (want arm, prearm, disarm or close)`},
		{"close\r\n", `error unknown command "close\r"`},
		{"\n", "error empty line"},
		{strings.Repeat("a", 2*MaxLine) + "\n", "error line longer than 4096 bytes"},
		{fmt.Sprintf("arm k %d - 10\n", refusedPGID), "error arm k: pgid 99 is the keeper's or the node's own process group"},
	}
	for _, b := range bad {
		s.send(b.line)
		if got := s.next(); !strings.HasPrefix(got, b.want) {
			t.Errorf("%.30q: event %q, want %q...", b.line, got, b.want)
		}
	}
	select {
	case tg := <-s.kills:
		t.Fatalf("a malformed line killed %+v", tg)
	default:
	}
	// Still working: nothing of the bad lines was armed, the good one is.
	s.send("arm k 4242 /sys/fs/cgroup/x 0\n")
	if got := s.next(); got != "fenced k" {
		t.Fatalf("after the bad lines: %q, want fenced k", got)
	}
	if tg := s.kill(); tg != (target{pgid: 4242, cgroup: "/sys/fs/cgroup/x"}) {
		t.Fatalf("killed %+v", tg)
	}
	s.send("close\n")
	if c := s.exit(); c != ExitClosed {
		t.Fatalf("exit %d after close, want %d", c, ExitClosed)
	}
}

func TestServeFencesInDeadlineOrder(t *testing.T) {
	s := serveInProcess(t, MaxKeys)
	// c is moved earlier than a and b, d later than all, e disarmed.
	s.send("arm a 10 - 200\n", "arm b 11 - 300\n", "arm c 12 - 5000\n", "arm d 13 - 100\n", "arm e 14 - 50\n",
		"arm c 12 - 100\n", "arm d 13 - 400\n", "disarm e\n", "disarm unknown\n")
	for _, want := range []string{"fenced c", "fenced a", "fenced b", "fenced d"} {
		if got := s.next(); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	for _, want := range []int{12, 10, 11, 13} {
		if tg := s.kill(); tg.pgid != want {
			t.Fatalf("killed group %d, want %d", tg.pgid, want)
		}
	}
	s.send("close\n")
	if c := s.exit(); c != ExitClosed {
		t.Fatalf("exit %d", c)
	}
}

func TestServeKeyLimit(t *testing.T) {
	s := serveInProcess(t, 2)
	s.send("arm a 10 - 60000\n", "arm b 11 - 60000\n", "arm c 12 - 60000\n")
	if got := s.next(); got != "error arm c: too many attempts armed: 2 is the limit" {
		t.Fatalf("a third key: %q", got)
	}
	// Keys already held may still move; a freed slot takes a new key.
	s.send("arm a 10 - 0\n")
	if got := s.next(); got != "fenced a" {
		t.Fatalf("%q, want fenced a", got)
	}
	s.send("arm c 12 - 0\n")
	if got := s.next(); got != "fenced c" {
		t.Fatalf("%q, want fenced c", got)
	}
	s.send("close\n")
	s.exit()
}

// The end of the input without close is the node's death: everything armed
// is killed, nothing is said.
func TestServeEndOfInputKillsEverything(t *testing.T) {
	for _, tail := range []string{"", "clo"} { // a clean end, a torn last line
		s := serveInProcess(t, MaxKeys)
		s.send("arm a 10 - 60000\n", "arm b 11 /cg/b 60000\n", "arm c 12 - 60000\n", "disarm c\n", tail)
		s.in.Close()
		if c := s.exit(); c != ExitNodeLost {
			t.Fatalf("tail %q: exit %d, want %d", tail, c, ExitNodeLost)
		}
		got := map[target]bool{s.kill(): true, s.kill(): true}
		if !got[target{pgid: 10}] || !got[target{pgid: 11, cgroup: "/cg/b"}] || len(s.kills) != 0 {
			t.Fatalf("tail %q: killed %v, want groups 10 and 11 (with its cgroup)", tail, got)
		}
		if e, ok := <-s.events; ok {
			t.Fatalf("tail %q: event %q after the node was lost", tail, e)
		}
	}
}

// A prearmed key is killed by its marker when its deadline passes; one
// armed afterwards with its group is killed by its group, the marker gone.
func TestServePrearmIsReplacedByArm(t *testing.T) {
	s := serveInProcess(t, MaxKeys)
	s.send("prearm p 50\n", "prearm q 5000\n", "arm q 12 - 100\n")
	for _, want := range []string{"fenced p", "fenced q"} {
		if got := s.next(); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	for _, want := range []target{{marker: "p"}, {pgid: 12}} {
		if tg := s.kill(); tg != want {
			t.Fatalf("killed %+v, want %+v", tg, want)
		}
	}
	s.send("close\n")
	if c := s.exit(); c != ExitClosed {
		t.Fatalf("exit %d", c)
	}
}
