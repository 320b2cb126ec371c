package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runNode runs `gpumesh node` with args after flags that keep it off the
// network and the real cards. Every test here expects it to refuse to
// start; should it start, the deadline stops it and its exit status 0
// fails the test.
func runNode(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	n := &fakeNode{t: t, env: env}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	base := []string{"node", "--sim", "h100-sxm-80g:1", "--mdns=false", "--no-nat", "--isolation", "process"}
	code := n.runTo(ctx, &stdout, &stderr, append(base, args...)...)
	return code, stdout.String(), stderr.String()
}

// listing is what a directory holds, by name ("" when it does not exist).
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return "[" + strings.Join(names, " ") + "]"
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	n := &fakeNode{t: t, env: map[string]string{}}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"nodee"}, []string{`unknown command "nodee" for "gpumesh"`, "(did you mean node?)", "`gpumesh --help`"}},
		{[]string{"key", "crate"}, []string{`unknown command "crate" for "gpumesh key"`, "(did you mean create?)"}},
	} {
		code, out, errOut := n.run(tc.args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, stdout %q; want exit 2 and nothing", tc.args, code, out)
		}
		oneLineErr(t, strings.Join(tc.args, " "), errOut, tc.want...)
	}
	// A group without its subcommand prints its help.
	if code, out, _ := n.run("key"); code != exitOK || !strings.Contains(out, "create") {
		t.Errorf("gpumesh key: exit %d, %q", code, out)
	}
}

// A --data that cannot be a data dir is a usage error naming it, and
// nothing is written.
func TestNodeRefusesABadDataDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeFile(t, file, "keep me")
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	for _, tc := range []struct {
		data string
		want []string
	}{
		{file, []string{"--data " + file + ": is a file, not a directory"}},
		{filepath.Join(file, "sub"), []string{"--data " + filepath.Join(file, "sub") + ": " + file + " is a file, not a directory"}},
		{"~bob/gpumesh", []string{"--data ~bob/gpumesh: only ~ and ~/… are expanded"}},
	} {
		code, out, errOut := runNode(t, env, "--data", tc.data, "--api", "")
		if code != exitUsage || out != "" {
			t.Errorf("--data %s: exit %d, %q", tc.data, code, out)
		}
		oneLineErr(t, "--data "+tc.data, errOut, tc.want...)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" || listing(t, dir) != "[file]" || listing(t, home) != "[]" {
		t.Errorf("a refused --data changed something: %q, %s, home %s", b, listing(t, dir), listing(t, home))
	}
}

func TestResolvePath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(t.TempDir(), "home")
	e := env{getenv: func(k string) string { return map[string]string{"HOME": home, "USERPROFILE": home}[k] }}
	for _, tc := range []struct{ in, want, err string }{
		{"~", home, ""},
		{"~/gpumesh-a", filepath.Join(home, "gpumesh-a"), ""},
		{"gpumesh-a", filepath.Join(wd, "gpumesh-a"), ""},
		{"./a/../b", filepath.Join(wd, "b"), ""},
		{filepath.Join(home, "x"), filepath.Join(home, "x"), ""},
		{"~bob", "", "only ~ and ~/… are expanded"},
		{"", "", "a directory is required"},
	} {
		got, err := resolvePath(tc.in, e)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %q, %v; want an error saying %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	noHome := env{getenv: func(string) string { return "" }}
	if _, err := resolvePath("~/x", noHome); err == nil || !strings.Contains(err.Error(), "no home directory") {
		t.Errorf("~ without a home: %v", err)
	}
}

// A start that fails on a check after the data dir's (here: the API's
// port is taken) leaves the data dir as it was: no identity.key,
// owner.key or state.db, and no directory made.
func TestRefusedStartLeavesTheDataDirAsItWas(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	root := t.TempDir()
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{filepath.Join(root, "new", "gpumesh"), empty} {
		code, _, errOut := runNode(t, map[string]string{}, "--data", data, "--api", busy.Addr().String(), "--listen", "/ip4/127.0.0.1/tcp/0")
		if code != exitError {
			t.Errorf("--data %s with the API's port taken: exit %d: %s", data, code, errOut)
		}
		oneLineErr(t, "API port taken", errOut, "node did not start", busy.Addr().String())
	}
	if got := listing(t, root); got != "[empty]" {
		t.Errorf("the refused starts left %s in %s, want [empty]", got, root)
	}
	if got := listing(t, empty); got != "[]" {
		t.Errorf("the refused start left %s in an empty data dir", got)
	}
}
