package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

func TestPeers(t *testing.T) {
	n := newFakeNode(t)
	now := time.Now()
	n.b.SetPeers([]api.Peer{
		{ID: nodeA, Self: true, State: "alive", Region: "cn-sh", Cards: 8, FreeCards: 6, Models: []string{"h100-sxm-80g"},
			Addrs: []string{"/ip4/10.0.0.1/tcp/4001/p2p/" + nodeA, "/ip4/10.0.0.1/udp/4001/quic-v1/p2p/" + nodeA}, Coordinator: true},
		{ID: nodeB, State: "suspect", Cards: 3, FreeCards: 0, Models: []string{"rtx4090-24g", "rtx4090-48g"},
			Addrs: []string{"/ip4/10.0.0.2/tcp/4001/p2p/" + nodeB}, LastHeard: now.Add(-4 * time.Second), Conn: "relayed"},
		{ID: "12D3KooWnever", State: "dead"},
	})
	code, out, errOut := n.run("peers")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, %q", code, errOut)
	}
	rows := table(out)
	if strings.Join(rows[0], "|") != "ID|STATE|REGION|CARDS|FREE|MODELS|LAST HEARD|CONN|ADDR" || len(rows) != 4 {
		t.Fatalf("table:\n%s", out)
	}
	want := [][]string{
		{"12*aaaaaa (self)", "alive", "cn-sh", "8", "6", "h100-sxm-80g", "-", "-", "/ip4/10.0.0.1/tcp/4001/p2p/" + nodeA},
		{"12*bbbbbb", "suspect", "-", "3", "0", "rtx4090-24g,rtx4090-48g", "4s ago", "relayed", "/ip4/10.0.0.2/tcp/4001/p2p/" + nodeB},
		{"12*Wnever", "dead", "-", "0", "0", "-", "never", "none", "-"},
	}
	for i, w := range want {
		if strings.Join(rows[i+1], "|") != strings.Join(w, "|") {
			t.Errorf("row %d = %q\nwant    %q", i+1, rows[i+1], w)
		}
	}

	code, out, _ = n.run("peers", "--json")
	var peers []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &peers) != nil || len(peers) != 3 {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}
	for i, p := range peers {
		for _, k := range []string{"id", "state", "cards", "free_cards", "addrs"} {
			if _, ok := p[k]; !ok {
				t.Errorf("peer %d has no %q: %v", i, k, p)
			}
		}
	}
	if peers[0]["self"] != true || peers[0]["id"] != nodeA || len(peers[0]["addrs"].([]any)) != 2 || peers[1]["self"] != nil {
		t.Errorf("--json: %v", peers)
	}
}

func TestPeersNodeDown(t *testing.T) {
	n := newFakeNode(t)
	addr := closedAddr(t)
	code, out, errOut := n.run("peers", "--api", addr)
	if code != exitError || out != "" {
		t.Errorf("exit %d, %q", code, out)
	}
	oneLineErr(t, "node down", errOut, "cannot reach the gpumesh API at "+addr, "`gpumesh node` running there")
}
