//go:build unix

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

func TestStatusAndMetricsOfARealMesh(t *testing.T) {
	a, b, c := threeNodes(t)
	rec := b.submit(market.JobSpec{AllowSimulated: true, Cards: 2, Models: []string{"a100-*"}, MaxPriceCNY: 20, Command: []string{"sleep", "30"}})
	a.waitJob(rec.ID, 20*time.Second, market.JobRunning)

	var st api.Status
	defer func() {
		if t.Failed() {
			t.Logf("last status: members %+v cards %+v", st.Mesh.Members, st.Mesh.Cards)
		}
	}()
	eventually(t, 30*time.Second, "status shows the mesh and the running job", func() bool {
		out, err := runCLI(t, "status", "--api", c.apiAddr, "--json")
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		return st.Mesh.Members.Alive == 3 && st.Mesh.Cards.Total == 7 && st.Mesh.Cards.Busy == 2
	})
	if st.Node.PeerID != c.peerID || len(st.Node.Cards) != 4 || st.Gossip.MeshPeers == 0 {
		t.Errorf("status of c: %+v", st.Node)
	}
	screen, err := runCLI(t, "status", "--api", c.apiAddr)
	if err != nil || !hasAll(screen, "3 alive", "a100-80g", "h100-sxm-80g", "rtx4090-24g") {
		t.Errorf("status screen (%v):\n%s", err, screen)
	}

	// Metrics: gpumesh_* names, the job's coordinator counts it running.
	// The gauges come from a status each node rebuilds about once a second,
	// so a scrape may show the state of up to a second ago: wait for it.
	var metrics strings.Builder
	scrape := func() string {
		metrics.Reset()
		for _, p := range []*proc{a, b, c} {
			m, err := p.text("/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics.WriteString(m)
			if !strings.Contains(m, "gpumesh_members{") || !strings.Contains(m, "gpumesh_mesh_cards{") {
				t.Fatalf("%s /metrics lacks members or cards", p.name)
			}
			if !strings.Contains(m, "gpumesh_network_received_bytes_total ") || strings.Contains(m, "gpumesh_network_received_bytes_total 0\n") {
				t.Fatalf("%s /metrics counts no bytes received:\n%s", p.name, grepLines(m, "gpumesh_network"))
			}
			if !strings.Contains(m, `gpumesh_membership_packets_total{direction="received"} `) || strings.Contains(m, `gpumesh_membership_packets_total{direction="received"} 0`+"\n") ||
				!strings.Contains(m, `gpumesh_membership_dropped_packets_total{direction="receive"} `) {
				t.Fatalf("%s /metrics counts no membership packets received, or no drops:\n%s", p.name, grepLines(m, "gpumesh_membership"))
			}
		}
		return metrics.String()
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(scrape(), `gpumesh_jobs{state="running"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("no node counts the running job after 15s:\n%s", grepLines(metrics.String(), "gpumesh_jobs"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		m, _ := c.text("/metrics")
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(m)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: metrics lint skipped (CI installs Debian's prometheus)")
	}

	// Probes and unknown paths.
	for path, want := range map[string]int{"/v1/nope": 404, "/": 200} {
		resp, err := client.Get("http://" + c.apiAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if code, h := probe(t, c.apiAddr, "/healthz"); code != 200 || h.Status != "ok" || h.Checks != nil || h.Reason != "" {
		t.Errorf("/healthz: %d %+v, want 200 {status: ok}", code, h)
	}
	code, h := probe(t, c.apiAddr, "/readyz")
	want := map[string]bool{"store": true, "devices": true, "mesh": true}
	if code != 200 || h.Status != "ok" || !maps.Equal(h.Checks, want) || h.NotReady != nil {
		t.Errorf("/readyz of a joined node: %d %+v, want 200 with %v", code, h, want)
	}
}

// probe GETs a probe endpoint and decodes its JSON body.
func probe(t *testing.T, addr, path string) (int, api.Health) {
	t.Helper()
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("GET %s: %d, body not JSON: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, h
}

// A node told to join peers that do not answer is alive but not ready, and
// /readyz says why; the first node of a mesh, told to join none, is ready
// alone.
func TestReadyzNamesWhatIsNotReady(t *testing.T) {
	first := startNode(t, "first", "--sim", "a100-80g:1")
	if code, h := probe(t, first.apiAddr, "/readyz"); code != 200 || h.Status != "ok" {
		t.Errorf("/readyz of a first node: %d %+v, want 200", code, h)
	}
	nobody := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", freePort(t), first.peerID)
	first.kill()
	lonely := startNode(t, "lonely", "--sim", "a100-80g:1", "--join", nobody)
	if code, h := probe(t, lonely.apiAddr, "/healthz"); code != 200 || h.Status != "ok" {
		t.Errorf("/healthz of a lonely node: %d %+v, want 200: it is alive", code, h)
	}
	code, h := probe(t, lonely.apiAddr, "/readyz")
	if code != http.StatusServiceUnavailable || h.Status != "unready" ||
		!maps.Equal(h.Checks, map[string]bool{"store": true, "devices": true, "mesh": false}) ||
		!strings.Contains(h.NotReady["mesh"], "alone") || !strings.Contains(h.NotReady["mesh"], "--join") ||
		!strings.HasPrefix(h.Reason, "mesh: alone") {
		t.Errorf("/readyz of a node whose --join peer is down: %d %+v, want 503 naming the mesh check", code, h)
	}
}

func TestAPITokenIsRequiredOffLoopbackAndChecked(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("s3cret-token\n"), 0o600)
	p := startNodeToken(t, "tok", tok)
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.apiAddr+"/v1/peers", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", resp.StatusCode)
	}
	req.Header.Set("Authorization", "Bearer s3cret-token")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("right token: %d", resp.StatusCode)
	}
	m, _ := http.NewRequest(http.MethodGet, "http://"+p.apiAddr+"/metrics", nil)
	m.Header.Set("Authorization", "Bearer s3cret-token")
	mr, err := client.Do(m)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(mr.Body)
	mr.Body.Close()
	if strings.Contains(body.String(), "s3cret-token") {
		t.Fatal("/metrics exposes the API token")
	}
}

// startNodeToken starts a node whose API needs the token in file tok.
func startNodeToken(t *testing.T, name, tok string) *proc {
	t.Helper()
	ports := freePorts(t, 2)
	p := &proc{t: t, name: name, dataDir: t.TempDir(), p2pPort: ports[0]}
	p.apiAddr = "127.0.0.1:" + itoa(ports[1])
	p.args = []string{"node", "--data", p.dataDir, "--listen", "/ip4/127.0.0.1/tcp/" + itoa(p.p2pPort),
		"--api", p.apiAddr, "--api-token-file", tok, "--mdns=false", "--no-nat", "--isolation", "process"}
	p.log = &syncBuffer{}
	p.cmd = exec.Command(binary, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	eventually(t, 30*time.Second, "the node answers /healthz", func() bool {
		resp, err := client.Get("http://" + p.apiAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}
