package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	for _, p := range []*proc{a, b, c} {
		peers := p.peers()
		self := peers[p.peerID]
		if !self.Self || len(self.Addrs) == 0 || !strings.HasSuffix(self.Addrs[0], "/p2p/"+p.peerID) {
			t.Errorf("%s lists itself as %+v; want self with full multiaddrs", p.name, self)
		}
		if got := peers[c.peerID]; got.Cards != 4 || got.FreeCards != 4 || len(got.Models) != 1 || got.Models[0] != "a100-80g" {
			t.Errorf("%s sees c as %+v", p.name, got)
		}
	}
	if !strings.Contains(a.log.String(), a.joinAddr()) {
		t.Errorf("a did not log the address to join it by")
	}
}

func TestCrashShowsDeadAndLeaveShowsLeft(t *testing.T) {
	a, b, c := threeNodes(t)
	c.kill() // kill -9: no goodbye
	for _, p := range []*proc{a, b} {
		eventually(t, 20*time.Second, p.name+" sees c dead and its cards gone", func() bool {
			m, ok := p.peers()[c.peerID]
			return ok && m.State == "dead" && m.FreeCards == 0
		})
	}
	b.signal(syscall.SIGTERM)
	b.waitExit(15 * time.Second)
	eventually(t, 20*time.Second, "a sees b left", func() bool {
		m, ok := a.peers()[b.peerID]
		return ok && m.State == "left"
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
	for name, args := range map[string][]string{
		"corrupt key": {"node", "--data", dir, "--api", "", "--mdns=false"},
		"bad join":    {"node", "--data", t.TempDir(), "--join", "/ip4/127.0.0.1/tcp/1"},
		"bad sim":     {"node", "--data", t.TempDir(), "--sim", "h100:x"},
		"open api":    {"node", "--data", t.TempDir(), "--api", "0.0.0.0:0"},
	} {
		out, err := runCLI(t, args...)
		if err == nil {
			t.Errorf("%s: node started: %s", name, out)
			continue
		}
		t.Logf("%s: %s", name, strings.TrimSpace(out))
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
