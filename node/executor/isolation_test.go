//go:build unix

package executor

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestParseIsolation(t *testing.T) {
	for _, s := range []string{"auto", "sandbox", "process"} {
		if got, err := ParseIsolation(s); err != nil || string(got) != s {
			t.Errorf("ParseIsolation(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "Sandbox", "docker"} {
		if _, err := ParseIsolation(s); err == nil || !strings.Contains(err.Error(), "auto, sandbox or process") {
			t.Errorf("ParseIsolation(%q): err = %v, want one listing the modes", s, err)
		}
	}
}

func TestProcessModeWarnsWhatIsNotIsolated(t *testing.T) {
	var logs bytes.Buffer
	ex, err := New(Config{Root: t.TempDir(), Isolation: IsolationProcess, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	c := ex.Capabilities()
	if c.Isolation != IsolationProcess || c.Limits || !c.Provides(NetworkHost) || c.Provides(NetworkNone) {
		t.Errorf("capabilities %+v", c)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "NOT sandboxed") ||
		!strings.Contains(logs.String(), "169.254.169.254") {
		t.Errorf("process mode logged:\n%s", logs.String())
	}
}

func TestZeroIsolationIsProcessMode(t *testing.T) {
	ex, err := New(Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if got := ex.Capabilities().Isolation; got != IsolationProcess {
		t.Errorf("isolation of a zero Config = %q, want process (what callers had before)", got)
	}
}

func TestAutoFallsBackToProcessWithAWarning(t *testing.T) {
	// No cgroup hierarchy under an empty directory: the sandbox cannot work
	// here whoever runs the test.
	var logs bytes.Buffer
	cfg := Config{Root: t.TempDir(), Isolation: IsolationAuto, CgroupRoot: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ex, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	c := ex.Capabilities()
	if c.Isolation != IsolationProcess || c.Reason == "" {
		t.Fatalf("auto without cgroups: capabilities %+v, want process with a reason", c)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "falls back to process mode") ||
		!strings.Contains(logs.String(), c.Reason) {
		t.Errorf("fallback logged:\n%s", logs.String())
	}
	// Asked for explicitly, the sandbox refuses to start instead.
	cfg.Isolation = IsolationSandbox
	if _, err := New(cfg); !errors.Is(err, ErrSandboxUnavailable) || !strings.Contains(err.Error(), c.Reason) {
		t.Errorf("sandbox without cgroups: err = %v, want ErrSandboxUnavailable saying %q", err, c.Reason)
	}
}

func TestAutoIsSandboxWhereAvailable(t *testing.T) {
	requireSandbox(t)
	ex, err := New(Config{Root: t.TempDir(), Isolation: IsolationAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	c := ex.Capabilities()
	if c.Isolation != IsolationSandbox || !c.Limits || (c.Cgroup != "v1" && c.Cgroup != "v2") || !c.Provides(NetworkNone) {
		t.Errorf("auto on a capable host: %+v", c)
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	for name, cfg := range map[string]Config{
		"isolation":     {Isolation: "docker"},
		"uid range":     {UIDMin: 300, UIDMax: 200},
		"huge uid":      {UIDMin: 1, UIDMax: 1 << 31},
		"egress net":    {EgressNet: mustPrefix("169.254.64.0/31")},
		"ipv6 net":      {EgressNet: mustPrefix("fd00::/64")},
		"hide root":     {HideDirs: []string{"/"}},
		"hide relative": {HideDirs: []string{"data"}},
		"port":          {BlockPorts: []int{70000}},
		"lock dir":      {LockDir: "locks"},
		"cgroup parent": {CgroupParent: "/abs"},
	} {
		cfg.Root = t.TempDir()
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestConfigReportsWhatTheExecutorUses(t *testing.T) {
	ex, err := New(Config{Root: t.TempDir(), Isolation: IsolationProcess, BlockPorts: []int{7070, 4747}, KeepAttemptDirs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	c := ex.Config()
	if !slices.Equal(c.BlockPorts, []int{7070, 4747}) || !c.KeepAttemptDirs || c.Grace != DefaultGrace || c.Root != ex.Root() {
		t.Errorf("Config() = %+v", c)
	}
	c.BlockPorts[0] = 1
	if ex.Config().BlockPorts[0] != 7070 {
		t.Error("Config() shares its slices with the executor")
	}
}
