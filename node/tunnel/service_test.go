//go:build unix

package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/mesh/leaktest"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestMain(m *testing.M) { leaktest.VerifyMain(m) }

// newHost is a libp2p host on loopback TCP, closed with the test.
func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func connect(t testing.TB, a, b host.Host) {
	t.Helper()
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func key(t testing.TB, seed byte) owner.Key {
	t.Helper()
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// jobs is the Jobs of a test node: targets by job and share.
type jobs struct {
	mu sync.Mutex
	m  map[string]Target
}

func (j *jobs) Target(_ context.Context, job string, share int, _ uint64) (Target, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	t, ok := j.m[fmt.Sprintf("%s/%d", job, share)]
	if !ok {
		return Target{}, Errorf(http.StatusNotFound, "job %s share %d does not run here", job, share)
	}
	return t, nil
}

func (j *jobs) set(job string, share int, t Target) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.m == nil {
		j.m = map[string]Target{}
	}
	j.m[fmt.Sprintf("%s/%d", job, share)] = t
}

// rig is two nodes: near opens tunnels, far runs a job (a real process of
// a process-mode executor) that tunnels end in.
type rig struct {
	near, far *Service
	farID     peer.ID
	run       *executor.Run
	jobs      *jobs
	owner     owner.Key
}

func newRig(t testing.TB) *rig {
	t.Helper()
	a, b := newHost(t), newHost(t)
	connect(t, a, b)
	ex, err := executor.New(executor.Config{Root: t.TempDir(), Isolation: executor.IsolationProcess, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	run, err := ex.Start(executor.Attempt{JobID: "j1", Command: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{jobs: &jobs{}, run: run, owner: key(t, 1), farID: b.ID()}
	r.jobs.set("j1", 0, Target{Attempt: run, Epoch: 3, Owner: r.owner.ID()})
	if r.near, err = New(Config{Host: a, Network: "test"}); err != nil {
		t.Fatal(err)
	}
	if r.far, err = New(Config{Host: b, Network: "test", Jobs: r.jobs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.near.Close(); r.far.Close() })
	return r
}

// signedRequest is a tunnel request as an API node makes it from the
// owner's signed POST.
func signedRequest(k owner.Key, kind Kind, job string, share int, path string, body any) Request {
	b, _ := json.Marshal(body)
	p := owner.SignRequest(k, http.MethodPost, path, b, time.Now())
	return Request{Kind: kind, Job: job, Share: share, Proof: &p, Body: b}
}

func execRequest(k owner.Key, x wire.ExecRequest) Request {
	return signedRequest(k, KindExec, "j1", x.Share, "/v1/jobs/j1/exec", x)
}

func TestExecOverTheMeshCarriesStreamsAndExitCode(t *testing.T) {
	r := newRig(t)
	for _, to := range []struct {
		name string
		svc  *Service
		id   peer.ID
	}{{"remote", r.near, r.farID}, {"local", r.far, r.farID}} {
		t.Run(to.name, func(t *testing.T) {
			c, resp, err := to.svc.Open(context.Background(), to.id, execRequest(r.owner, wire.ExecRequest{
				Command: []string{"sh", "-c", `cat; echo "to stderr" >&2; exit 7`}, Stdin: true}))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Epoch != 3 {
				t.Errorf("the tunnel ends in epoch %d, want 3", resp.Epoch)
			}
			var out, errOut bytes.Buffer
			code, sig, err := wire.NewClient(c).Copy(strings.NewReader("typed by the owner\n"), &out, &errOut)
			if err != nil || code != 7 || sig != "" {
				t.Fatalf("exit %d %q, %v; want 7", code, sig, err)
			}
			if out.String() != "typed by the owner\n" || errOut.String() != "to stderr\n" {
				t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
			}
		})
	}
}

// A command that writes at once still has its answer read first: its
// output used to race the tunnel's answer onto the connection, and under
// load the client read an output frame as the answer ("tunnel header of
// 1862270976 bytes"; 3 of 200 such execs here). Many at once, into the
// same node and over the mesh.
func TestExecOutputComesAfterTheAnswer(t *testing.T) {
	r := newRig(t)
	for _, to := range []struct {
		name string
		svc  *Service
	}{{"local", r.far}, {"remote", r.near}} {
		t.Run(to.name, func(t *testing.T) {
			errs := make(chan error, 200)
			for range 20 {
				var wg sync.WaitGroup
				for range 10 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c, _, err := to.svc.Open(context.Background(), r.farID, execRequest(r.owner, wire.ExecRequest{Command: []string{"echo", "at once"}}))
						if err != nil {
							errs <- err
							return
						}
						var out bytes.Buffer
						if code, _, err := wire.NewClient(c).Copy(nil, &out, io.Discard); err != nil || code != 0 || out.String() != "at once\n" {
							errs <- fmt.Errorf("exit %d, %v, printed %q", code, err, out.String())
						}
					}()
				}
				wg.Wait()
			}
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestTunnelsAreRefusedWithReasons(t *testing.T) {
	r := newRig(t)
	ok := wire.ExecRequest{Command: []string{"true"}}
	tampered := execRequest(r.owner, ok)
	tampered.Body = []byte(`{"command":["rm","-rf","/"]}`)
	unsigned := execRequest(r.owner, ok)
	unsigned.Proof = nil
	old := execRequest(r.owner, ok)
	p := owner.SignRequest(r.owner, http.MethodPost, "/v1/jobs/j1/exec", old.Body, time.Now().Add(-time.Hour))
	old.Proof = &p
	wrongPath := signedRequest(r.owner, KindExec, "j1", 0, "/v1/jobs/j2/exec", ok)
	forwardAsExec := signedRequest(r.owner, KindExec, "j1", 0, "/v1/jobs/j1/forward", ok)
	otherShare := signedRequest(r.owner, KindExec, "j1", 0, "/v1/jobs/j1/exec", wire.ExecRequest{Share: 1, Command: []string{"true"}})
	serviceNoProof := Request{Kind: KindService, Job: "j1"}
	for name, c := range map[string]struct {
		req    Request
		status int
		field  string
		says   string
	}{
		"another owner":       {execRequest(key(t, 2), ok), http.StatusForbidden, "", "belongs to another owner"},
		"missing command":     {execRequest(r.owner, wire.ExecRequest{Command: []string{"no-such-command"}}), http.StatusNotFound, "command", "executable file not found in $PATH: no-such-command"},
		"unknown job":         {signedRequest(r.owner, KindExec, "nope", 0, "/v1/jobs/nope/exec", ok), http.StatusNotFound, "", "job nope share 0 does not run here"},
		"tampered body":       {tampered, http.StatusUnauthorized, "", "not the one its owner signed"},
		"unsigned":            {unsigned, http.StatusForbidden, "", "needs its owner's signed request"},
		"signed an hour ago":  {old, http.StatusUnauthorized, "", "outside its time window"},
		"another job's proof": {wrongPath, http.StatusUnauthorized, "", "signed POST /v1/jobs/j2/exec"},
		"a forward's proof":   {forwardAsExec, http.StatusUnauthorized, "", "not a exec tunnel"},
		"share not signed":    {otherShare, http.StatusBadRequest, "", "signed share 1, not 0"},
		"private service":     {serviceNoProof, http.StatusForbidden, "", "needs its owner's signed request"},
		"port 0":              {signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: 0}), http.StatusBadRequest, "port", "port 0: want 1 to 65535"},
		"port 70000":          {signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: 70000}), http.StatusBadRequest, "port", "want 1 to 65535"},
	} {
		t.Run(name, func(t *testing.T) {
			c2, _, err := r.near.Open(context.Background(), r.farID, c.req)
			if err == nil {
				c2.Close()
				t.Fatal("the tunnel opened")
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != c.status || e.Field != c.field || !strings.Contains(e.Msg, c.says) {
				t.Fatalf("refused with %#v; want status %d field %q saying %q", err, c.status, c.field, c.says)
			}
		})
	}
}

// echoServer accepts connections on loopback and echoes each line back
// with a prefix until the client half-closes; then it says "bye" and
// closes.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintf(c, "echo: %s\n", s.Text())
				}
				fmt.Fprintf(c, "bye\n")
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestForwardCarriesFiftyConcurrentConnectionsAndHalfCloses(t *testing.T) {
	r := newRig(t)
	port := echoServer(t)
	const conns = 50
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				c, _, err := r.near.Open(context.Background(), r.farID,
					signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: port}))
				if err != nil {
					return err
				}
				defer c.Close()
				want := ""
				for line := range 20 {
					msg := fmt.Sprintf("conn %d line %d %s", i, line, strings.Repeat("x", i*100))
					fmt.Fprintf(c, "%s\n", msg)
					want += "echo: " + msg + "\n"
				}
				// A half-close reaches the server, whose answer and close
				// come back.
				if err := c.CloseWrite(); err != nil {
					return err
				}
				got, err := io.ReadAll(c)
				if err != nil {
					return fmt.Errorf("conn %d: %w", i, err)
				}
				if string(got) != want+"bye\n" {
					return fmt.Errorf("conn %d got %d bytes, want %d", i, len(got), len(want)+4)
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestForwardToAClosedPortSaysSo(t *testing.T) {
	r := newRig(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, _, err := r.near.Open(context.Background(), r.farID,
		signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: port}))
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadGateway || !strings.Contains(e.Msg, "nothing answers on port "+strconv.Itoa(port)) {
		t.Fatalf("got %v", err)
	}
}

func TestAClientThatGoesAwayHangsUpItsCommand(t *testing.T) {
	r := newRig(t)
	c, _, err := r.near.Open(context.Background(), r.farID, execRequest(r.owner, wire.ExecRequest{
		Command: []string{"sh", "-c", `echo $$; exec sleep 300`}}))
	if err != nil {
		t.Fatal(err)
	}
	f, err := wire.NewReader(c).Read()
	if err != nil || f.Type != wire.Stdout {
		t.Fatalf("first frame %q %q, %v", f.Type, f.Data, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(f.Data)))
	if err != nil {
		t.Fatal(err)
	}
	abort(c) // the owner's laptop lost its network
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %d) still runs 10s after its client went away", pid)
		}
		time.Sleep(20 * time.Millisecond) // polling the process table
	}
	// The job itself runs on.
	select {
	case <-r.run.Done():
		t.Fatal("the job ended with its exec's client")
	default:
	}
}

func TestServiceTunnelsNeedAReadyReplica(t *testing.T) {
	r := newRig(t)
	port := echoServer(t)
	var ready sync.Mutex
	isReady := false
	r.jobs.set("svc", 0, Target{Attempt: r.run, Epoch: 1, Owner: r.owner.ID(), Port: port, Public: true,
		Ready: func() bool { ready.Lock(); defer ready.Unlock(); return isReady }})
	r.jobs.set("private", 0, Target{Attempt: r.run, Epoch: 1, Owner: r.owner.ID(), Port: port})
	public := Request{Kind: KindService, Job: "svc"}
	_, _, err := r.near.Open(context.Background(), r.farID, public)
	if e := AsError(err); err == nil || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("an unready replica: %v", err)
	}
	ready.Lock()
	isReady = true
	ready.Unlock()
	c, _, err := r.near.Open(context.Background(), r.farID, public)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "hi\n")
	c.CloseWrite()
	if got, _ := io.ReadAll(c); string(got) != "echo: hi\nbye\n" {
		t.Errorf("got %q", got)
	}
	c.Close()
	if _, _, err := r.near.Open(context.Background(), r.farID, Request{Kind: KindService, Job: "private"}); AsError(err).Status != http.StatusForbidden {
		t.Errorf("a private service without its owner's request: %v", err)
	}
	p := owner.SignRequest(r.owner, http.MethodGet, "/v1/jobs/private/http/x", nil, time.Now())
	c, _, err = r.near.Open(context.Background(), r.farID, Request{Kind: KindService, Job: "private", Proof: &p})
	if err != nil {
		t.Fatalf("the owner's request to a private service: %v", err)
	}
	c.Close()
	if _, _, err := r.near.Open(context.Background(), r.farID, Request{Kind: KindService, Job: "j1", Proof: &p}); AsError(err).Status != http.StatusUnauthorized {
		t.Errorf("a proof for another job's service: %v", err)
	}
}

func TestCloseEndsServedTunnels(t *testing.T) {
	r := newRig(t)
	c, _, err := r.near.Open(context.Background(), r.farID, execRequest(r.owner, wire.ExecRequest{Command: []string{"sleep", "300"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan struct{})
	go func() { r.far.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits on an exec")
	}
	if _, _, err := wire.NewClient(c).Copy(nil, io.Discard, io.Discard); !errors.Is(err, wire.ErrBroken) {
		t.Errorf("the client of a cut exec: %v; want ErrBroken", err)
	}
}

func TestForwardIntoAJobOfTheSameNodeIsItsConnection(t *testing.T) {
	r := newRig(t)
	port := echoServer(t)
	c, resp, err := r.far.Open(context.Background(), r.farID,
		signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: port}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*net.TCPConn); !ok || resp.Epoch != 3 {
		t.Errorf("a local forward is a %T (epoch %d); want the job's TCP connection itself", c, resp.Epoch)
	}
	fmt.Fprintf(c, "local\n")
	c.CloseWrite()
	if got, _ := io.ReadAll(c); string(got) != "echo: local\nbye\n" {
		t.Errorf("got %q", got)
	}
	c.Close()
	// The same checks as from a peer.
	if _, _, err := r.far.Open(context.Background(), r.farID,
		signedRequest(key(t, 5), KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: port})); AsError(err).Status != http.StatusForbidden {
		t.Errorf("another owner's local forward: %v", err)
	}
}

// TestAForwardWhoseClientVanishesIsClosedAtTheJob: the job's side of a
// forwarded connection is closed when the owner's side is cut off, so a
// server in the job is not left holding it.
func TestAForwardWhoseClientVanishesIsClosedAtTheJob(t *testing.T) {
	r := newRig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ended := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ended <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c) // the job's server reads until its client is gone
		ended <- err
	}()
	c, _, err := r.near.Open(context.Background(), r.farID,
		signedRequest(r.owner, KindForward, "j1", 0, "/v1/jobs/j1/forward", wire.ForwardRequest{Port: ln.Addr().(*net.TCPAddr).Port}))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "half a request")
	abort(c)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the job's end of the connection stays open after its client vanished")
	}
}
