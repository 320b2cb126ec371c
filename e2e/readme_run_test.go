//go:build unix

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
)

// readmeRun runs the README's commands as a user would type them: in bash,
// with a HOME of its own (so ~/gpumesh-a and ~/.config/gpumesh/owner.key
// are the test's), gpumesh first on $PATH, in a working directory holding
// the files the examples name (./train, owner.token), against the nodes
// the README's own `gpumesh node` lines start.
type readmeRun struct {
	t        *testing.T
	home     string // $HOME of every command and node
	work     string // the working directory of every command
	bin      string // holds gpumesh, first on the commands' $PATH
	standIns string // the programs the examples' jobs run; first on the nodes' $PATH
	nodes    []*proc
	api      string           // $GPUMESH_API: the first node's API
	assigns  map[int][]string // the shell assignments seen so far, by block
	key      owner.Key        // the owner key `gpumesh key create` made
	ownerID  string
	lastJob  string   // what JOB_ID stands for: the ID the last submit printed
	jobs     []string // every ID a README submit printed
	gangJob  string   // the gang example's job
	// gangSupplier ran a share of the gang for a coordinator elsewhere
	gangSupplier *proc
	svcJob       string // the inference service of the recipes
	twoShare     string // the job of two shares the exec examples reach into
	ports        map[string]int
	procs        []*readmeProc // started by the latest command
	printed      string        // what the latest command printed, for the log
}

// readmeTimeout bounds one command that should end by itself.
const readmeTimeout = 30 * time.Second

func newReadmeRun(t *testing.T) *readmeRun {
	root := t.TempDir()
	r := &readmeRun{t: t, home: filepath.Join(root, "home"), work: filepath.Join(root, "work"),
		bin: filepath.Join(root, "bin"), standIns: filepath.Join(root, "stand-ins"),
		assigns: map[int][]string{}, ports: map[string]int{}}
	for _, d := range []string{r.home, r.work, r.bin, r.standIns} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(binary, filepath.Join(r.bin, "gpumesh")); err != nil {
		t.Fatal(err)
	}
	for _, s := range readmeStandIns {
		script := "#!/bin/sh\n" + strings.ReplaceAll(s.script, "REPLICA", replicaBinary) + "\n"
		if err := os.WriteFile(filepath.Join(r.standIns, s.name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range readmeFiles {
		p := filepath.Join(r.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// curl prints the HTTP status after each answer, so that the test can
	// check it (curl -s shows no error for a 4xx).
	if err := os.WriteFile(filepath.Join(r.home, ".curlrc"), []byte(`write-out = "\n`+curlStatusMark+`%{http_code}\n"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// curlStatusMark starts the line that ~/.curlrc makes curl print last.
const curlStatusMark = "curl-http-status: "

// port is a free loopback port, the same for one name all along.
func (r *readmeRun) port(name string) int {
	if p, ok := r.ports[name]; ok {
		return p
	}
	r.ports[name] = freePort(r.t)
	return r.ports[name]
}

// env is the commands' environment: the test's, less anything that would
// point gpumesh elsewhere.
func (r *readmeRun) env(pathFirst string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" || strings.HasPrefix(k, "GPUMESH_") || strings.HasPrefix(k, "XDG_") || strings.HasPrefix(k, "CURL_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+r.home, "PATH="+pathFirst+string(os.PathListSeparator)+os.Getenv("PATH"), "TERM=xterm")
	if r.api != "" {
		env = append(env, "GPUMESH_API="+r.api)
	}
	return env
}

// script is c's line (after substitutions) after the assignments of its
// block.
func (r *readmeRun) script(c readmeCmd, line string) string {
	return strings.Join(append(append([]string{}, r.assigns[c.Block]...), line), "\n")
}

// shell makes a bash running script in the working directory.
func (r *readmeRun) shell(ctx context.Context, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = r.work, r.env(r.bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// run runs c's line to its end and returns what it printed and its exit
// status; one that runs past readmeTimeout fails the test.
func (r *readmeRun) run(c readmeCmd, line string) (stdout, stderr string, code int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readmeTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := r.shell(ctx, r.script(c, line))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r.printed = out.String() + errOut.String()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.t.Fatalf("%s: still running after %v (a command that does not end by itself needs a rule in readmeRules, or an entry in readmeSkips); it printed:\n%s%s", c, readmeTimeout, out.String(), errOut.String())
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		r.t.Fatalf("%s: %v", c, err)
	}
	return out.String(), errOut.String(), code
}

// mustRun runs c's line and fails the test unless it exits with want.
func (r *readmeRun) mustRun(c readmeCmd, line string, want int) (stdout, stderr string) {
	r.t.Helper()
	stdout, stderr, code := r.run(c, line)
	if code != want {
		r.t.Fatalf("%s\n  ran: %s\n  exit status %d, want %d; stdout:\n%s\nstderr:\n%s", c, line, code, want, stdout, stderr)
	}
	return stdout, stderr
}

// words is c's line split into words and expanded by bash, as it would
// run them.
func (r *readmeRun) words(c readmeCmd, line string) []string {
	r.t.Helper()
	printed := r.printed
	defer func() { r.printed = printed }() // the words are not what the command prints
	out, stderr := r.mustRun(c, "printf '%s\\0' "+line, 0)
	if stderr != "" {
		r.t.Fatalf("%s: expanding it: %s", c, stderr)
	}
	return strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
}

// cli runs gpumesh as the README's user, for the test's own look at the
// outcome of a line.
func (r *readmeRun) cli(args ...string) (stdout, stderr string, code int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readmeTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir, cmd.Env = r.work, r.env(r.bin)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		r.t.Fatalf("gpumesh %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// record reads a job's record from the first node, signed with the
// README's owner key.
func (r *readmeRun) record(id string) (market.JobRecord, error) {
	var rec market.JobRecord
	path := "/v1/jobs/" + id
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+r.api+path, nil)
	if err != nil {
		return rec, err
	}
	req.Header.Set(owner.Header, owner.SignRequest(r.key, http.MethodGet, path, nil, time.Now()).HeaderValue())
	resp, err := client.Do(req)
	if err != nil {
		return rec, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return rec, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return rec, json.NewDecoder(resp.Body).Decode(&rec)
}

// waitJob polls a job's record until cond holds.
func (r *readmeRun) waitJob(id, what string, cond func(market.JobRecord) bool) market.JobRecord {
	r.t.Helper()
	var rec market.JobRecord
	var last error
	deadline := time.Now().Add(readmeTimeout)
	for {
		rec, last = r.record(id)
		if last == nil && cond(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("job %s: not %s after %v (last: %v; state %s, %s)", id, what, readmeTimeout, last, rec.State, rec.Reason)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// runningJob waits until every share of the job runs its process (a
// service's replicas: and answers its readiness probe).
func (r *readmeRun) runningJob(id string) market.JobRecord {
	r.t.Helper()
	return r.waitJob(id, "running", func(rec market.JobRecord) bool {
		if rec.State != market.JobRunning {
			return false
		}
		n := 0
		for _, p := range rec.Placements {
			if p.State != market.PlacementRunning {
				continue
			}
			if p.StartedAt.IsZero() || (rec.Spec.Service != nil && !p.Ready) {
				return false
			}
			n++
		}
		return n > 0
	})
}

// endedJob waits until the job has ended and none of its shares runs.
func (r *readmeRun) endedJob(id string) market.JobRecord {
	r.t.Helper()
	return r.waitJob(id, "ended with every share stopped", func(rec market.JobRecord) bool {
		if !rec.State.Terminal() {
			return false
		}
		for _, p := range rec.Placements {
			if p.State.Live() {
				return false
			}
		}
		return true
	})
}

// readmeProc is a README command that runs until stopped.
type readmeProc struct {
	c      readmeCmd
	cmd    *exec.Cmd
	lines  chan string // what it prints (stdout; with a terminal, both)
	stderr *syncBuffer
	term   *os.File // its terminal, when it has one
	done   chan struct{}
	seen   []string
}

// start starts c's line (exec'd by bash, so that signals reach it), with a
// terminal when tty.
func (r *readmeRun) start(c readmeCmd, line string, tty bool) *readmeProc {
	r.t.Helper()
	p := &readmeProc{c: c, lines: make(chan string, 256), stderr: &syncBuffer{}, done: make(chan struct{})}
	r.procs = append(r.procs, p)
	p.cmd = r.shell(context.Background(), r.script(c, "exec "+line))
	var out io.Reader
	if tty {
		p.cmd.SysProcAttr = nil // pty.Start makes it a session leader
		term, err := pty.StartWithSize(p.cmd, &pty.Winsize{Rows: 40, Cols: 120})
		if err != nil {
			r.t.Fatal(err)
		}
		p.term, out = term, term
	} else {
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			r.t.Fatal(err)
		}
		p.cmd.Stderr = p.stderr
		if err := p.cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		out = stdout
	}
	go func() { // reads what it prints until it exits, then reaps it
		defer close(p.done)
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case p.lines <- strings.TrimRight(s.Text(), "\r"):
			default: // past what the test reads
			}
		}
		close(p.lines)
		p.cmd.Wait()
	}()
	r.t.Cleanup(func() {
		if p.term != nil {
			p.term.Close()
		}
		select {
		case <-p.done:
		default:
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// expect waits for a line that match accepts, and returns it.
func (p *readmeProc) expect(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.After(readmeTimeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s: it ended before printing %s; it printed:\n%s\nstderr:\n%s", p.c, what, strings.Join(p.seen, "\n"), p.stderr.String())
			}
			p.seen = append(p.seen, l)
			if match(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("%s: no %s after %v; it printed:\n%s\nstderr:\n%s", p.c, what, readmeTimeout, strings.Join(p.seen, "\n"), p.stderr.String())
		}
	}
}

// running fails the test if the command has ended by itself.
func (p *readmeProc) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s ended by itself (exit status %d); it should run until stopped; stderr:\n%s", p.c, p.cmd.ProcessState.ExitCode(), p.stderr.String())
	default:
	}
}

// interrupt sends SIGINT, as Ctrl-C does, and returns the exit status.
// (A program that leaves SIGINT as it found it, such as curl, keeps
// running when the test was started with SIGINT ignored, as `go test &`
// does: stop it instead.)
func (p *readmeProc) interrupt(t *testing.T) int {
	t.Helper()
	return p.signal(t, syscall.SIGINT)
}

// stop ends it with SIGTERM and returns the exit status.
func (p *readmeProc) stop(t *testing.T) int {
	t.Helper()
	return p.signal(t, syscall.SIGTERM)
}

func (p *readmeProc) signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	p.running(t)
	p.cmd.Process.Signal(sig)
	go func() { // drains what it prints while it stops
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(readmeTimeout):
		t.Fatalf("%s: still running %v after %v", p.c, readmeTimeout, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// wait waits for it to exit by itself and returns its exit status.
func (p *readmeProc) wait(t *testing.T) int {
	t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(readmeTimeout):
		t.Fatalf("%s: still running after %v", p.c, readmeTimeout)
	}
	return p.cmd.ProcessState.ExitCode()
}
