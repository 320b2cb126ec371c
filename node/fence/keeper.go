package fence

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"
)

// Exit statuses of Main.
const (
	ExitClosed      = 0 // the node sent close: nothing was killed on the way out
	ExitNodeLost    = 1 // stdin ended or failed without close: every armed attempt was killed
	ExitUnsupported = 2 // this platform has no process groups: the keeper did not run
)

// Subcommand is the hidden first argument that makes the gpumesh binary run
// Main instead of its command line (see Command).
const Subcommand = "__fence-keeper"

// Main is the keeper process: it reads commands from stdin and writes events
// to stdout until the node sends close (it returns ExitClosed) or stdin ends
// without close (the node died: it kills every armed attempt and returns
// ExitNodeLost). The protocol is in the package doc.
//
// Main is meant to be the whole of a process: it makes the process ignore
// SIGPIPE (a write to a node that died must fail, not end the keeper before
// it has fenced), and SIGHUP, SIGINT and SIGTERM (its life is tied to its
// stdin, not to signals meant for the node: only SIGKILL ends it early). It
// never blocks on stdout: events wait in a bounded queue and are dropped,
// counted, when the node does not read them (a frozen node).
func Main(stdin io.Reader, stdout io.Writer) int {
	if !supported {
		_, _ = stdout.Write(errorEvent(errUnsupported).appendLine(nil))
		return ExitUnsupported
	}
	ignoreSignals()
	refuse := protectedGroups()
	kill := func(t target) error { return killTarget(t, refuse) }
	s := server{kill: kill, refuse: refuse, maxKeys: MaxKeys, flushGrace: flushGrace}
	return s.serve(stdin, stdout)
}

const (
	// eventQueueLen is how many events wait for a slow node before the keeper
	// drops them.
	eventQueueLen = 1024
	// flushGrace is how long the keeper waits, on its way out, for the
	// events it queued to be written.
	flushGrace = 2 * time.Second
)

// server is the keeper's loop, with what it touches of the system injected.
type server struct {
	kill       func(target) error // kills a target; a target already gone is no error
	refuse     func(pgid int) bool
	maxKeys    int
	flushGrace time.Duration
}

// input is what the reading goroutine hands the loop: a command received at
// a time, a line it could not decode, or the end of the input.
type input struct {
	cmd command
	at  time.Time // when the line was read: deadlines count from here
	bad error     // the line was malformed
	end error     // the input ended (io.EOF) or failed; nothing follows
}

func (s server) serve(stdin io.Reader, stdout io.Writer) int {
	out := newEventQueue(stdout)
	out.emit(event{kind: eventReady, version: Version})

	inputs := make(chan input)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		readCommands(stdin, inputs)
	}()

	code := s.loop(inputs, out)
	<-readerDone // it stopped after the close or the end it sent
	out.close(s.flushGrace)
	return code
}

// loop applies commands and fences what falls due until the node sends
// close or the input ends.
func (s server) loop(inputs <-chan input, out *eventQueue) int {
	tbl := newTable(s.maxKeys)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if d, ok := tbl.next(); ok {
			timer.Reset(time.Until(d))
			due = timer.C
		} else {
			timer.Stop()
		}
		select {
		case in := <-inputs:
			if code, done := s.take(tbl, in, out); done {
				return code
			}
		case <-due:
			// A re-arm the node sent before the deadline may be waiting
			// beside the timer (select picks either at random): apply what
			// has arrived first, so that no attempt is killed on a lease
			// its node had already renewed.
			if code, done := s.applyPending(tbl, inputs, out); done {
				return code
			}
			for _, a := range tbl.due(time.Now()) {
				s.fence(a, out)
			}
		}
	}
}

// applyPending applies the inputs already waiting, without blocking. done
// is true when one of them ends the keeper, with its exit code.
func (s server) applyPending(tbl *table, inputs <-chan input, out *eventQueue) (code int, done bool) {
	for {
		select {
		case in := <-inputs:
			if code, done := s.take(tbl, in, out); done {
				return code, true
			}
		default:
			return 0, false
		}
	}
}

// take handles one input; done is true when it ends the keeper.
func (s server) take(tbl *table, in input, out *eventQueue) (code int, done bool) {
	switch {
	case in.end != nil:
		// The node is gone (or its pipe is broken, which is no
		// different from here): fence everything it held, unasked.
		for _, a := range tbl.drain() {
			_ = s.kill(a.target)
		}
		return ExitNodeLost, true
	case in.bad != nil:
		out.emit(errorEvent(in.bad))
	case in.cmd.verb == verbClose:
		return ExitClosed, true
	default:
		s.apply(tbl, in, out)
	}
	return 0, false
}

func (s server) apply(tbl *table, in input, out *eventQueue) {
	c := in.cmd
	switch c.verb {
	case verbArm, verbPrearm:
		tg := target{marker: c.key} // prearm: found by its environment
		if c.verb == verbArm {
			if s.refuse(c.pgid) {
				out.emit(errorEvent(fmt.Errorf("arm %s: pgid %d is the keeper's or the node's own process group", c.key, c.pgid)))
				return
			}
			tg = target{pgid: c.pgid, cgroup: c.cgroup}
		}
		if err := tbl.arm(c.key, tg, in.at.Add(c.within)); err != nil {
			out.emit(errorEvent(fmt.Errorf("%s %s: %w: %d is the limit", c.verb, c.key, err, s.maxKeys)))
		}
	case verbDisarm:
		// An unknown key is no error: the fence and the disarm may cross.
		tbl.disarm(c.key)
	}
}

// fence kills a's target and reports it. A kill that failed is reported
// as an error before the fenced event: the key is forgotten either way.
func (s server) fence(a armed, out *eventQueue) {
	if err := s.kill(a.target); err != nil {
		out.emit(errorEvent(fmt.Errorf("fence %s: %w", a.key, err)))
	}
	out.emit(event{kind: eventFenced, key: a.key})
}

// readCommands decodes lines from r onto inputs until a close command or
// the end of r, which it sends too before it returns.
func readCommands(r io.Reader, inputs chan<- input) {
	br := bufio.NewReaderSize(r, MaxLine)
	for {
		line, err := readLine(br)
		at := time.Now()
		switch {
		case errors.Is(err, errLineTooLong):
			inputs <- input{at: at, bad: err}
			continue
		case err != nil:
			inputs <- input{at: at, end: err}
			return
		}
		c, err := parseCommand(line)
		if err != nil {
			inputs <- input{at: at, bad: err}
			continue
		}
		inputs <- input{cmd: c, at: at}
		if c.verb == verbClose {
			return
		}
	}
}

// eventQueue writes events to the node from a goroutine of its own, so that
// a node that does not read (frozen) never holds up a fence.
type eventQueue struct {
	ch      chan []byte
	done    chan struct{}
	dropped int // events dropped while the queue was full; owned by emit's caller
}

func newEventQueue(w io.Writer) *eventQueue {
	q := &eventQueue{ch: make(chan []byte, eventQueueLen), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		for line := range q.ch {
			if _, err := w.Write(line); err != nil {
				break // the node is gone: nobody to tell
			}
		}
		for range q.ch {
		}
	}()
	return q
}

// emit queues e, or drops and counts it when the queue is full. Once there
// is room again, the count goes first as an error event.
func (q *eventQueue) emit(e event) {
	if q.dropped > 0 {
		note := errorEvent(fmt.Errorf("%d events dropped: the node did not read them", q.dropped))
		select {
		case q.ch <- note.appendLine(nil):
			q.dropped = 0
		default:
			q.dropped++
			return
		}
	}
	select {
	case q.ch <- e.appendLine(nil):
	default:
		q.dropped++
	}
}

// close ends the queue and waits up to grace for what it holds to be
// written. Past grace the writing goroutine is left blocked on a node that
// does not read; the process is about to exit.
func (q *eventQueue) close(grace time.Duration) {
	close(q.ch)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-q.done:
	case <-t.C:
	}
}
