//go:build unix

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// threeNodes starts a, b and c with different simulated cards, b and c
// joining a, and waits until each sees all three alive.
func threeNodes(t *testing.T, extra ...string) (a, b, c *proc) {
	t.Helper()
	a = startNode(t, "a", append([]string{"--sim", "h100-sxm-80g:2"}, extra...)...)
	b = startNode(t, "b", append([]string{"--sim", "rtx4090-24g:1", "--join", a.joinAddr()}, extra...)...)
	c = startNode(t, "c", append([]string{"--sim", "a100-80g:4", "--join", a.joinAddr()}, extra...)...)
	waitAllSee(t, []*proc{a, b, c}, 3, 7)
	return a, b, c
}

// waitAllSee waits until every node sees n members alive offering cards in
// all.
func waitAllSee(t testing.TB, procs []*proc, n, cards int) {
	t.Helper()
	for _, p := range procs {
		eventually(t, 30*time.Second, p.name+" sees every member alive with its cards", func() bool {
			alive, total := 0, 0
			for _, m := range p.peers() {
				if m.State == "alive" {
					alive++
					total += m.Cards
				}
			}
			return alive == n && total == cards
		})
	}
}

func TestNodesJoinAndSeeEachOthersCards(t *testing.T) {
	a, b, c := threeNodes(t)
	type want struct {
		cards int
		model string
	}
	wants := map[string]want{a.peerID: {2, "h100-sxm-80g"}, b.peerID: {1, "rtx4090-24g"}, c.peerID: {4, "a100-80g"}}
	for _, p := range []*proc{a, b, c} {
		// What an operator runs: the CLI against the node's API.
		out, err := runCLI(t, "peers", "--json", "--api", p.apiAddr)
		if err != nil {
			t.Fatalf("gpumesh peers --json --api %s: %v\n%s", p.apiAddr, err, out)
		}
		var peers []api.Peer
		if err := json.Unmarshal([]byte(out), &peers); err != nil {
			t.Fatalf("%s: peers --json is not a JSON array of peers: %v\n%s", p.name, err, out)
		}
		if len(peers) != 3 || peers[0].ID != p.peerID {
			t.Errorf("%s lists %d peers, itself first: %v; want all 3", p.name, len(peers), peers)
		}
		for _, m := range peers {
			w, ok := wants[m.ID]
			switch {
			case !ok:
				t.Errorf("%s lists an unknown peer %s", p.name, m.ID)
			case m.State != "alive" || m.Cards != w.cards || m.FreeCards != w.cards || len(m.Models) != 1 || m.Models[0] != w.model:
				t.Errorf("%s lists %s as %s with %d cards (%d free) of %v; want alive with %d free %s", p.name, short(m.ID), m.State, m.Cards, m.FreeCards, m.Models, w.cards, w.model)
			}
			if m.Self != (m.ID == p.peerID) {
				t.Errorf("%s marks %s self=%v", p.name, short(m.ID), m.Self)
			}
			if m.Self && (len(m.Addrs) == 0 || !strings.HasSuffix(m.Addrs[0], "/p2p/"+p.peerID)) {
				t.Errorf("%s lists itself with addrs %v; want full multiaddrs", p.name, m.Addrs)
			}
		}
	}
	if !strings.Contains(a.log.String(), a.joinAddr()) {
		t.Errorf("a did not log the address to join it by")
	}
}

// meshCards is the mesh's capacity in p's status: the cards of its Book.
func meshCards(p *proc) (api.Capacity, bool) {
	var st api.Status
	if err := p.get("/v1/status", &st); err != nil {
		return api.Capacity{}, false
	}
	return st.Mesh.Cards, true
}

func TestCrashShowsDeadAndLeaveShowsLeft(t *testing.T) {
	a, b, c := threeNodes(t)
	for _, p := range []*proc{a, b} {
		eventually(t, 10*time.Second, p.name+"'s status counts the 7 cards of the mesh", func() bool {
			cards, ok := meshCards(p)
			return ok && cards.Total == 7 && cards.Free == 7
		})
	}
	c.kill() // kill -9: no goodbye
	for _, p := range []*proc{a, b} {
		eventually(t, 20*time.Second, p.name+" sees c dead", func() bool {
			m, ok := p.peers()[c.peerID]
			return ok && m.State == "dead"
		})
		// c's ad has at least 20 s to live (30 s lifetime, 10 s refresh in a
		// small mesh): only membership takes its 4 cards out of the Book
		// this soon. The status is rebuilt every second.
		eventually(t, 5*time.Second, p.name+"'s Book loses c's 4 cards", func() bool {
			cards, ok := meshCards(p)
			m := p.peers()[c.peerID]
			return ok && cards.Total == 3 && cards.Free == 3 && m.FreeCards == 0
		})
	}
	b.signal(syscall.SIGTERM)
	b.waitExit(15 * time.Second)
	eventually(t, 20*time.Second, "a sees b left", func() bool {
		m, ok := a.peers()[b.peerID]
		return ok && m.State == "left"
	})
	eventually(t, 5*time.Second, "a's Book loses b's card", func() bool {
		cards, ok := meshCards(a)
		return ok && cards.Total == 2
	})
}

func TestWrongSecretIsRefused(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("correct horse battery staple 1"), 0o600)
	os.WriteFile(bad, []byte("a different secret entirely 2"), 0o600)
	a := startNode(t, "a", "--sim", "a100-80g:1", "--secret-file", good)
	b := startNode(t, "b", "--sim", "a100-80g:1", "--secret-file", good, "--join", a.joinAddr())
	waitAllSee(t, []*proc{a, b}, 2, 2)
	x := startNode(t, "x", "--sim", "a100-80g:1", "--secret-file", bad, "--join", a.joinAddr())
	eventually(t, 20*time.Second, "the outsider says why it cannot join", func() bool {
		return strings.Contains(x.log.String(), "bootstrap peers unreachable")
	})
	if _, ok := a.peers()[x.peerID]; ok {
		t.Fatal("a node with the wrong secret became a member")
	}
	t.Logf("outsider's log: %s", tail(grepLines(x.log.String(), "unreachable"), 400))
}

func TestNodeRefusesBadStart(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "identity.key"), []byte("not a key"), 0o600)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  []string // in stderr
	}{
		{"corrupt key", []string{"node", "--data", dir, "--api", "", "--mdns=false"}, 1,
			[]string{"identity.key", "corrupt", "move it away only if you mean to start as a new node"}},
		{"bad join", []string{"node", "--data", t.TempDir(), "--join", "/ip4/127.0.0.1/tcp/1"}, 2,
			[]string{`--join "/ip4/127.0.0.1/tcp/1"`, "/p2p/<peer ID>"}},
		{"bad sim", []string{"node", "--data", t.TempDir(), "--sim", "h100:x"}, 2,
			[]string{"--sim", `count "x"`}},
		{"open api", []string{"node", "--data", t.TempDir(), "--api", "0.0.0.0:0"}, 2,
			[]string{"listening beyond loopback needs a token (--api-token-file); refusing to start", "0.0.0.0:0"}},
	} {
		code, stdout, stderr := runCLIStatus(t, tc.args...)
		if code != tc.wantCode {
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.name, code, tc.wantCode, stderr)
		}
		if !hasAll(stderr, tc.wantErr...) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%s: stderr %q, want one line saying %q", tc.name, stderr, tc.wantErr)
		}
		if stdout != "" {
			t.Errorf("%s: stdout %q, want nothing", tc.name, stdout)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestNodesFindEachOtherByMDNS(t *testing.T) {
	a := startNode(t, "a", "--sim", "a100-80g:1", "--mdns=true")
	b := startNode(t, "b", "--sim", "a100-80g:1", "--mdns=true")
	c := startNode(t, "c", "--sim", "a100-80g:1", "--mdns=true")
	waitAllSee(t, []*proc{a, b, c}, 3, 3)
}
