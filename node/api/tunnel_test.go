package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net/http"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/tunnel/wire"
)

// tunnels is a Backend that opens every tunnel it is asked for, or would.
type tunnels struct {
	Backend
	opened int
}

func (t *tunnels) OpenExec(context.Context, string, []byte) (wire.HalfCloser, error) {
	t.opened++
	return nil, Errorf(http.StatusConflict, "job j1 is not running")
}

func (t *tunnels) OpenForward(context.Context, string, []byte) (wire.HalfCloser, error) {
	t.opened++
	return nil, Errorf(http.StatusConflict, "job j1 is not running")
}

func (t *tunnels) ServeService(w http.ResponseWriter, r *http.Request, job, path string) {
	w.Write([]byte(job + " " + path))
}

func TestTunnelRoutesNeedTheUpgradeAndAnOwner(t *testing.T) {
	const ownerTok = "alice-owner-token-0123"
	k, _ := owner.KeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	b := &tunnels{}
	h := Handler(Config{OwnerTokens: map[string]owner.Key{ownerTok: k}}, b, nil)
	for _, c := range []struct {
		method, path, auth string
		status             int
		says               string
	}{
		{"POST", "/v1/jobs/j1/exec", "", 400, "opens a tunnel: send \"Connection: Upgrade\""},
		{"POST", "/v1/jobs/j1/forward", "", 400, "Upgrade: gpumesh-tunnel"},
		{"GET", "/v1/jobs/j1/exec", "", 405, "use POST"},
		{"GET", "/v1/jobs/j1/http/v1/models", "", 403, "needs the owner's key"},
		{"GET", "/v1/jobs/j1/http/v1/models", "Bearer " + ownerTok, 200, "j1 /v1/models"},
		{"DELETE", "/v1/jobs/j1/http", "Bearer " + ownerTok, 200, "j1 /"},
	} {
		a := do(t, h, c.method, c.path, c.auth)
		if a.status != c.status || !strings.Contains(a.error+a.body, c.says) {
			t.Errorf("%s %s: %d %q; want %d saying %q", c.method, c.path, a.status, a.error+a.body, c.status, c.says)
		}
	}
	if b.opened != 0 {
		t.Errorf("%d tunnels opened without the upgrade", b.opened)
	}
	plain := Handler(Config{OwnerTokens: map[string]owner.Key{ownerTok: k}}, ownerJobs{}, nil)
	if a := do(t, plain, "GET", "/v1/jobs/j1/http/x", "Bearer "+ownerTok); a.status != 404 || !strings.Contains(a.error, "proxies no services") {
		t.Errorf("a node without tunnels: %d %q", a.status, a.error)
	}
}
