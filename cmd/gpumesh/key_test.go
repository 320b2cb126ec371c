package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/ownerkey"
)

// testKeyFile makes an owner key in a temporary directory for the
// commands under test ($GPUMESH_KEY).
func testKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "owner.key")
	if _, err := ownerkey.Create(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKeyCreateAndShow(t *testing.T) {
	home := t.TempDir()
	n := &fakeNode{t: t, env: map[string]string{"HOME": home}}
	code, out, errOut := n.run("key", "create")
	if code != 0 {
		t.Fatalf("key create: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if _, err := owner.ParseID(id); err != nil {
		t.Fatalf("key create printed %q: %v", out, err)
	}
	path := filepath.Join(home, ".config", "gpumesh", "owner.key")
	if !strings.Contains(errOut, path) {
		t.Errorf("key create does not say where the key went: %q", errOut)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	di, _ := os.Stat(filepath.Dir(path))
	if runtime.GOOS != "windows" && (fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700) {
		t.Errorf("key file mode %v, directory %v; want 0600 and 0700", fi.Mode().Perm(), di.Mode().Perm())
	}
	if code, out, _ := n.run("key", "show"); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("key show: exit %d, %q; want %s", code, out, id)
	}
	before, _ := os.ReadFile(path)
	code, out, errOut = n.run("key", "create")
	if code != exitUsage || out != "" {
		t.Errorf("key create over a key: exit %d, %q; want 2 and nothing", code, out)
	}
	oneLineErr(t, "create over a key", errOut, path, "exists there already")
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("key create overwrote the key")
	}

	// $XDG_CONFIG_HOME, then $GPUMESH_KEY, then --key choose the file.
	xdg := t.TempDir()
	n.env["XDG_CONFIG_HOME"] = xdg
	if code, _, errOut := n.run("key", "create"); code != 0 || !strings.Contains(errOut, filepath.Join(xdg, "gpumesh", "owner.key")) {
		t.Errorf("key create under XDG_CONFIG_HOME: exit %d, %q", code, errOut)
	}
	other := filepath.Join(t.TempDir(), "k")
	n.env[envKey] = other
	code, out, _ = n.run("key", "create")
	if code != 0 || strings.TrimSpace(out) == id {
		t.Errorf("key create at $GPUMESH_KEY: exit %d, %q", code, out)
	}
	flagged := filepath.Join(t.TempDir(), "f")
	if code, _, _ := n.run("key", "create", "--key", flagged); code != 0 {
		t.Errorf("key create --key: exit %d", code)
	}
	if _, err := os.Stat(flagged); err != nil {
		t.Errorf("--key did not choose the file: %v", err)
	}
}

func TestKeyShowRefusesWhatIsNotAUsableKey(t *testing.T) {
	dir := t.TempDir()
	n := &fakeNode{t: t, env: map[string]string{"HOME": dir}}
	code, _, errOut := n.run("key", "show")
	if code != exitError {
		t.Errorf("no key: exit %d", code)
	}
	oneLineErr(t, "no key", errOut, "no owner key at", "gpumesh key create")

	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a key"), 0o600)
	code, _, errOut = n.run("key", "show", "--key", junk)
	if code != exitError {
		t.Errorf("junk key: exit %d", code)
	}
	oneLineErr(t, "junk key", errOut, "--key", "not an owner key")

	if runtime.GOOS != "windows" {
		open := filepath.Join(dir, "open.key")
		if _, err := ownerkey.Create(open); err != nil {
			t.Fatal(err)
		}
		os.Chmod(open, 0o644)
		code, _, errOut = n.run("key", "show", "--key", open)
		if code != exitError {
			t.Errorf("world-readable key: exit %d", code)
		}
		oneLineErr(t, "world-readable key", errOut, "readable by others", "chmod 600")
	}
	missing := filepath.Join(dir, "missing.key")
	code, _, errOut = n.run("key", "show", "--key", missing)
	if code != exitUsage {
		t.Errorf("--key naming no file: exit %d", code)
	}
	oneLineErr(t, "missing --key", errOut, "--key: no owner key at "+missing)
}

// The job commands act as the owner: without a key (or a token) they say
// how to make one, and send nothing.
func TestJobCommandsNeedAnOwnerKey(t *testing.T) {
	n := newFakeNode(t)
	n.env[envKey] = ""
	n.env["HOME"] = t.TempDir()
	for _, args := range [][]string{{"jobs"}, {"job", "j1"}, {"cancel", "j1"}, {"logs", "j1"}, {"submit", "--gpus", "1", "--", "true"}} {
		code, out, errOut := n.run(args...)
		if code != exitError || out != "" {
			t.Errorf("%v without a key: exit %d, %q", args, code, out)
		}
		oneLineErr(t, strings.Join(args, " "), errOut, "no owner key at", "gpumesh key create")
	}
	if got := len(n.b.Submitted()); got != 0 {
		t.Errorf("%d submissions without a key", got)
	}
	// Commands about the node itself need none.
	if code, _, errOut := n.run("peers"); code != 0 {
		t.Errorf("peers without a key: exit %d: %s", code, errOut)
	}
}
