package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// exec runs the command the owner signed inside the attempt and carries
// its terminal, or its stdin, stdout and stderr, as frames until it exits;
// then it sends its exit code. A client that goes away hangs the command
// up (SIGHUP, then SIGKILL after hangupGrace).
func (s *Service) exec(ctx context.Context, c Conn, req *Request, t *Target, log *slog.Logger) {
	var x wire.ExecRequest
	if err := decodeBody(req.Body, &x); err != nil {
		s.refuse(c, err)
		return
	}
	if err := CheckExec(&x); err != nil {
		s.refuse(c, err)
		return
	}
	if x.Share != req.Share {
		s.refuse(c, Errorf(http.StatusBadRequest, "job %s: the owner signed share %d, not %d", req.Job, x.Share, req.Share))
		return
	}
	fw := wire.NewWriter(c)
	// The command's output waits for the tunnel's answer: the client reads
	// the answer first, and a command that writes at once would otherwise
	// put its first frame before it (the client then read "a tunnel header
	// of 1862270976 bytes").
	answered := make(chan struct{})
	defer closeOnce(answered)
	xr := executor.ExecRequest{Command: x.Command, TTY: x.TTY, Rows: x.Rows, Cols: x.Cols}
	var stdin *os.File // the writing end of the command's stdin, nil without
	if x.TTY {
		term := x.Term
		if term == "" {
			term = "xterm"
		}
		xr.Env = map[string]string{"TERM": term}
	} else {
		xr.Stdout, xr.Stderr = gatedWriter{answered, fw.Stream(wire.Stdout)}, gatedWriter{answered, fw.Stream(wire.Stderr)}
		if x.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				s.refuse(c, err)
				return
			}
			defer r.Close()
			defer w.Close()
			xr.Stdin, stdin = r, w
		}
	}
	p, err := t.Attempt.Exec(xr)
	if err != nil {
		s.refuse(c, execError(req, err))
		return
	}
	if xr.Stdin != nil {
		xr.Stdin.(*os.File).Close() // the command holds its own copy
	}
	err = writeHeader(c, Response{Status: http.StatusOK, Epoch: t.Epoch})
	closeOnce(answered)
	if err != nil {
		p.Signal(syscall.SIGKILL)
		p.Wait()
		p.Close()
		abort(c)
		return
	}
	started := time.Now()
	log.Info("exec", "command", strings.Join(x.Command, " "), "tty", x.TTY, "pid", p.Pid())

	// The client's frames: input, resizes, signals. The goroutine ends when
	// the tunnel does (the client closes it, or it is aborted).
	input := make(chan error, 1)
	go func() { input <- pumpInput(c, p, stdin, log) }()
	// A terminal's output: read until the terminal has no writer left.
	output := make(chan struct{})
	if x.TTY {
		go func() {
			defer close(output)
			_, _ = io.Copy(fw.Stream(wire.Stdout), p.TTY())
		}()
	} else {
		close(output)
	}
	type exit struct {
		code int
		sig  string
	}
	exited := make(chan exit, 1)
	go func() {
		code, sig := p.Wait()
		exited <- exit{code, sig}
	}()

	var res exit
	clientGone, inputDone := false, false
	var kill *time.Timer
	hangup := func(why string, err error) {
		if clientGone {
			return
		}
		clientGone = true
		log.Info("exec: "+why+"; hanging up the command", "err", err)
		p.Signal(syscall.SIGHUP)
		kill = time.AfterFunc(hangupGrace, func() { p.Signal(syscall.SIGKILL) })
	}
	stopping := ctx.Done()
wait:
	for {
		select {
		case res = <-exited:
			break wait
		case err := <-input:
			inputDone = true
			hangup("the client went away", err)
		case <-stopping:
			stopping = nil
			hangup("the node is stopping", ctx.Err())
		}
	}
	if kill != nil {
		kill.Stop()
	}
	if x.TTY {
		// What the command wrote last is read, unless a process it left
		// behind keeps the terminal open.
		drain := time.AfterFunc(ttyDrain, func() { p.Close() })
		<-output
		drain.Stop()
	}
	p.Close()
	log.Info("exec ended", "command", strings.Join(x.Command, " "), "exit_code", res.code, "signal", res.sig,
		"seconds", time.Since(started).Round(time.Millisecond).Seconds())
	if !clientGone {
		_ = fw.Write(wire.Exit, wire.ExitData(res.code, res.sig))
		_ = c.CloseWrite()
		// The client closes once it has read the exit; one that does not
		// is cut off.
		wait := time.AfterFunc(exitAckWait, func() { abort(c) })
		<-input
		inputDone = true
		wait.Stop()
	}
	c.Close()
	if !inputDone {
		abort(c)
		<-input
	}
}

// execError turns an exec's failure into the answer the owner reads.
func execError(req *Request, err error) error {
	msg := strings.TrimPrefix(err.Error(), "executor: exec: ")
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Field: "command", Msg: fmt.Sprintf("job %s share %d: %s", req.Job, req.Share, strings.TrimPrefix(msg, "exec: "))}
	case errors.Is(err, executor.ErrAttemptEnded):
		return Errorf(http.StatusConflict, "job %s share %d: its attempt has ended", req.Job, req.Share)
	}
	return Errorf(http.StatusInternalServerError, "job %s share %d: %s", req.Job, req.Share, msg)
}

// pumpInput applies the client's frames to the process until the tunnel
// ends; it returns why it ended.
func pumpInput(c Conn, p *executor.Process, stdin *os.File, log *slog.Logger) error {
	fr := wire.NewReader(c)
	for {
		f, err := fr.Read()
		if err != nil {
			if stdin != nil {
				stdin.Close()
			}
			if err == io.EOF {
				return io.EOF
			}
			return err
		}
		switch f.Type {
		case wire.Stdin:
			switch {
			case p.TTY() != nil:
				_, err = p.TTY().Write(f.Data)
			case stdin != nil:
				_, err = stdin.Write(f.Data)
			}
			if err != nil {
				log.Debug("exec: input not delivered", "err", err)
			}
		case wire.StdinEOF:
			if stdin != nil {
				stdin.Close()
				stdin = nil
			}
		case wire.Resize:
			rows, cols, err := wire.ParseResize(f.Data)
			if err == nil {
				err = p.Resize(rows, cols)
			}
			if err != nil {
				log.Debug("exec: resize", "err", err)
			}
		case wire.Signal:
			if sig, ok := signalNamed(string(f.Data)); ok {
				p.Signal(sig)
			}
		default:
			log.Debug("exec: unknown frame from the client", "type", string(rune(f.Type)))
		}
	}
}

// signalNamed maps a Signal frame's name to the signal.
func signalNamed(name string) (syscall.Signal, bool) {
	if !slices.Contains(wire.Signals, name) {
		return 0, false
	}
	return map[string]syscall.Signal{
		"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT,
		"KILL": syscall.SIGKILL, "USR1": usr1, "USR2": usr2,
	}[name], true
}

// gatedWriter holds each write until open is closed.
type gatedWriter struct {
	open <-chan struct{}
	w    io.Writer
}

func (g gatedWriter) Write(b []byte) (int, error) {
	<-g.open
	return g.w.Write(b)
}

// closeOnce closes ch unless it is closed already (one goroutine only).
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
