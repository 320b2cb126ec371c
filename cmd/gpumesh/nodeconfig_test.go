package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
)

// nodeFlagSet is the flag set of `gpumesh node`, as the command builds it.
func nodeFlagSet(t *testing.T) *pflag.FlagSet {
	t.Helper()
	cmd := newNodeCommand(env{getenv: func(string) string { return "" }})
	return cmd.Flags()
}

// printed runs `gpumesh node ... --print-config` and decodes its TOML.
func printed(t *testing.T, n *fakeNode, args ...string) map[string]any {
	t.Helper()
	code, out, errOut := n.run(append([]string{"node"}, append(args, "--print-config")...)...)
	if code != exitOK {
		t.Fatalf("node %q --print-config: exit %d: %s", args, code, errOut)
	}
	var got map[string]any
	if err := toml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--print-config printed no TOML (%v):\n%s", err, out)
	}
	return got
}

// Every flag of gpumesh node is a key of the file: a file that sets each
// one to a value other than its default comes back, key for key, from
// --print-config.
func TestEveryNodeFlagIsAConfigKey(t *testing.T) {
	fl := nodeFlagSet(t)
	want := map[string]any{}
	var file strings.Builder
	for _, key := range configKeys(fl) {
		f := fl.Lookup(key)
		var v any
		switch {
		case key == "log-format":
			v = "json"
		case key == "log-level":
			v = "debug"
		case f.Value.Type() == "bool":
			v = f.DefValue != "true"
		case f.Value.Type() == "int":
			v = int64(77)
		case f.Value.Type() == "duration":
			v = "7m0s"
		case f.Value.Type() == "stringArray":
			v = []any{"x-" + key, "y-" + key}
		case pathKeys[key]:
			v = "/srv/" + key
		default:
			v = "v-" + key
		}
		want[key] = v
		b, err := toml.Marshal(map[string]any{key: v})
		if err != nil {
			t.Fatal(err)
		}
		file.Write(b)
	}
	if len(want) < 25 {
		t.Fatalf("only %d keys: %v", len(want), configKeys(fl))
	}
	path := filepath.Join(t.TempDir(), "node.toml")
	writeFile(t, path, file.String())
	got := printed(t, &fakeNode{t: t, env: map[string]string{}}, "--config", path)
	if !reflect.DeepEqual(got, want) {
		for k := range want {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("key %s: printed %#v, want %#v", k, got[k], want[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("printed key %s that is no flag", k)
			}
		}
	}
	for _, k := range []string{"config", "print-config", "help"} {
		if _, ok := got[k]; ok {
			t.Errorf("--print-config printed %s, which is no key", k)
		}
	}
}

// A flag on the command line wins over the file; the file wins over the
// defaults; relative paths in the file are relative to the file.
func TestNodeFlagsOverrideTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.toml")
	writeFile(t, path, `region = "cn-east"
listen = ["/ip4/127.0.0.1/tcp/5001"]
mdns = false
max-job-pids = 500
data = "state"
`)
	n := &fakeNode{t: t, env: map[string]string{}}
	got := printed(t, n, "--config", path, "--region", "eu-west", "--listen", "/ip4/127.0.0.1/tcp/6001", "--listen", "/ip4/127.0.0.1/tcp/6002")
	for key, want := range map[string]any{
		"region":        "eu-west",
		"listen":        []any{"/ip4/127.0.0.1/tcp/6001", "/ip4/127.0.0.1/tcp/6002"},
		"mdns":          false,
		"max-job-pids":  int64(500),
		"data":          filepath.Join(dir, "state"),
		"coordinator":   "auto",
		"drain-timeout": "0s",
	} {
		if !reflect.DeepEqual(got[key], want) {
			t.Errorf("%s: %#v, want %#v", key, got[key], want)
		}
	}
}

// Without --config the node reads the system file when it exists, else the
// user's ($XDG_CONFIG_HOME/gpumesh/node.toml, else ~/.config/...), else
// none.
func TestNodeConfigDefaultLocation(t *testing.T) {
	root := t.TempDir()
	home, xdg := filepath.Join(root, "home"), filepath.Join(root, "xdg")
	system := filepath.Join(root, "etc", "node.toml")
	run := func(env map[string]string, sys string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		code := runEnv(context.Background(), []string{"node", "--print-config"}, envWith(env, sys, &out, &errOut))
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		var got map[string]any
		if err := toml.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		return got["region"].(string)
	}
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}
	if got := run(env, system); got != "" {
		t.Errorf("no file anywhere: region %q", got)
	}
	writeFile(t, filepath.Join(home, ".config", "gpumesh", "node.toml"), `region = "home"`)
	if got := run(map[string]string{"HOME": home}, system); got != "home" {
		t.Errorf("~/.config file: region %q", got)
	}
	writeFile(t, filepath.Join(xdg, "gpumesh", "node.toml"), `region = "xdg"`)
	if got := run(env, system); got != "xdg" {
		t.Errorf("$XDG_CONFIG_HOME file: region %q", got)
	}
	writeFile(t, system, `region = "system"`)
	if got := run(env, system); got != "system" {
		t.Errorf("system file: region %q", got)
	}
}

func envWith(vars map[string]string, system string, stdout, stderr *bytes.Buffer) env {
	return env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr,
		getenv: func(k string) string { return vars[k] }, systemConfig: system}
}

// A bad file is refused with its name, the line and the key, exit 2, and
// nothing is started or written.
func TestNodeRefusesABadConfigFile(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	unreadable := filepath.Join(dir, "unreadable.toml")
	if err := os.Mkdir(unreadable, 0o700); err != nil { // a directory: unreadable as a file, even by root
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"typo.toml", "mdns = false\nregoin = \"x\"\n", []string{"typo.toml:2: key \"regoin\": no such key (did you mean region?)"}},
		{"underscore.toml", "max_job_pids = 10\n", []string{"underscore.toml:1: key \"max_job_pids\": no such key (did you mean max-job-pids?)"}},
		{"type.toml", "\nmdns = \"no\"\n", []string{"type.toml:2: key \"mdns\": want true or false, got the string \"no\""}},
		{"int.toml", "max-job-pids = \"many\"\n", []string{"int.toml:1: key \"max-job-pids\": want an integer, got the string \"many\""}},
		{"list.toml", "join = [1, 2]\n", []string{"list.toml:1: key \"join\": want a list of strings, got the integer 1 at index 0"}},
		{"duration.toml", "drain-timeout = \"5 minutes\"\n", []string{"duration.toml:1: key \"drain-timeout\": \"5 minutes\": time: unknown unit"}},
		{"level.toml", "log-level = \"loud\"\n", []string{"level.toml:1: key \"log-level\": \"loud\": want debug, info, warn or error"}},
		{"refused.toml", "# a comment\n\ncoordinator = \"sometimes\"\n", []string{"refused.toml:3: key \"coordinator\": coordinator mode \"sometimes\": want auto or never"}},
		{"pids.toml", "max-job-pids = 3\n", []string{"pids.toml:1: key \"max-job-pids\": want 0 (no cap) or at least"}},
		{"join.toml", "join = [\"/ip4/10.0.0.1/tcp/4747\"]\n", []string{"join.toml:1: key \"join\": \"/ip4/10.0.0.1/tcp/4747\": want a full multiaddr ending in /p2p/<peer ID>"}},
		{"syntax.toml", "region = \"x\"\nmdns = \n", []string{"syntax.toml:2: not TOML"}},
		{"table.toml", "[mesh]\nlisten = \"x\"\n", []string{"table.toml:1: key \"mesh\": tables are not used"}},
		{"dotted.toml", "mesh.listen = \"x\"\n", []string{"dotted.toml:1: key \"mesh.listen\": dotted keys are not used"}},
		{"help.toml", "config = \"x.toml\"\n", []string{"help.toml:1: key \"config\": no such key"}},
		{"missing.toml", "", []string{"missing.toml: cannot read it: no such file or directory"}},
		{"unreadable.toml", "", []string{"unreadable.toml: cannot read it:"}},
	} {
		path := filepath.Join(dir, tc.name)
		if tc.body != "" {
			writeFile(t, path, tc.body)
		}
		code, out, errOut := runNode(t, map[string]string{}, "--config", path, "--data", data, "--api", "", "--listen", "/ip4/127.0.0.1/tcp/0")
		if code != exitUsage || out != "" {
			t.Errorf("%s: exit %d, stdout %q; want exit 2 and nothing", tc.name, code, out)
		}
		oneLineErr(t, tc.name, errOut, append([]string{path}, tc.want...)...)
		if strings.Contains(errOut, "--") && strings.HasPrefix(tc.name, "refused") {
			t.Errorf("%s: the message names the flag, not the key: %q", tc.name, errOut)
		}
	}
	if got := listing(t, data); got != "<none>" {
		t.Errorf("a refused config left %s in the data dir", got)
	}
}

// A node starts from its file: the API it serves and the cards it offers
// are the file's.
func TestNodeStartsFromItsConfigFile(t *testing.T) {
	dir := t.TempDir()
	apiAddr := closedAddr(t)
	path := filepath.Join(dir, "node.toml")
	writeFile(t, path, fmt.Sprintf(`data = "data"
api = %q
listen = ["/ip4/127.0.0.1/tcp/0"]
sim = "rtx4090-48g:3"
mdns = false
no-nat = true
isolation = "process"
`, apiAddr))
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	n := &fakeNode{t: t, env: map[string]string{}}
	go func() { done <- n.runTo(ctx, &stdout, &stderr, "node", "--config", path) }()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("node exit %d: %s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("node did not stop within 30 s")
		}
	}()
	var cards []map[string]any
	waitFor(t, "the node's API from the file serves its simulated cards", func() bool {
		select {
		case code := <-done:
			t.Fatalf("node exited %d: %s", code, stderr.String())
		default:
		}
		resp, err := http.Get("http://" + apiAddr + "/v1/cards")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Cards []map[string]any `json:"cards"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false
		}
		cards = body.Cards
		return len(cards) > 0
	})
	if len(cards) != 3 {
		t.Errorf("the node offers %d cards, want the file's 3: %v", len(cards), cards)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "identity.key")); err != nil {
		t.Errorf("the data dir relative to the file holds no identity: %v", err)
	}
}

// gpumesh node init writes a file from the cards found and the flags
// given, which the node reads back as given; it keeps an existing file
// unless --force, and a bad flag writes nothing.
func TestNodeInit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpumesh", "node.toml")
	n := &fakeNode{t: t, env: map[string]string{"HOME": dir}}
	code, out, errOut := n.run("node", "init", "--config", path, "--sim", "h100-sxm-80g:8,rtx4090-48g:2", "--region", "cn-east", "--max-job-memory", "16GiB", "--mdns=false", "--join", "/ip4/10.0.0.5/tcp/4747/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo")
	if code != exitOK || errOut != "" {
		t.Fatalf("node init: exit %d: %s", code, errOut)
	}
	if want := "wrote " + path + " (10 cards: 8 × h100-sxm-80g, 2 × rtx4090-48g); start the node with: gpumesh node --config " + path + "\n"; out != want {
		t.Errorf("node init said %q, want %q", out, want)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#   8 × h100-sxm-80g (asks ", "#   2 × rtx4090-48g (asks ", "# price = ['h100-sxm-80g=", "\nregion = 'cn-east'\n", "\nmdns = false\n", "# coordinator = 'auto'\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the file lacks %q:\n%s", want, body)
		}
	}
	got := printed(t, n, "--config", path)
	for key, want := range map[string]any{"region": "cn-east", "max-job-memory": "16GiB", "mdns": false, "sim": "h100-sxm-80g:8,rtx4090-48g:2",
		"join": []any{"/ip4/10.0.0.5/tcp/4747/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"}, "coordinator": "auto"} {
		if !reflect.DeepEqual(got[key], want) {
			t.Errorf("read back %s = %#v, want %#v", key, got[key], want)
		}
	}

	code, _, errOut = n.run("node", "init", "--config", path, "--region", "other")
	if code != exitUsage {
		t.Errorf("init over an existing file: exit %d", code)
	}
	oneLineErr(t, "init over an existing file", errOut, path+" exists: --force to replace it")
	if again, _ := os.ReadFile(path); !bytes.Equal(again, body) {
		t.Error("init without --force changed the file")
	}
	if code, _, errOut = n.run("node", "init", "--config", path, "--force", "--region", "other"); code != exitOK {
		t.Fatalf("init --force: exit %d: %s", code, errOut)
	}
	if got := printed(t, n, "--config", path); got["region"] != "other" || got["mdns"] != true {
		t.Errorf("after init --force: region %v, mdns %v", got["region"], got["mdns"])
	}

	bad := filepath.Join(dir, "bad", "node.toml")
	code, _, errOut = n.run("node", "init", "--config", bad, "--coordinator", "sometimes")
	if code != exitUsage {
		t.Errorf("init with a bad flag: exit %d", code)
	}
	oneLineErr(t, "init with a bad flag", errOut, "--coordinator")
	if got := listing(t, filepath.Join(dir, "bad")); got != "<none>" {
		t.Errorf("init with a bad flag wrote %s", got)
	}
}

// As root with no --config, init writes the system file with the
// service's data dir.
func TestNodeInitAsRootWritesTheSystemFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("init checks that root can make the service data dir " + serviceDataDir + ": run as root to test it")
	}
	dir := t.TempDir()
	system := filepath.Join(dir, "etc", "gpumesh", "node.toml")
	var out, errOut bytes.Buffer
	e := envWith(map[string]string{"HOME": dir}, system, &out, &errOut)
	e.geteuid = func() int { return 0 }
	if code := runEnv(context.Background(), []string{"node", "init", "--sim", "h100-sxm-80g:1"}, e); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "wrote "+system+" ") || !strings.HasSuffix(out.String(), "start the node with: gpumesh node\n") {
		t.Errorf("init said %q", out.String())
	}
	body, err := os.ReadFile(system)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "\ndata = '"+serviceDataDir+"'\n") {
		t.Errorf("the system file does not set data to %s:\n%s", serviceDataDir, body)
	}
}

// The configuration the packages install is one the node takes.
func TestPackagedConfigIsValid(t *testing.T) {
	path, err := filepath.Abs("../../deploy/node.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := printed(t, &fakeNode{t: t, env: map[string]string{}}, "--config", path)
	if got["data"] != "/var/lib/gpumesh" || got["drain-timeout"] != "5m0s" {
		t.Errorf("the packaged configuration gives data %v, drain-timeout %v", got["data"], got["drain-timeout"])
	}
}
