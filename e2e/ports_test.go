//go:build unix

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// A second node started on a running node's mesh port (libp2p opens it to
// be shared, SO_REUSEPORT: the second node came up on it and advertised
// it) or API port is refused with one line naming the port and the first
// node's process, exit 1, and writes nothing; the first node serves on.
func TestSecondNodeOnATakenPortIsRefused(t *testing.T) {
	a := startNode(t, "a", "--sim", "h100-sxm-80g:1")
	holder := fmt.Sprintf("is in use by pid %d (%s node --data %s", a.cmd.Process.Pid, binary, a.dataDir)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"mesh port", []string{"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", a.p2pPort), "--api", fmt.Sprintf("127.0.0.1:%d", freePort(t))},
			fmt.Sprintf("node did not start: mesh: listen address /ip4/127.0.0.1/tcp/%d: TCP port %d %s", a.p2pPort, a.p2pPort, holder)},
		{"API port", []string{"--listen", "/ip4/127.0.0.1/tcp/0", "--api", a.apiAddr},
			fmt.Sprintf("node did not start: api: %s: TCP port %s %s", a.apiAddr, a.apiAddr[strings.LastIndex(a.apiAddr, ":")+1:], holder)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "b")
			// Should the node start after all, the deadline ends it.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, append([]string{"node", "--data", data, "--sim", "h100-sxm-80g:1",
				"--mdns=false", "--no-nat", "--isolation", "process"}, tc.args...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("second node: %v, want exit status 1; stderr:\n%s", err, stderr.String())
			}
			if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "gpumesh: "+tc.want) {
				t.Errorf("stderr %q, want one line starting %q", got, "gpumesh: "+tc.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the refused node made its data dir: %v", err)
			}
		})
	}
	var peers api.PeerList
	if err := a.get("/v1/peers", &peers); err != nil || len(peers.Peers) != 1 {
		t.Errorf("the first node after the refusals: %v, %d peers", err, len(peers.Peers))
	}
}
