//go:build linux

package executor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startHelperJob starts an attempt whose work dir holds this test binary
// as ./helper (the helper program of helper_unix_test.go, which the job
// and its execs can run in either isolation), running script under bash,
// and waits until the script has written ready.txt.
func startHelperJob(t *testing.T, ex *Executor, id, script string, limits Limits) *Run {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	a := Attempt{JobID: id, Command: []string{"bash", "-c", script}, Limits: limits,
		Work: writeFiles(map[string]string{"helper": string(self)})}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(r.WorkDir(), "ready.txt")); err == nil {
			return r
		}
		select {
		case <-r.Done():
			t.Fatalf("the job ended before it was ready: %+v\n%s", r.Result(), r.Tail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is not ready after 10s:\n%s", r.Tail())
		}
		time.Sleep(10 * time.Millisecond) // polling a file the job writes
	}
}

// execOutput runs an exec without a terminal and returns its stdout,
// stderr and exit code.
func execOutput(t *testing.T, r *Run, stdin string, env map[string]string, cmd ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	p, err := r.Exec(ExecRequest{Command: cmd, Env: env, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	code, _ := p.Wait()
	return out.String(), errOut.String(), code
}

func TestExecRunsInsideTheAttempt(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		// /tmp is private to the attempt in sandbox mode: only a process
		// in its mount namespace reads the job's file there.
		marker := fmt.Sprintf("/tmp/gpumesh-exec-test-%d", time.Now().UnixNano())
		t.Cleanup(func() { os.Remove(marker) })
		r := startHelperJob(t, ex, "exec-inside",
			`echo written-by-the-job > `+marker+`; echo ok > ready.txt; exec sleep 300`, Limits{})
		out, errOut, code := execOutput(t, r, "", map[string]string{"EXTRA": "from-exec"},
			"bash", "-c", `cat `+marker+`; id -u; pwd; echo "$GPUMESH_JOB_ID $GPUMESH_SHARE $EXTRA"; cat /proc/self/cgroup`)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		lines := strings.Split(out, "\n")
		want := []string{"written-by-the-job", strconv.Itoa(r.UID()), r.WorkDir(), "exec-inside 0 from-exec"}
		if len(lines) < len(want) || !equalLines(lines[:len(want)], want) {
			t.Fatalf("the exec saw:\n%s\nwant first lines %q", out, want)
		}
		if iso == IsolationSandbox {
			if !strings.Contains(out, "/"+cgroupName(uint32(r.UID()))) {
				t.Errorf("the exec is not in the attempt's cgroup %s:\n%s", cgroupName(uint32(r.UID())), out)
			}
			if r.UID() == os.Geteuid() {
				t.Errorf("the sandboxed exec ran as the node's uid %d", r.UID())
			}
		}
		r.Stop(StopCancelled)
		waitDone(t, r, 10*time.Second)
	})
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExecKeepsExitCodeAndRefusesMissingCommands(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		r := startHelperJob(t, ex, "exec-exit", `echo ok > ready.txt; exec sleep 300`, Limits{})
		out, _, code := execOutput(t, r, "typed input", map[string]string{helperEnv: "exit"}, "./helper", "7")
		if code != 7 || out != "typed input" {
			t.Errorf("exit code %d, output %q; want 7 and the input echoed", code, out)
		}
		_, err := r.Exec(ExecRequest{Command: []string{"no-such-command-here"}})
		if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "no-such-command-here") {
			t.Errorf("a missing command: %v; want exec.ErrNotFound naming it", err)
		}
		if _, err := r.Exec(ExecRequest{Command: []string{"true"}, Env: map[string]string{"GPUMESH_JOB_ID": "x"}}); err == nil {
			t.Error("an exec changed GPUMESH_JOB_ID")
		}
		r.Stop(StopCancelled)
		waitDone(t, r, 10*time.Second)
		if _, err := r.Exec(ExecRequest{Command: []string{"true"}}); !errors.Is(err, ErrAttemptEnded) {
			t.Errorf("exec after the end: %v; want ErrAttemptEnded", err)
		}
		if _, err := r.DialTCP(context.Background(), 80); !errors.Is(err, ErrAttemptEnded) {
			t.Errorf("dial after the end: %v; want ErrAttemptEnded", err)
		}
	})
}

func TestExecWithATerminalSeesResizesAndCtrlC(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		r := startHelperJob(t, ex, "exec-tty", `echo ok > ready.txt; exec sleep 300`, Limits{})
		p, err := r.Exec(ExecRequest{Command: []string{"./helper"}, Env: map[string]string{helperEnv: "tty", "TERM": "xterm"},
			TTY: true, Rows: 24, Cols: 80})
		if err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 16)
		go func() { // ends when Wait closes the terminal
			defer close(lines)
			s := bufio.NewScanner(p.TTY())
			for s.Scan() {
				lines <- strings.TrimRight(s.Text(), "\r")
			}
		}()
		expect := func(want string) {
			t.Helper()
			select {
			case got := <-lines:
				if got != want {
					t.Fatalf("the process printed %q, want %q", got, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %q from the process", want)
			}
		}
		expect("size 24 80")
		if err := p.Resize(40, 132); err != nil {
			t.Fatal(err)
		}
		expect("size 40 132")
		if _, err := p.TTY().Write([]byte{3}); err != nil { // Ctrl-C, as a terminal sends it
			t.Fatal(err)
		}
		// The terminal echoes the ^C before the process's answer.
		expect("^Cinterrupted")
		code, sig := p.Wait()
		if code != 3 || sig != "" {
			t.Errorf("exit %d signal %q; want 3", code, sig)
		}
		for range lines { // the terminal reads an error once its output is read
		}
		p.Close()
		r.Stop(StopCancelled)
		waitDone(t, r, 10*time.Second)
	})
}

func TestExecDialReachesThePortInsideTheJobsNetwork(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, time.Second)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		r := startHelperJob(t, ex, "exec-dial",
			fmt.Sprintf(`%s=listen ./helper %d > listen.out & until grep -q listening listen.out; do sleep 0.05; done; echo ok > ready.txt; wait`, helperEnv, port),
			Limits{Network: NetworkNone})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := r.DialTCP(ctx, port)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "hello\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != "echo: hello\n" {
			t.Fatalf("the job answered %q, %v", line, err)
		}
		if iso == IsolationSandbox {
			// The job's network is its own: the node's loopback does not
			// have its port.
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				c.Close()
				t.Error("the job's port is open on the node's own loopback")
			}
		}
		if _, err := r.DialTCP(ctx, 0); err == nil {
			t.Error("port 0 was dialled")
		}
		r.Stop(StopCancelled)
		waitDone(t, r, 10*time.Second)
	})
}

func TestExecEndsWithItsAttempt(t *testing.T) {
	forEachIsolation(t, func(t *testing.T, iso Isolation) {
		ex := newExecutor(t, iso, 500*time.Millisecond)
		r := startHelperJob(t, ex, "exec-end", `echo ok > ready.txt; exec sleep 300`, Limits{})
		out, w := io.Pipe()
		p, err := r.Exec(ExecRequest{Command: []string{"bash", "-c", "trap '' TERM; echo trapped; sleep 300 & wait"}, Stdout: w})
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "trapped\n" {
			t.Fatalf("the exec printed %q, %v", line, err)
		}
		go io.Copy(io.Discard, out) // ends when the pipe's writer is closed, after Wait
		waited := make(chan string, 1)
		go func() {
			code, sig := p.Wait()
			w.Close()
			waited <- fmt.Sprint(code, " ", sig)
		}()
		r.Stop(StopCancelled)
		waitDone(t, r, 10*time.Second)
		select {
		case got := <-waited:
			if got != "-1 killed" {
				t.Errorf("the exec ended with %q, want killed", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an exec outlived its attempt")
		}
	})
}
