package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/ownerkey"
	"github.com/spf13/pflag"
)

func newOwnerKey(t *testing.T, dir string) (owner.Key, string) {
	t.Helper()
	path := filepath.Join(dir, "k-"+strings.ReplaceAll(t.Name(), "/", "-")+time.Now().Format("150405.000000000"))
	k, err := ownerkey.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	return k, path
}

// nodeConfig is the config `gpumesh node` would start with the given
// policy flags.
func nodeConfig(t *testing.T, p policyFlags, api string) (node.Config, error) {
	t.Helper()
	if p.maxMemory == "" {
		p.maxMemory = "0"
	}
	f := nodeFlags{data: t.TempDir(), api: api, network: "gpumesh", coordinator: "auto", isolation: "process", policy: p,
		ckptEvery: node.DefaultCheckpointInterval, ckptKeep: node.DefaultCheckpointKeep, ckptMaxMiB: 256, keepOutputs: node.DefaultKeepOutputs, keepLogs: executor.DefaultKeepLogs, keepJobs: node.DefaultKeepJobs, log: &logFlags{format: "text", level: logLevel(slog.LevelInfo)}}
	return f.config(env{getenv: func(string) string { return "" }, stderr: io.Discard})
}

func TestNodePolicyFlags(t *testing.T) {
	a, _ := newOwnerKey(t, t.TempDir())
	b, _ := newOwnerKey(t, t.TempDir())
	cfg, err := nodeConfig(t, policyFlags{allow: []string{string(a.ID()) + ", " + string(b.ID())}, deny: []string{string(b.ID())},
		maxDuration: 8 * time.Hour, network: "none"}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy
	if len(p.AllowOwners) != 2 || p.AllowOwners[0] != string(a.ID()) || p.AllowOwners[1] != string(b.ID()) ||
		p.DenyOwners[0] != string(b.ID()) || p.MaxDuration != 8*time.Hour || p.MaxNetwork != market.NetworkNone {
		t.Errorf("policy %+v", p)
	}
	for _, c := range []struct {
		name string
		p    policyFlags
		api  string
		want string
	}{
		{"a name", policyFlags{allow: []string{"alice"}, network: "egress"}, "", "--allow-owner: not an owner ID"},
		{"a typo", policyFlags{deny: []string{string(a.ID())[:20]}, network: "egress"}, "", "--deny-owner: not an owner ID"},
		{"negative", policyFlags{maxDuration: -time.Hour, network: "egress"}, "", "--max-job-duration: must not be negative"},
		{"lan", policyFlags{network: "lan"}, "", `--job-network: network "lan": want none, egress or host`},
		{"no tokens file", policyFlags{network: "egress", ownerTokens: filepath.Join(t.TempDir(), "nope")}, "127.0.0.1:0", "--owner-tokens: "},
		{"tokens without an API", policyFlags{network: "egress", ownerTokens: "x"}, "", "--owner-tokens: the node serves no API"},
	} {
		_, err := nodeConfig(t, c.p, c.api)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a usage error saying %q", c.name, err, c.want)
		}
	}
}

func TestNodeResourceCapFlags(t *testing.T) {
	cfg, err := nodeConfig(t, policyFlags{network: "egress", maxMemory: "16GiB", maxPids: 4096, maxCPUWeight: 500}, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Policy; p.MaxMemoryBytes != 16<<30 || p.MaxPids != 4096 || p.MaxCPUWeight != 500 {
		t.Errorf("policy %+v", p)
	}
	cfg, err = nodeConfig(t, policyFlags{network: "egress", maxMemory: "0"}, "")
	if err != nil || cfg.Policy.MaxMemoryBytes != 0 || cfg.Policy.MaxPids != 0 {
		t.Errorf("no caps: %+v, %v", cfg.Policy, err)
	}
	for _, c := range []struct {
		name string
		p    policyFlags
		want string
	}{
		{"memory without a unit", policyFlags{maxMemory: "16"}, "--max-job-memory: \"16\": no unit"},
		{"memory in parsecs", policyFlags{maxMemory: "2 parsecs"}, "--max-job-memory: "},
		{"empty memory", policyFlags{maxMemory: " "}, "--max-job-memory: "},
		{"tiny memory", policyFlags{maxMemory: "1MiB"}, "--max-job-memory: 1MiB is below the least a job may have"},
		{"negative pids", policyFlags{maxPids: -1}, "--max-job-pids: want 0 (no cap) or at least 8, got -1"},
		{"too few pids", policyFlags{maxPids: 3}, "--max-job-pids: "},
		{"cpu weight", policyFlags{maxCPUWeight: 20000}, "--max-job-cpu-weight: want 0 (no cap) or 1 to 10000, got 20000"},
		{"negative cpu weight", policyFlags{maxCPUWeight: -1}, "--max-job-cpu-weight: "},
	} {
		c.p.network = "egress"
		_, err := nodeConfig(t, c.p, "")
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a usage error saying %q", c.name, err, c.want)
		}
	}
}

// --max-job-memory auto is the machine's memory less the reserve; where
// that cannot be told, no cap, with a warning.
func TestNodeMaxJobMemoryAuto(t *testing.T) {
	cfg, err := nodeConfig(t, policyFlags{network: "egress", maxMemory: "auto", autoMemory: func() (int64, error) { return 7 << 30, nil }}, "")
	if err != nil || cfg.Policy.MaxMemoryBytes != 7<<30 {
		t.Errorf("auto: %d bytes, %v", cfg.Policy.MaxMemoryBytes, err)
	}
	var logs strings.Builder
	f := nodeFlags{data: t.TempDir(), network: "gpumesh", coordinator: "auto", isolation: "process",
		policy:    policyFlags{network: "egress", maxMemory: "AUTO", autoMemory: func() (int64, error) { return 0, errors.New("no /proc here") }},
		ckptEvery: node.DefaultCheckpointInterval, ckptKeep: node.DefaultCheckpointKeep, ckptMaxMiB: 0, keepOutputs: node.DefaultKeepOutputs, keepLogs: executor.DefaultKeepLogs, keepJobs: node.DefaultKeepJobs,
		log: &logFlags{format: "text", level: logLevel(slog.LevelInfo)}}
	cfg, err = f.config(env{getenv: func(string) string { return "" }, stderr: &logs})
	if err != nil || cfg.Policy.MaxMemoryBytes != 0 {
		t.Errorf("auto that cannot tell: %d bytes, %v", cfg.Policy.MaxMemoryBytes, err)
	}
	if !strings.Contains(logs.String(), "--max-job-memory auto: no memory cap on jobs") || !strings.Contains(logs.String(), "no /proc here") {
		t.Errorf("no warning logged:\n%s", logs.String())
	}
	if got, err := node.AutoJobMemory(); err == nil {
		cfg, err := nodeConfig(t, policyFlags{network: "egress", maxMemory: "auto"}, "")
		if err != nil || cfg.Policy.MaxMemoryBytes != got {
			t.Errorf("auto on this machine: %d bytes, %v; want node.AutoJobMemory's %d", cfg.Policy.MaxMemoryBytes, err, got)
		}
	}
}

// The flags as typed reach the node's configuration.
func TestNodeFlagsParse(t *testing.T) {
	e := env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard}
	parse := func(args ...string) node.Config {
		t.Helper()
		var f nodeFlags
		fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
		f.register(fs, e)
		if err := fs.Parse(append([]string{"--data", t.TempDir(), "--api", ""}, args...)); err != nil {
			t.Fatal(err)
		}
		f.policy.autoMemory = func() (int64, error) { return 30 << 30, nil }
		cfg, err := f.config(e)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse()
	if cfg.Executor.KeepAttemptDirs || cfg.Policy.MaxMemoryBytes != 30<<30 || cfg.Policy.MaxPids != node.DefaultMaxJobPids || cfg.Policy.MaxCPUWeight != 0 {
		t.Errorf("defaults: keep %v, policy %+v; want attempt dirs removed, memory auto, pids %d, no CPU cap",
			cfg.Executor.KeepAttemptDirs, cfg.Policy, node.DefaultMaxJobPids)
	}
	cfg = parse("--keep-attempt-dirs", "--max-job-memory", "24G", "--max-job-pids", "512", "--max-job-cpu-weight", "300")
	if !cfg.Executor.KeepAttemptDirs || cfg.Policy.MaxMemoryBytes != 24<<30 || cfg.Policy.MaxPids != 512 || cfg.Policy.MaxCPUWeight != 300 {
		t.Errorf("keep %v, policy %+v", cfg.Executor.KeepAttemptDirs, cfg.Policy)
	}
}

func TestNodeCommandDefaultsToEgress(t *testing.T) {
	cmd := newNodeCommand(env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard})
	fl := cmd.Flags().Lookup("job-network")
	if fl == nil || fl.DefValue != "egress" {
		t.Fatalf("--job-network default %v, want egress", fl)
	}
	for name, def := range map[string]string{"max-job-memory": "auto", "max-job-pids": "8192", "max-job-cpu-weight": "0", "keep-attempt-dirs": "false"} {
		if fl := cmd.Flags().Lookup(name); fl == nil || fl.DefValue != def {
			t.Errorf("--%s: %v, want default %s", name, fl, def)
		}
	}
	if u := cmd.Flags().Lookup("keep-attempt-dirs").Usage; !strings.Contains(u, "debugging") {
		t.Errorf("--keep-attempt-dirs says %q; want it marked for debugging", u)
	}
	for _, name := range []string{"allow-owner", "deny-owner", "max-job-duration", "owner-tokens"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("gpumesh node has no --%s", name)
		}
	}
}

func TestOwnerTokensFile(t *testing.T) {
	dir := t.TempDir()
	a, aPath := newOwnerKey(t, dir)
	b, bPath := newOwnerKey(t, dir)
	aRel := filepath.Base(aPath) // relative to the tokens file
	file := filepath.Join(dir, "tokens")
	text := "# owner tokens\n\nalice-token-0123456789 " + aRel + "\n  bob-token-0123456789abc   " + bPath + "  \n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeConfig(t, policyFlags{network: "egress", ownerTokens: file}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.API.OwnerTokens
	if len(got) != 2 || got["alice-token-0123456789"].ID() != a.ID() || got["bob-token-0123456789abc"].ID() != b.ID() {
		t.Errorf("owner tokens %v", got)
	}
	if runtime.GOOS != "windows" {
		os.Chmod(file, 0o644)
		if _, err := nodeConfig(t, policyFlags{network: "egress", ownerTokens: file}, "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "readable by others") {
			t.Errorf("a world-readable tokens file: %v", err)
		}
	}
}

func TestParseOwnerTokensSaysWhichLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no tokens"},
		{"# only a comment\n", "no tokens"},
		{"short k\n", "line 1: the token has 5 characters"},
		{"0123456789abcdef\n", "line 1: want TOKEN KEY_FILE, got 1 fields"},
		{"0123456789abcdef a b\n", "line 1: want TOKEN KEY_FILE, got 3 fields"},
		{"0123456789abcdef a\n\n0123456789abcdef b\n", "line 3: the token of line 1 again"},
		{"0123456789abcdé\xff a\n", "outside printable ASCII"},
	} {
		_, err := parseOwnerTokens([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}

// FuzzParseOwnerTokens: any file parses to tokens that obey the rules, or
// is refused with the line; it never panics.
func FuzzParseOwnerTokens(f *testing.F) {
	f.Add([]byte("# c\n0123456789abcdef key\n"))
	f.Add([]byte("0123456789abcdef a\n0123456789abcdef b\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, err := parseOwnerTokens(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, l := range lines {
			if len(l.token) < 16 || strings.ContainsAny(l.token, " \t\n") || l.keyFile == "" || seen[l.token] {
				t.Fatalf("accepted a bad line %+v from %q", l, data)
			}
			seen[l.token] = true
		}
	})
}

func TestSubmitNetFlag(t *testing.T) {
	n := newFakeNode(t)
	if code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--net", "egress", "--", "curl", "example.com"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := n.b.Submitted(); len(got) != 1 || got[0].Network != market.NetworkEgress {
		t.Errorf("submitted %+v, want network egress", got)
	}
	code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--net", "lan", "--", "true")
	if code != exitUsage {
		t.Errorf("--net lan: exit %d", code)
	}
	oneLineErr(t, "--net lan", errOut, "--net", "want none, egress or host")
	// A gang across nodes on egress: its shares meet on their private
	// network, and reach the internet.
	code, _, errOut = n.run("submit", "--gpus", "8", "--per-node", "4", "--max-price", "5", "--net", "egress", "--", "true")
	if got := n.b.Submitted(); code != 0 || len(got) != 2 || got[1].Network != market.NetworkEgress {
		t.Errorf("a gang on egress: exit %d, %s; submitted %+v", code, errOut, got)
	}
}

func TestSubmitResourceFlags(t *testing.T) {
	n := newFakeNode(t)
	if code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--memory", "16GiB", "--pids", "512", "--cpu-weight", "50", "--", "python", "x.py"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := market.Resources{MemoryBytes: 16 << 30, Pids: 512, CPUWeight: 50}
	if got := n.b.Submitted(); len(got) != 1 || got[0].Resources != want {
		t.Errorf("submitted %+v, want resources %+v", got, want)
	}
	code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--memory", "4KiB", "--", "true")
	if code != exitUsage {
		t.Errorf("--memory 4KiB: exit %d", code)
	}
	oneLineErr(t, "--memory 4KiB", errOut, "--memory", "unknown unit")
	code, _, errOut = n.run("submit", "--gpus", "1", "--max-price", "5", "--pids", "2", "--", "true")
	if code != exitUsage {
		t.Errorf("--pids 2: exit %d", code)
	}
	oneLineErr(t, "--pids 2", errOut, "--pids", "8 to 4194304")
	if len(n.b.Submitted()) != 1 {
		t.Error("a refused submit reached the node")
	}
}

// A supplier's policy decline reaches `gpumesh job ID --explain`.
func TestExplainShowsPolicyDeclines(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "j1", State: market.JobPending, Reason: "bids offer 0 feasible cards",
		Explanation: &market.Explanation{Round: 1, Need: "1 card", Asked: 1, Outcome: "bids offer 0 feasible cards, the job needs 1",
			Entries: []market.ExplainEntry{{Stage: "bid", Node: "12D3KooWSupplier", Reason: market.ReasonDeclined,
				Detail: "policy: owner o1abcdefgh is not on this supplier's allow list"}}}})
	code, out, errOut := n.run("job", "j1", "--explain")
	if code != 0 || !strings.Contains(out, "declined") || !strings.Contains(out, "policy: owner o1abcdefgh is not on this supplier's allow list") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestNodeCheckpointFlags(t *testing.T) {
	f := nodeFlags{data: t.TempDir(), network: "gpumesh", coordinator: "auto", isolation: "process", policy: policyFlags{network: "egress", maxMemory: "0"},
		ckptEvery: 500 * time.Millisecond, ckptMaxMiB: 8, ckptKeep: 3, keepOutputs: node.DefaultKeepOutputs, keepLogs: executor.DefaultKeepLogs, keepJobs: node.DefaultKeepJobs, log: &logFlags{format: "text", level: logLevel(slog.LevelInfo)}}
	e := env{getenv: func(string) string { return "" }, stderr: io.Discard}
	cfg, err := f.config(e)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CheckpointInterval != 500*time.Millisecond || cfg.CheckpointLimit != 8<<20 || cfg.CheckpointKeep != 3 {
		t.Errorf("checkpoint interval %v, limit %d, keep %d", cfg.CheckpointInterval, cfg.CheckpointLimit, cfg.CheckpointKeep)
	}
	for _, c := range []struct {
		every time.Duration
		mib   int
		keep  int
		want  string
	}{
		{0, 8, 2, "--checkpoint-interval 0s: want a positive duration"},
		{time.Second, -1, 2, "--checkpoint-max-mib -1: want a number of MiB, 0 for no limit"},
		{time.Second, 8, 0, "--checkpoint-keep 0: want 1 to 100 checkpoints"},
		{time.Second, 8, 101, "--checkpoint-keep 101: want 1 to 100 checkpoints"},
	} {
		f.ckptEvery, f.ckptMaxMiB, f.ckptKeep = c.every, c.mib, c.keep
		_, err := f.config(e)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, %d MiB, keep %d: %v; want a usage error saying %q", c.every, c.mib, c.keep, err, c.want)
		}
	}
	f.ckptKeep = 2
	cmd := newNodeCommand(env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard})
	if fl := cmd.Flags().Lookup("checkpoint-interval"); fl == nil || fl.DefValue != "30s" {
		t.Errorf("--checkpoint-interval default %v, want 30s", fl)
	}
	if fl := cmd.Flags().Lookup("checkpoint-keep"); fl == nil || fl.DefValue != "2" {
		t.Errorf("--checkpoint-keep default %v, want 2", fl)
	}
	if fl := cmd.Flags().Lookup("checkpoint-max-mib"); fl == nil || fl.DefValue != "0" {
		t.Errorf("--checkpoint-max-mib default %v, want 0 (no limit but the store's)", fl)
	}
	f.ckptEvery, f.ckptMaxMiB = time.Second, 0
	for _, c := range []struct{ size, want string }{
		{"lots", `--store-max "lots": want a size such as 200GiB`},
		{"0", `--store-max "0": want a size such as 200GiB`},
	} {
		f.storeMax = c.size
		_, err := f.config(e)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--store-max %s: %v; want a usage error saying %q", c.size, err, c.want)
		}
	}
	f.storeMax = "3GiB"
	if cfg, err := f.config(e); err != nil || cfg.StoreMax != 3<<30 || cfg.CheckpointLimit != 0 || cfg.MaxPayload != 0 || cfg.OwnerQuota != 0 {
		t.Errorf("--store-max 3GiB: store max %d, checkpoint limit %d, max payload %d, owner quota %d, %v",
			cfg.StoreMax, cfg.CheckpointLimit, cfg.MaxPayload, cfg.OwnerQuota, err)
	}
	for _, c := range []struct{ max, quota, want string }{
		{"huge", "", `--max-payload "huge": want a size such as 50GiB`},
		{"", "-1GiB", `--owner-quota "-1GiB": want a size such as 50GiB`},
	} {
		f.maxPayload, f.ownerQuota = c.max, c.quota
		_, err := f.config(e)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--max-payload %q --owner-quota %q: %v; want a usage error saying %q", c.max, c.quota, err, c.want)
		}
	}
	f.maxPayload, f.ownerQuota = "50GiB", "100GiB"
	if cfg, err := f.config(e); err != nil || cfg.MaxPayload != 50<<30 || cfg.OwnerQuota != 100<<30 {
		t.Errorf("--max-payload 50GiB --owner-quota 100GiB: %d, %d, %v", cfg.MaxPayload, cfg.OwnerQuota, err)
	}
}

// --keep-logs and --keep-jobs: how long an ended attempt's logs and an
// ended job's record stay; 7 and 3 days by default, a usage error below
// what they may be.
func TestNodeRetentionFlags(t *testing.T) {
	f := nodeFlags{data: t.TempDir(), network: "gpumesh", coordinator: "auto", isolation: "process", policy: policyFlags{network: "egress", maxMemory: "0"},
		ckptEvery: node.DefaultCheckpointInterval, ckptKeep: node.DefaultCheckpointKeep, keepOutputs: node.DefaultKeepOutputs, keepLogs: 36 * time.Hour, keepJobs: node.DefaultKeepJobs,
		log: &logFlags{format: "text", level: logLevel(slog.LevelInfo)}}
	e := env{getenv: func(string) string { return "" }, stderr: io.Discard}
	cfg, err := f.config(e)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Executor.KeepLogs != 36*time.Hour {
		t.Errorf("KeepLogs %v, want 36h", cfg.Executor.KeepLogs)
	}
	for _, d := range []time.Duration{0, -time.Hour} {
		f.keepLogs = d
		_, err := f.config(e)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), "--keep-logs "+d.String()+": want a positive duration") {
			t.Errorf("--keep-logs %v: %v", d, err)
		}
	}
	f.keepLogs = time.Hour
	for _, d := range []time.Duration{0, 59 * time.Minute} {
		f.keepJobs = d
		_, err := f.config(e)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), "--keep-jobs "+d.String()+": want at least 1h") {
			t.Errorf("--keep-jobs %v: %v", d, err)
		}
	}
	f.keepJobs = 5 * time.Hour
	if cfg, err := f.config(e); err != nil || cfg.KeepJobs != 5*time.Hour {
		t.Errorf("--keep-jobs 5h: %v %v", cfg.KeepJobs, err)
	}
	cmd := newNodeCommand(env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard})
	if fl := cmd.Flags().Lookup("keep-logs"); fl == nil || fl.DefValue != "168h0m0s" {
		t.Errorf("--keep-logs default %v, want 168h0m0s", fl)
	}
	if fl := cmd.Flags().Lookup("keep-jobs"); fl == nil || fl.DefValue != "72h0m0s" {
		t.Errorf("--keep-jobs default %v, want 72h0m0s", fl)
	}
}
