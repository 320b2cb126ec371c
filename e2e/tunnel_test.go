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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpumesh/gpumesh/market"
	apiclient "github.com/gpumesh/gpumesh/node/api/client"
)

// needReplica skips a test whose job program was not built.
func needReplica(t testing.TB) {
	t.Helper()
	if replicaBinary == "" {
		t.Skip("the tunnel tests' job program was not built: set GPUMESH_REPLICA_BINARY with GPUMESH_BINARY")
	}
}

// tunnelOwners makes two owners' keys with the CLI: alice runs the jobs,
// bob tries to reach into them.
func tunnelOwners(t testing.TB) (alice, bob string) {
	t.Helper()
	dir := t.TempDir()
	alice, bob = filepath.Join(dir, "alice.key"), filepath.Join(dir, "bob.key")
	for _, k := range []string{alice, bob} {
		if out, err := runCLI(t, "key", "create", "--key", k); err != nil {
			t.Fatalf("key create: %v: %s", err, out)
		}
	}
	return alice, bob
}

// cliJob submits a job with the CLI as key and waits until it runs.
func cliJob(t testing.TB, api, key string, extra ...string) string {
	t.Helper()
	args := append([]string{"submit", "--api", api, "--key", key, "--gpus", "1", "--max-price", "30", "--allow-simulated"}, extra...)
	out, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("submit: %v: %s", err, out)
	}
	id := strings.TrimSpace(out)
	eventually(t, 20*time.Second, "job "+id+" runs", func() bool {
		out, err := runCLI(t, "job", id, "--api", api, "--key", key, "--json")
		var rec market.JobRecord
		if err != nil || json.Unmarshal([]byte(out), &rec) != nil || rec.State != market.JobRunning {
			return false
		}
		for _, p := range rec.Placements {
			if p.State == market.PlacementRunning && !p.StartedAt.IsZero() {
				return true
			}
		}
		return false
	})
	return id
}

// apiAndRunner is a mesh of two node processes: a, which owners talk to
// and which has no cards, and b, which runs the jobs.
func apiAndRunner(t testing.TB, extra ...string) (a, b *proc) {
	t.Helper()
	a = startNode(t, "a", extra...)
	b = startNode(t, "b", append([]string{"--sim", "h100-sxm-80g:2", "--join", a.joinAddr()}, extra...)...)
	waitAllSee(t, []*proc{a, b}, 2, 2)
	return a, b
}

func TestExecRunsInAJobFromAnotherNode(t *testing.T) {
	a, b := apiAndRunner(t)
	alice, bob := tunnelOwners(t)
	id := cliJob(t, a.apiAddr, alice, "--", "sleep", "300")

	code, out, errOut := runCLIStatus(t, "exec", id, "--api", a.apiAddr, "--key", alice, "--",
		"sh", "-c", `echo "in $GPUMESH_JOB_ID share $GPUMESH_SHARE at $PWD"; echo oops >&2; exit 7`)
	if code != 7 || !strings.HasPrefix(out, "in "+id+" share 0 at ") || !strings.Contains(out, id+"-s0-e") || errOut != "oops\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 7, the job's own environment and work dir", code, out, errOut)
	}
	if !strings.Contains(b.log.String(), `msg=exec `) || !strings.Contains(b.log.String(), "GPUMESH_JOB_ID share") {
		t.Errorf("the supplier did not log who ran what:\n%s", tail(b.log.String(), 2000))
	}

	cmd := exec.Command(binary, "exec", "-i", id, "--api", a.apiAddr, "--key", alice, "--", "sh", "-c", "tr a-z A-Z")
	cmd.Stdin = strings.NewReader("typed by alice\n")
	if got, err := cmd.Output(); err != nil || string(got) != "TYPED BY ALICE\n" {
		t.Errorf("exec -i: %q, %v", got, err)
	}

	for name, c := range map[string]struct {
		args []string
		code int
		says string
	}{
		"a command the job lacks": {[]string{"exec", id, "--key", alice, "--", "no-such-command"}, 127, "executable file not found in $PATH: no-such-command"},
		"another owner":           {[]string{"exec", id, "--key", bob, "--", "true"}, 1, "belongs to another owner"},
		"an unknown job":          {[]string{"exec", "jnosuchjob123456", "--key", alice, "--", "true"}, 1, "no job jnosuchjob123456"},
		"an unknown share":        {[]string{"exec", id, "--share", "3", "--key", alice, "--", "true"}, 1, "has no share 3"},
		"no command":              {[]string{"exec", id, "--key", alice}, 2, "no command"},
		"a negative share":        {[]string{"exec", id, "--share", "-1", "--key", alice, "--", "true"}, 2, "--share"},
	} {
		code, out, errOut := runCLIStatus(t, append([]string{c.args[0], "--api", a.apiAddr}, c.args[1:]...)...)
		if code != c.code || !strings.Contains(errOut, c.says) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d saying %q", name, code, out, errOut, c.code, c.says)
		}
	}

	// The owner's laptop dies mid-exec: the command is hung up on the
	// supplier, and the job runs on.
	dying := exec.Command(binary, "exec", id, "--api", a.apiAddr, "--key", alice, "--", "sh", "-c", "echo $$; exec sleep 300")
	stdout, _ := dying.StdoutPipe()
	if err := dying.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the exec printed %q: %v %v", line, err, perr)
	}
	dying.Process.Kill()
	dying.Wait()
	eventually(t, 10*time.Second, "the exec's command ends with its client", func() bool {
		return syscall.Kill(pid, 0) != nil
	})
	if code, _, _ := runCLIStatus(t, "exec", id, "--api", a.apiAddr, "--key", alice, "--", "true"); code != 0 {
		t.Errorf("an exec after a client died: exit %d; the job should run on", code)
	}

	if out, err := runCLI(t, "cancel", id, "--api", a.apiAddr, "--key", alice); err != nil {
		t.Fatalf("cancel: %v: %s", err, out)
	}
	eventually(t, 20*time.Second, "an exec into the cancelled job is refused", func() bool {
		code, _, errOut := runCLIStatus(t, "exec", id, "--api", a.apiAddr, "--key", alice, "--", "true")
		return code == 1 && strings.Contains(errOut, "has ended (cancelled)")
	})
}

func TestExecWithATerminalFollowsItsSizeAndCtrlC(t *testing.T) {
	a, _ := apiAndRunner(t)
	alice, _ := tunnelOwners(t)
	id := cliJob(t, a.apiAddr, alice, "--", "sleep", "300")
	cmd := exec.Command(binary, "exec", "-it", id, "--api", a.apiAddr, "--key", alice, "--", "bash", "--norc", "-c",
		`stty size; trap 'stty size' WINCH; trap 'echo got-ctrl-c; exit 5' INT; echo ready; while :; do sleep 0.05; done`)
	cmd.Env = append(os.Environ(), "TERM=xterm")
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	lines := make(chan string, 64)
	go func() { // ends when the terminal closes
		defer close(lines)
		s := bufio.NewScanner(term)
		for s.Scan() {
			lines <- strings.TrimRight(s.Text(), "\r")
		}
	}()
	expect := func(want string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case got, ok := <-lines:
				if !ok {
					t.Fatalf("the terminal closed before %q", want)
				}
				if strings.Contains(got, want) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q on the terminal", want)
			}
		}
	}
	expect("30 100")
	expect("ready")
	if err := pty.Setsize(term, &pty.Winsize{Rows: 50, Cols: 160}); err != nil { // the user resizes the window
		t.Fatal(err)
	}
	expect("50 160")
	if _, err := term.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	expect("got-ctrl-c")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Errorf("gpumesh exec -it exited with %v, want the command's 5", err)
	}
}

// forwarder is a running `gpumesh port-forward`.
type forwarder struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

// startForward starts it and waits until it listens on n addresses.
func startForward(t testing.TB, n int, args ...string) (*forwarder, []string) {
	t.Helper()
	f := &forwarder{cmd: exec.Command(binary, append([]string{"port-forward"}, args...)...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f.cmd.Stderr = f.stderr
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() { // reads what it prints until it exits, then reaps it
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case lines <- s.Text():
			default: // past the lines the test reads
			}
		}
		close(lines)
		f.done <- f.cmd.Wait()
	}()
	t.Cleanup(func() {
		f.cmd.Process.Kill()
		<-f.done
	})
	var addrs []string
	deadline := time.After(20 * time.Second)
	for len(addrs) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("port-forward ended: %s", f.stderr.String())
			}
			// "Forwarding from 127.0.0.1:PORT -> REMOTE (job ID share N)"
			if f := strings.Fields(l); len(f) > 2 && f[0] == "Forwarding" {
				addrs = append(addrs, f[2])
			}
		case <-deadline:
			t.Fatalf("port-forward did not start listening: %s", f.stderr.String())
		}
	}
	return f, addrs
}

func TestPortForwardCarriesHTTPAndFiftyConnections(t *testing.T) {
	needReplica(t)
	a, _ := apiAndRunner(t)
	alice, bob := tunnelOwners(t)
	httpPort, echoPort, closedPort := freePort(t), freePort(t), freePort(t)
	id := cliJob(t, a.apiAddr, alice, "--", "sh", "-c",
		fmt.Sprintf("%s serve %d & %s echo %d & wait", replicaBinary, httpPort, replicaBinary, echoPort))

	fw, addrs := startForward(t, 3, id, "--api", a.apiAddr, "--key", alice,
		fmt.Sprintf("0:%d", httpPort), fmt.Sprintf("0:%d", echoPort), fmt.Sprintf("0:%d", closedPort))
	web, echo, closed := addrs[0], addrs[1], addrs[2]

	eventually(t, 10*time.Second, "the job's HTTP server answers through the forward", func() bool {
		out, err := client.Get("http://" + web + "/through/the/mesh?x=1")
		if err != nil {
			return false
		}
		defer out.Body.Close()
		b, _ := io.ReadAll(out.Body)
		return string(b) == "hello from share 0: GET /through/the/mesh?x=1 "
	})

	const conns = 50
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", echo)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			want := bytes.Repeat([]byte(fmt.Sprintf("connection %02d ", i)), 4096) // 64 KiB each
			go func() {
				c.Write(want)
				c.(*net.TCPConn).CloseWrite() // the job's side sees the end and closes
			}()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("connection %d: %d bytes back of %d, %v", i, len(got), len(want), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.Fatalf("port-forward said:\n%s", fw.stderr.String())
	}

	// A connection to a port nothing listens on in the job is closed, and
	// says why; the forward goes on.
	c, err := net.Dial("tcp", closed)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("a connection to a closed port: %d bytes, %v; want it closed", n, err)
	}
	c.Close()
	eventually(t, 5*time.Second, "port-forward says why", func() bool {
		return strings.Contains(fw.stderr.String(), fmt.Sprintf("nothing answers on port %d", closedPort))
	})

	code, _, errOut := runCLIStatus(t, "port-forward", id, "--api", a.apiAddr, "--key", bob, "0:80")
	if code != 1 || !strings.Contains(errOut, "belongs to another owner") {
		t.Errorf("bob's port-forward: exit %d, %q", code, errOut)
	}
	for _, spec := range []string{"0:70000", "80", "x:80", "1.2.3:80:80"} {
		if code, _, errOut := runCLIStatus(t, "port-forward", id, "--api", a.apiAddr, "--key", alice, spec); code != 2 || !strings.Contains(errOut, spec) {
			t.Errorf("port-forward %s: exit %d, %q; want 2 naming it", spec, code, errOut)
		}
	}

	fw.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-fw.done:
		if err != nil {
			t.Errorf("port-forward after Ctrl-C: %v", err)
		}
		fw.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Error("port-forward did not stop on Ctrl-C")
	}
}

// payloadOf packs files (name → path on this machine) into a payload
// archive and uploads it through p.
func payloadOf(t testing.TB, p *proc, files map[string]string) market.PayloadRef {
	t.Helper()
	dir := t.TempDir()
	for name, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := []apiclient.Option{apiclient.WithOwnerKey(testOwner())}
	if p.token != "" {
		opts = append(opts, apiclient.WithToken(p.token))
	}
	if p.httpc != nil {
		opts = append(opts, apiclient.WithHTTPClient(p.httpc))
	}
	c, err := apiclient.New(p.apiAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl, err := apiclient.ScanPayload(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.UploadPayload(ctx, pl)
	if err != nil {
		t.Fatalf("payload upload: %v", err)
	}
	return st.Ref
}
