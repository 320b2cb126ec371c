package procbench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/ownerkey"
)

// proc is one `gpumesh node` process on loopback.
type proc struct {
	name    string
	dir     string
	api     string // host:port of its API
	p2pPort int
	peerID  string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
}

// cluster is the node processes of a run and the owner token every
// submission uses.
type cluster struct {
	cfg   Config
	dir   string
	token string // the owner token every submission carries
	admin string // the nodes' API token: it alone opens their profiles
	procs []*proc
	hc    *http.Client
}

// startCluster starts cfg.Nodes processes, the first alone and the others
// joining it, and waits until every one sees every other alive (and, unless
// SkipCoordinatorWait, coordinating) and every supplier's ad in its book.
// On error the processes started are killed.
func startCluster(ctx context.Context, cfg Config, dir string) (_ *cluster, err error) {
	c := &cluster{cfg: cfg, dir: dir, hc: &http.Client{Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			grace := time.Second
			if ctx.Err() != nil {
				grace = 500 * time.Millisecond // Ctrl-C: be gone within a second
			}
			c.stop(grace) // the processes started so far
		}
	}()
	if err := c.writeOwner(); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p, err := c.start(ctx, i)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
		if i%10 == 9 || i == cfg.Nodes-1 {
			cfg.Progress(fmt.Sprintf("%d of %d node processes answer", i+1, cfg.Nodes))
		}
	}
	what := "every node sees every other alive and coordinating"
	if cfg.SkipCoordinatorWait {
		what = "every node sees every other alive"
	}
	cfg.Progress(fmt.Sprintf("waiting until %s (auto nodes coordinate after 30 s) and every book holds every supplier", what))
	if err := c.waitFormed(ctx, 120*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// writeOwner makes the owner key the submissions act as, and the token
// file that maps the token to it.
func (c *cluster) writeOwner() error {
	keyPath := filepath.Join(c.dir, "owner.key")
	if _, err := ownerkey.Create(keyPath); err != nil {
		return err
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	c.token = "bench-" + hex.EncodeToString(b)
	if err := os.WriteFile(filepath.Join(c.dir, "owner-tokens"), []byte(c.token+" "+keyPath+"\n"), 0o600); err != nil {
		return err
	}
	if _, err := rand.Read(b); err != nil {
		return err
	}
	c.admin = "admin-" + hex.EncodeToString(b)
	return os.WriteFile(filepath.Join(c.dir, "api-token"), []byte(c.admin+"\n"), 0o600)
}

// start starts node i and waits until its API names it.
func (c *cluster) start(ctx context.Context, i int) (*proc, error) {
	p := &proc{name: fmt.Sprintf("node-%d", i), done: make(chan struct{})}
	p.dir = filepath.Join(c.dir, p.name)
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := portuse.FreeLoopback(2)
	if err != nil {
		return nil, err
	}
	p.p2pPort, p.api = ports[0], "127.0.0.1:"+strconv.Itoa(ports[1])
	args := []string{"node",
		"--data", filepath.Join(p.dir, "data"),
		"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", p.p2pPort),
		"--api", p.api,
		"--mdns=false", "--no-nat",
		"--isolation", "process",
		"--sim", fmt.Sprintf("%s:%d", c.cfg.Model, c.cfg.Cards),
		"--owner-tokens", filepath.Join(c.dir, "owner-tokens"),
		"--api-token-file", filepath.Join(c.dir, "api-token"),
		"--log-level", "warn",
	}
	args = append(args, c.cfg.nodeArgs...)
	if i > 0 {
		first := c.procs[0]
		args = append(args, "--join", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", first.p2pPort, first.peerID))
	}
	p.logPath = filepath.Join(p.dir, "node.log")
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(c.cfg.Binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// A group of its own: Ctrl-C at the terminal reaches the bench, which
	// stops the nodes itself, in order.
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", c.cfg.Binary, err)
	}
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
	c.procs = append(c.procs, p) // stopped with the others if it fails to answer
	defer func() { c.procs = c.procs[:len(c.procs)-1] }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var peers api.PeerList
		if err := c.get(ctx, p, "/v1/peers", &peers); err == nil && len(peers.Peers) > 0 {
			p.peerID = peers.Peers[0].ID
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited at start: %s", p.name, logTail(p.logPath, 600))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond): // polling interval
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: its API did not answer within 30 s: %s", p.name, logTail(p.logPath, 600))
		}
	}
}

// waitFormed waits until every node sees every member alive (and
// coordinating, unless the config skips it), and offers from every node
// in its book.
func (c *cluster) waitFormed(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := ""
	for {
		ok, why := c.formed(ctx)
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("the mesh did not form within %v: %s%s", within, last, c.views(ctx))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond): // polling interval
		}
	}
}

func (c *cluster) formed(ctx context.Context) (bool, string) {
	for _, p := range c.procs {
		select {
		case <-p.done:
			return false, fmt.Sprintf("%s exited: %s", p.name, logTail(p.logPath, 600))
		default:
		}
		var peers api.PeerList
		if err := c.get(ctx, p, "/v1/peers", &peers); err != nil {
			return false, fmt.Sprintf("%s: %v", p.name, err)
		}
		alive, coord := map[string]bool{}, map[string]bool{}
		for _, m := range peers.Peers {
			if m.State == "alive" {
				alive[m.ID] = true
				if m.Coordinator {
					coord[m.ID] = true
				}
			}
		}
		if len(alive) < len(c.procs) {
			return false, fmt.Sprintf("%s sees %d of %d members alive%s", p.name, len(alive), len(c.procs), c.missing(alive))
		}
		if !c.cfg.SkipCoordinatorWait && len(coord) < len(c.procs) {
			return false, fmt.Sprintf("%s sees %d of %d members coordinating%s", p.name, len(coord), len(c.procs), c.missing(coord))
		}
		var offers api.OfferList
		if err := c.get(ctx, p, "/v1/offers", &offers); err != nil {
			return false, fmt.Sprintf("%s: %v", p.name, err)
		}
		free := 0
		for _, o := range offers.Offers {
			free += o.Free
		}
		if want := len(c.procs) * c.cfg.Cards; free < want {
			return false, fmt.Sprintf("%s's book offers %d of %d cards", p.name, free, want)
		}
	}
	return true, ""
}

// views says, for each node some member does not see alive or
// coordinating, how many of the other members do and whether the node
// sees itself so: a node that never raised its coordinator flag shows as
// "itself: no", news of it that reached few members as "3 of 39". It is
// "" when every node sees every member alive and coordinating (or the
// config skips the coordinator wait and every one is alive).
func (c *cluster) views(ctx context.Context) string {
	seenBy := map[string]int{}  // peer ID → members (other than itself) that see it alive and, unless skipped, coordinating
	itself := map[string]bool{} // peer ID → whether it sees itself so
	asked := 0
	for _, p := range c.procs {
		var peers api.PeerList
		if err := c.get(ctx, p, "/v1/peers", &peers); err != nil {
			continue
		}
		asked++
		for _, m := range peers.Peers {
			if m.State != "alive" || !c.cfg.SkipCoordinatorWait && !m.Coordinator {
				continue
			}
			if m.ID == p.peerID {
				itself[m.ID] = true
			} else {
				seenBy[m.ID]++
			}
		}
	}
	var parts []string
	for _, p := range c.procs {
		if seenBy[p.peerID] == len(c.procs)-1 && itself[p.peerID] {
			continue
		}
		self := "no"
		if itself[p.peerID] {
			self = "yes"
		}
		parts = append(parts, fmt.Sprintf("%s seen by %d of %d others, itself: %s", p.name, seenBy[p.peerID], len(c.procs)-1, self))
	}
	if len(parts) == 0 {
		return ""
	}
	what := "alive and coordinating"
	if c.cfg.SkipCoordinatorWait {
		what = "alive"
	}
	if len(parts) > 5 {
		parts = append(parts[:5], fmt.Sprintf("%d more", len(parts)-5))
	}
	return fmt.Sprintf(" (asked all %d nodes whom they see %s, %d answered: %s)", len(c.procs), what, asked, strings.Join(parts, "; "))
}

// missing names the processes whose peer IDs seen lacks (at most five),
// as ": not node-3, node-7", for a message on why the mesh has not formed.
func (c *cluster) missing(seen map[string]bool) string {
	var names []string
	for _, p := range c.procs {
		if !seen[p.peerID] {
			names = append(names, p.name)
		}
	}
	switch {
	case len(names) == 0:
		return ""
	case len(names) > 5:
		return fmt.Sprintf(": not %s and %d more", strings.Join(names[:5], ", "), len(names)-5)
	}
	return ": not " + strings.Join(names, ", ")
}

// get decodes the JSON answer of GET path on p's API, with the owner token.
func (c *cluster) get(ctx context.Context, p *proc, path string, v any) error {
	body, err := getOK(ctx, c.hc, "http://"+p.api+path, c.token)
	if err != nil {
		return err
	}
	defer body.Close()
	return json.NewDecoder(body).Decode(v)
}

// getOK GETs u with token and returns the answer's body, which the caller
// closes; an answer other than 200 OK is an error that quotes it.
func getOK(ctx context.Context, hc *http.Client, u, token string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return resp.Body, nil
}

// stop asks every node to leave (SIGTERM), all at once, and kills what is
// left after grace; it returns once every process has exited.
func (c *cluster) stop(grace time.Duration) {
	for _, p := range c.procs {
		if p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	expired, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-p.done:
			case <-expired.Done(): // closed for every waiter, unlike a timer's channel
				killGroup(p.cmd)
				<-p.done
			}
		}()
	}
	wg.Wait()
}

// logTail is the end of a node's log, for an error.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	if s == "" {
		return "(empty log)"
	}
	return s
}

// profile writes each node's CPU profile and execution trace of the next
// d to dir, as node-N.cpu.pprof and node-N.trace, at once for every node;
// it returns when all are written. The trace shows what the profile
// cannot: where a job waits (go tool trace's blocking and scheduler
// views).
func (c *cluster) profile(ctx context.Context, dir string, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hc := &http.Client{Timeout: d + 30*time.Second}
	kinds := []struct{ path, suffix string }{{"profile", ".cpu.pprof"}, {"trace", ".trace"}}
	errs := make([]error, len(c.procs)*len(kinds))
	var wg sync.WaitGroup
	for i, p := range c.procs {
		for k, kind := range kinds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", p.api, kind.path, int(d.Seconds()))
				errs[i*len(kinds)+k] = c.fetchTo(ctx, hc, u, filepath.Join(dir, p.name+kind.suffix))
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetchTo writes what a GET of u with the admin token answers to file.
func (c *cluster) fetchTo(ctx context.Context, hc *http.Client, u, file string) error {
	body, err := getOK(ctx, hc, u, c.admin)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
