//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
)

// binary is the gpumesh binary built once for the whole run by TestMain,
// and replicaBinary the job program of the tunnel tests (testdata/replica).
var binary, replicaBinary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gpumesh-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if prebuilt := os.Getenv("GPUMESH_BINARY"); prebuilt != "" {
		// A binary built elsewhere (a machine without Go runs the compiled
		// test with it).
		binary = prebuilt
		replicaBinary = os.Getenv("GPUMESH_REPLICA_BINARY") // tests that need it skip without
		return m.Run()
	}
	binary = filepath.Join(dir, "gpumesh")
	build := exec.Command("go", "build", "-o", binary, "github.com/gpumesh/gpumesh/cmd/gpumesh")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building gpumesh:", err)
		return 1
	}
	replicaBinary = filepath.Join(dir, "replica")
	build = exec.Command("go", "build", "-o", replicaBinary, "./testdata/replica")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the replica helper:", err)
		return 1
	}
	return m.Run()
}

// proc is one `gpumesh node` process on loopback.
type proc struct {
	t       testing.TB
	name    string
	dataDir string
	apiAddr string
	p2pPort int
	args    []string
	cmd     *exec.Cmd
	log     *syncBuffer
	done    chan struct{}
	peerID  string
	// prefix runs the node under another command (ip netns exec NS);
	// token is the API token, when the API needs one.
	prefix []string
	token  string
	ip     string // the address it listens on; "" is 127.0.0.1
	// httpc reaches the API where the test's own network cannot (a node
	// behind a lab NAT); nil: client.
	httpc *http.Client
	// env is the process's environment; nil: the test's.
	env []string
}

// syncBuffer is a log sink the test can read while the process writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freePort returns a TCP port free on loopback now.
func freePort(t testing.TB) int { return freePorts(t, 1)[0] }

// freePorts returns n distinct TCP ports free on loopback now
// (portuse.FreeLoopback).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := portuse.FreeLoopback(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// startNode starts a node process with its own data dir, API and mesh port,
// and waits until its API answers. extra are more flags.
func startNode(t testing.TB, name string, extra ...string) *proc {
	t.Helper()
	ports := freePorts(t, 2)
	p := &proc{t: t, name: name, dataDir: t.TempDir(), p2pPort: ports[0]}
	p.apiAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	p.args = append([]string{"node",
		"--data", p.dataDir,
		"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", p.p2pPort),
		"--api", p.apiAddr,
		"--mdns=false",
		"--no-nat",
		"--isolation", "process",
		"--checkpoint-interval", "300ms", // step jobs ship checkpoints mid-run, not only at their end
		"--log-level", "debug",
	}, extra...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) start() {
	p.t.Helper()
	if p.log == nil {
		p.log = &syncBuffer{}
	} else { // a restart: one log for every run of the node
		fmt.Fprintf(p.log, "---- restarted at %s\n", time.Now().Format(time.RFC3339Nano))
	}
	argv := append(append(append([]string{}, p.prefix...), binary), p.args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = p.env
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
	eventually(p.t, 30*time.Second, p.name+" API answers", func() bool {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited at start:\n%s", p.name, p.log.String())
		default:
		}
		var peers api.PeerList
		if err := p.get("/v1/peers", &peers); err != nil || len(peers.Peers) == 0 {
			return false
		}
		p.peerID = peers.Peers[0].ID
		return true
	})
}

// joinAddr is the multiaddr other nodes --join.
func (p *proc) joinAddr() string {
	ip := p.ip
	if ip == "" {
		ip = "127.0.0.1"
	}
	return fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", ip, p.p2pPort, p.peerID)
}

// signal sends sig to the node process.
func (p *proc) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill ends the node and the jobs it started, as a machine that crashes
// does: SIGKILL to its group and to the groups of its jobs (each job runs in
// a process group of its own).
func (p *proc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
	default:
		pid := p.cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGSTOP) // no new jobs while its children are listed
		for _, g := range childGroups(pid) {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	if p.t.Failed() {
		p.t.Logf("---- %s log (last 4000 bytes)\n%s", p.name, tail(p.log.String(), 4000))
	}
}

// waitExit waits for the process to exit by itself.
func (p *proc) waitExit(within time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s still running after %v", p.name, within)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

var client = &http.Client{Timeout: 15 * time.Second}

// testOwner is the owner every test job belongs to (a fixed seed: the
// same in every run).
func testOwner() owner.Key {
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{42}, 32))
	if err != nil {
		panic(err)
	}
	return k
}

// signed makes a request to p's API signed by the test owner.
func (p *proc) signed(method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+p.apiAddr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(owner.Header, owner.SignRequest(testOwner(), method, req.URL.RequestURI(), body, time.Now()).HeaderValue())
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	if p.httpc != nil {
		return p.httpc.Do(req)
	}
	return client.Do(req)
}

// get decodes GET path's JSON into v.
func (p *proc) get(path string, v any) error {
	resp, err := p.signed(http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// text returns GET path's body.
func (p *proc) text(path string) (string, error) {
	resp, err := p.signed(http.MethodGet, path, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b), err
}

// submit posts a job spec, signed by the test owner for the default mesh,
// and returns the acknowledged record.
func (p *proc) submit(spec market.JobSpec) market.JobRecord {
	p.t.Helper()
	if spec.ID == "" {
		b := make([]byte, market.JobIDRandomBytes)
		rand.Read(b)
		id, err := market.NewJobID(b)
		if err != nil {
			p.t.Fatal(err)
		}
		spec.ID = id
	}
	s, err := market.SignSpec(testOwner(), mesh.DefaultNetwork, spec, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	body, _ := json.Marshal(s)
	// A 503 (no coordinator reachable: the mesh is between coordinators,
	// one has just crashed) asks the client to try again, as a user's
	// client does, for a while.
	deadline := time.Now().Add(15 * time.Second)
	var resp *http.Response
	for {
		resp, err = p.signed(http.MethodPost, "/v1/jobs", body)
		if err != nil {
			p.t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		resp.Body.Close()
		time.Sleep(200 * time.Millisecond) // retry interval
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		p.t.Fatalf("submit: %s: %s", resp.Status, b)
	}
	var rec market.JobRecord
	if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
		p.t.Fatal(err)
	}
	return rec
}

func (p *proc) do(method, path string) (*http.Response, error) {
	return p.signed(method, path, nil)
}

// peers returns the members as p sees them, by ID.
func (p *proc) peers() map[string]api.Peer {
	var list api.PeerList
	if err := p.get("/v1/peers", &list); err != nil {
		return nil
	}
	out := map[string]api.Peer{}
	for _, m := range list.Peers {
		out[m.ID] = m
	}
	return out
}

// job returns a job's record as p sees it.
func (p *proc) job(id string) (market.JobRecord, error) {
	var rec market.JobRecord
	err := p.get("/v1/jobs/"+id, &rec)
	return rec, err
}

func (p *proc) waitJob(id string, within time.Duration, states ...market.JobState) market.JobRecord {
	p.t.Helper()
	var rec market.JobRecord
	eventually(p.t, within, fmt.Sprintf("job %s reaches %v (as %s sees it)", id, states, p.name), func() bool {
		r, err := p.job(id)
		if err != nil {
			return false
		}
		rec = r
		for _, s := range states {
			if r.State == s {
				return true
			}
		}
		return false
	})
	return rec
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronization
	}
}

var peerIDPattern = regexp.MustCompile(`12D3KooW[1-9A-HJ-NP-Za-km-z]+`)

// short is the end of a peer ID, for messages.
func short(id string) string {
	if len(id) > 6 {
		return id[len(id)-6:]
	}
	return id
}

func hasAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// runCLI runs the gpumesh binary with args and returns its combined output;
// the error is non-nil when it exits non-zero or runs past 30 s.
func runCLI(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	return string(out), err
}

// runCLIStatus runs the gpumesh binary and returns its exit status, stdout
// and stderr apart.
func runCLIStatus(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("gpumesh %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

func itoa(i int) string { return fmt.Sprint(i) }
