package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client/clienttest"
)

// tokenNode serves a fake node that needs a token.
func tokenNode(t *testing.T, token string) *fakeNode {
	t.Helper()
	b := clienttest.New()
	b.AddJob(market.JobRecord{ID: "j1", State: market.JobRunning})
	srv := b.Serve(t, token)
	return &fakeNode{t: t, b: b, addr: srv.Listener.Addr().String(), env: map[string]string{envAPI: srv.URL, envKey: testKeyFile(t)}}
}

func TestAPIToken(t *testing.T) {
	n := tokenNode(t, "s3cret")
	code, out, errOut := n.run("jobs")
	if code != exitError || out != "" {
		t.Errorf("no token: exit %d, %q", code, out)
	}
	oneLineErr(t, "no token", errOut, "missing or wrong API token", "--api-token-file", envAPIToken)

	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := n.run("jobs", "--api-token-file", file); code != 0 || !strings.Contains(out, "j1") {
		t.Errorf("token file: exit %d, %q, %q", code, out, errOut)
	}
	n.env[envAPIToken] = "s3cret"
	if code, out, _ := n.run("job", "j1"); code != 0 || !strings.Contains(out, "running") {
		t.Errorf("token from the environment: exit %d, %q", code, out)
	}
	// The file wins over the environment.
	wrong := filepath.Join(t.TempDir(), "wrong")
	os.WriteFile(wrong, []byte("nope"), 0o600)
	if code, _, _ := n.run("jobs", "--api-token-file", wrong); code != exitError {
		t.Errorf("a wrong token file was not used: exit %d", code)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	spaced := filepath.Join(t.TempDir(), "spaced")
	os.WriteFile(spaced, []byte("two words"), 0o600)
	for _, tc := range []struct {
		file string
		want string
	}{
		{filepath.Join(t.TempDir(), "missing"), "--api-token-file: open "},
		{empty, "--api-token-file: " + empty + " is empty"},
		{spaced, "--api-token-file " + spaced + ": API token contains a space"},
	} {
		code, _, errOut := n.run("jobs", "--api-token-file", tc.file)
		if code != exitUsage {
			t.Errorf("%s: exit %d", tc.file, code)
		}
		oneLineErr(t, tc.file, errOut, tc.want)
	}
}

func TestAPIAddress(t *testing.T) {
	n := newFakeNode(t)
	good := n.addr
	// --api wins over GPUMESH_API.
	n.env[envAPI] = closedAddr(t)
	if code, _, errOut := n.run("jobs", "--api", good); code != 0 {
		t.Errorf("--api over the environment: exit %d, %q", code, errOut)
	}
	code, _, errOut := n.run("jobs")
	if code != exitError || !strings.Contains(errOut, n.env[envAPI]) {
		t.Errorf("GPUMESH_API not used: exit %d, %q", code, errOut)
	}
	n.env[envAPI] = "http://" + good
	if code, _, errOut := n.run("jobs"); code != 0 {
		t.Errorf("an http:// address: exit %d, %q", code, errOut)
	}
	n.env[envAPI] = "bogus"
	code, _, errOut = n.run("jobs")
	if code != exitUsage {
		t.Errorf("bad GPUMESH_API: exit %d", code)
	}
	oneLineErr(t, "bad GPUMESH_API", errOut, "GPUMESH_API: ", `"bogus"`)
	code, _, errOut = n.run("peers", "--api", "ftp://x:1")
	if code != exitUsage {
		t.Errorf("bad --api: exit %d", code)
	}
	oneLineErr(t, "bad --api", errOut, "--api: ", "http://")
	// An empty --api is a mistake, not the default.
	code, _, errOut = n.run("jobs", "--api", "")
	if code != exitUsage {
		t.Errorf("empty --api: exit %d", code)
	}
	oneLineErr(t, "empty --api", errOut, "--api: empty address")
	// Nothing set: the default address (unless a node answers there, the
	// message names it).
	delete(n.env, envAPI)
	if code, _, errOut := n.run("jobs"); code != 0 && !strings.Contains(errOut, api.DefaultAddr) {
		t.Errorf("default address not used: %q", errOut)
	}
}

// Every client command says what it does and takes the API flags.
func TestClientCommandsHelp(t *testing.T) {
	n := newFakeNode(t)
	for cmd, flags := range map[string][]string{
		"jobs":   {"--json"},
		"job":    {"--json", "--explain"},
		"logs":   {"--follow", "--share", "--stderr"},
		"cancel": {"--json"},
		"scale":  {"--json", "CARDS"},
		"peers":  {"--json", "self"},
		"status": {"--json", "warnings"},
	} {
		code, out, _ := n.run(cmd, "--help")
		if code != 0 {
			t.Errorf("%s --help: exit %d", cmd, code)
		}
		for _, f := range append(flags, "--api", "--api-token-file", envAPI) {
			if !strings.Contains(out, f) {
				t.Errorf("%s --help lacks %q", cmd, f)
			}
		}
	}
	code, out, _ := n.run("--help")
	for _, c := range []string{"submit", "jobs", "job", "logs", "cancel", "scale", "peers", "status"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("gpumesh --help does not list %s", c)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
}
