package gossip

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	basicconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

// withConnMgr is a host that answers only ConnManager.
type withConnMgr struct {
	host.Host
	cm connmgr.ConnManager
}

func (h withConnMgr) ConnManager() connmgr.ConnManager { return h.cm }

func TestPubsubLoggerKeepsWarningsButTheNoDecayOne(t *testing.T) {
	decaying, err := basicconnmgr.NewConnManager(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer decaying.Close()
	for _, tc := range []struct {
		name     string
		cm       connmgr.ConnManager
		wantDrop bool
	}{
		{"no decay (in-memory host)", &connmgr.NullConnMgr{}, true},
		{"decaying connection manager", decaying, false},
	} {
		var out bytes.Buffer
		l := pubsubLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), withConnMgr{cm: tc.cm})
		l.Debug("rpc sent")
		l.Warn(noDecayWarning, "err", "no decaying tag registered")
		l.With("component", "gossip").Warn("peer score below the graylist")
		got := out.String()
		if strings.Contains(got, "rpc sent") {
			t.Errorf("%s: gossipsub's debug lines reach the node's log", tc.name)
		}
		if !strings.Contains(got, "peer score below the graylist") {
			t.Errorf("%s: a warning of gossipsub is dropped:\n%s", tc.name, got)
		}
		if dropped := !strings.Contains(got, noDecayWarning); dropped != tc.wantDrop {
			t.Errorf("%s: the no-decay warning dropped = %v, want %v", tc.name, dropped, tc.wantDrop)
		}
	}
}
