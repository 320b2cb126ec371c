package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/cardedit"
)

// fakeSystem is a machine made of facts: files, programs on $PATH, free
// space, ports taken.
type fakeSystem struct {
	goos     string
	euid     int
	files    fstest.MapFS // paths without the leading "/"
	programs map[string]string
	free     uint64
	ports    map[string]error // "tcp4 0.0.0.0:4747" → error
	ips      []net.IP
}

func (s *fakeSystem) GOOS() string { return s.goos }
func (s *fakeSystem) Geteuid() int { return s.euid }
func (s *fakeSystem) ReadFile(name string) ([]byte, error) {
	return fs.ReadFile(s.files, strings.TrimPrefix(name, "/"))
}
func (s *fakeSystem) ReadDir(name string) ([]fs.DirEntry, error) {
	return fs.ReadDir(s.files, strings.TrimPrefix(name, "/"))
}
func (s *fakeSystem) LookPath(file string) (string, error) {
	if p, ok := s.programs[file]; ok {
		return p, nil
	}
	return "", errors.New("not found")
}
func (s *fakeSystem) FreeBytes(string) (uint64, error)       { return s.free, nil }
func (s *fakeSystem) CheckPort(network, addr string) error   { return s.ports[network+" "+addr] }
func (s *fakeSystem) InterfaceIPs() ([]net.IP, error)        { return s.ips, nil }
func (s *fakeSystem) with(f func(*fakeSystem)) *fakeSystem   { f(s); return s }
func (s *fakeSystem) without(path string) *fakeSystem        { delete(s.files, path); return s }
func (s *fakeSystem) withoutProgram(name string) *fakeSystem { delete(s.programs, name); return s }

// goodMachine is a root Linux machine with everything a node needs.
func goodMachine() *fakeSystem {
	return &fakeSystem{
		goos: "linux", euid: 0,
		files: fstest.MapFS{
			"sys/fs/cgroup/cgroup.controllers": {Data: []byte("cpuset cpu io memory hugetlb pids rdma misc\n")},
			"proc/driver/nvidia/version":       {Data: []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version: gcc 12\n")},
			"etc/cdi/nvidia.yaml":              {Data: []byte("cdiVersion: 0.5.0\n")},
			"srv/gpumesh":                      {Mode: fs.ModeDir},
		},
		programs: map[string]string{"nft": "/usr/sbin/nft", "ip": "/usr/sbin/ip", "crun": "/usr/bin/crun"},
		free:     500 << 30,
		ports:    map[string]error{},
		ips:      []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.168.1.20")},
	}
}

// twoCards is card discovery finding two RTX 4090s through NVML.
func twoCards(t *testing.T) func(context.Context) ([]device.Card, []device.BackendStatus, error) {
	cat := device.DefaultCatalog()
	spec, err := device.ParseSimSpec("rtx4090-24g:2", cat)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := device.NewSim(spec, "doctor", cat)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) ([]device.Card, []device.BackendStatus, error) {
		cards, _, err := device.Discover(ctx, device.Config{Backends: []device.Backend{sim}})
		return cards, []device.BackendStatus{{Backend: "nvml", State: device.StatePresent, Cards: len(cards)}}, err
	}
}

func noCards(context.Context) ([]device.Card, []device.BackendStatus, error) {
	return nil, []device.BackendStatus{{Backend: "nvml", State: device.StateAbsent, Reason: "libnvidia-ml.so.1 not found"}}, nil
}

func run(t *testing.T, cfg Config) map[string]Result {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = "/srv/gpumesh"
	}
	if cfg.Cards == nil {
		cfg.Cards = twoCards(t)
	}
	out := map[string]Result{}
	for _, r := range Run(context.Background(), cfg) {
		out[r.Check] = r
	}
	return out
}

func TestAGoodMachinePasses(t *testing.T) {
	results := Run(context.Background(), Config{System: goodMachine(), DataDir: "/srv/gpumesh", Cards: twoCards(t), CheckDataDir: func(string) error { return nil }})
	if results.Failed() {
		t.Errorf("a good machine failed: %+v", results)
	}
	want := []string{"privileges", "cgroup v2", "nftables", "iproute2", "OCI runtime", "GPU driver", "cards", "CDI specs", "data dir", "free disk", "listen port", "mesh reachability", "NAT type"}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(results), len(want), results)
	}
	for i, r := range results {
		wantStatus := OK
		if r.Check == "mesh reachability" || r.Check == "NAT type" {
			wantStatus = Skip // no --join
		}
		if r.Check != want[i] || r.Status != wantStatus || r.Fix != "" {
			t.Errorf("result %d: %+v, want %s %s and no fix", i, r, want[i], wantStatus)
		}
	}
	if got := run(t, Config{System: goodMachine()})["GPU driver"].Found; got != "NVIDIA 550.54.14" {
		t.Errorf("GPU driver: %q", got)
	}
	if got := run(t, Config{System: goodMachine()})["mesh reachability"].Found; !strings.Contains(got, "not checked") {
		t.Errorf("without --join: %q, want not checked", got)
	}
	if s := results.Summary(); s != "13 checks: 11 OK, 2 SKIP" {
		t.Errorf("summary %q", s)
	}
	b, err := json.Marshal(results)
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		OK     bool `json:"ok"`
		Checks []struct{ Check, Status, Found, Fix string }
	}
	if err := json.Unmarshal(b, &decoded); err != nil || !decoded.OK || decoded.Checks[0].Status != "OK" || decoded.Checks[12].Status != "SKIP" {
		t.Errorf("JSON %s: %+v, %v", b, decoded, err)
	}
}

// Each fact gone wrong gives its check's verdict and what to do.
func TestEachProblemIsNamedWithAFix(t *testing.T) {
	busy := &portuse.BusyError{Network: "tcp", Addr: "0.0.0.0:4747", Port: 4747, PID: 4242, Command: "nginx: master process", Err: syscall.EADDRINUSE}
	ours := &portuse.BusyError{Network: "tcp", Addr: "0.0.0.0:4747", Port: 4747, PID: 4243, Command: "/usr/bin/gpumesh node", Err: syscall.EADDRINUSE}
	for _, tc := range []struct {
		name   string
		sys    *fakeSystem
		cfg    func(*Config)
		check  string
		status Status
		found  string
		fix    string
	}{
		{"not root", goodMachine().with(func(s *fakeSystem) { s.euid = 1000 }), nil, "privileges", Warn, "not root (uid 1000)", "run the node as root"},
		{"not linux", goodMachine().with(func(s *fakeSystem) { s.goos = "windows" }), nil, "privileges", Warn, "not Linux (windows)", "WSL2"},
		{"no pids controller", goodMachine().with(func(s *fakeSystem) {
			s.files["sys/fs/cgroup/cgroup.controllers"] = &fstest.MapFile{Data: []byte("cpu memory\n")}
		}), nil, "cgroup v2", Fail, "cgroup v2 without the pids controller", "Delegate=yes"},
		{"cgroup v1", goodMachine().without("sys/fs/cgroup/cgroup.controllers").with(func(s *fakeSystem) {
			s.files["sys/fs/cgroup/memory"] = &fstest.MapFile{Mode: fs.ModeDir}
		}), nil, "cgroup v2", Warn, "cgroup v1", "unified_cgroup_hierarchy"},
		{"no cgroups", goodMachine().without("sys/fs/cgroup/cgroup.controllers"), nil, "cgroup v2", Fail, "no cgroup file system", "cgroup2"},
		{"no nft as root", goodMachine().withoutProgram("nft"), nil, "nftables", Fail, "nft not found on $PATH", "apt install nftables"},
		{"no nft as a user", goodMachine().withoutProgram("nft").with(func(s *fakeSystem) { s.euid = 1000 }), nil, "nftables", Warn, "nft not found", "dnf install nftables"},
		{"no ip", goodMachine().withoutProgram("ip"), nil, "iproute2", Fail, "ip not found on $PATH", "apt install iproute2"},
		{"no OCI runtime", goodMachine().withoutProgram("crun"), nil, "OCI runtime", Warn, "neither crun nor runc", "apt install crun"},
		{"runc will do", goodMachine().withoutProgram("crun").with(func(s *fakeSystem) { s.programs["runc"] = "/usr/sbin/runc" }), nil, "OCI runtime", OK, "runc at /usr/sbin/runc", ""},
		{"driver without NVML", goodMachine(), func(c *Config) { c.Cards = noCards }, "GPU driver", Fail, "NVIDIA driver 550.54.14 loaded, but NVML is absent: libnvidia-ml.so.1 not found", "libnvidia-ml"},
		{"NVML without /proc (WSL2)", goodMachine().without("proc/driver/nvidia/version"), nil, "GPU driver", OK, "NVIDIA (NVML answers)", ""},
		{"no driver", goodMachine().without("proc/driver/nvidia/version"), func(c *Config) { c.Cards = noCards }, "GPU driver", Warn, "no GPU driver loaded and no vendor tool", "--sim"},
		{"a vendor tool", goodMachine().without("proc/driver/nvidia/version").with(func(s *fakeSystem) { s.programs["npu-smi"] = "/usr/local/bin/npu-smi" }), func(c *Config) { c.Cards = noCards }, "GPU driver", OK, "npu-smi", ""},
		{"no cards", goodMachine().without("proc/driver/nvidia/version"), func(c *Config) { c.Cards = noCards }, "cards", Warn, "no cards found", "--sim"},
		{"a backend failed", goodMachine(), func(c *Config) {
			c.Cards = func(context.Context) ([]device.Card, []device.BackendStatus, error) {
				return nil, []device.BackendStatus{{Backend: "amd", State: device.StateFailed, Reason: "amd-smi: exit status 1"}}, nil
			}
		}, "cards", Fail, "a card backend failed: amd: amd-smi: exit status 1", "gpumesh cards -v"},
		{"cards without CDI", goodMachine().without("etc/cdi/nvidia.yaml"), nil, "CDI specs", Warn, "no CDI spec in /etc/cdi or /var/run/cdi", "nvidia-ctk cdi generate"},
		{"CDI in /var/run", goodMachine().without("etc/cdi/nvidia.yaml").with(func(s *fakeSystem) {
			s.files["var/run/cdi/amd.json"] = &fstest.MapFile{Data: []byte("{}")}
		}), nil, "CDI specs", OK, "/var/run/cdi/amd.json", ""},
		{"how cards enter", goodMachine(), func(c *Config) {
			c.CardPaths = func(cards []device.Card) []cardedit.Path {
				return []cardedit.Path{{Vendor: cards[0].Vendor, Via: cardedit.ViaCDI, Detail: "nvidia.com/gpu=0 from /etc/cdi/nvidia.yaml"}}
			}
		}, "CDI specs", OK, "/etc/cdi/nvidia.yaml; nvidia cards enter containers through CDI: nvidia.com/gpu=0 from /etc/cdi/nvidia.yaml", ""},
		{"disk full", goodMachine().with(func(s *fakeSystem) { s.free = 1 << 30 }), nil, "free disk", Fail, "1.0 GiB free under /srv/gpumesh, below the 2.0 GiB", "larger disk"},
		{"disk low", goodMachine().with(func(s *fakeSystem) { s.free = 10 << 30 }), nil, "free disk", Warn, "10.0 GiB free", "20.0 GiB"},
		{"data dir to be made", goodMachine(), func(c *Config) { c.DataDir = "/srv/gpumesh/a/b" }, "free disk", OK, "under /srv/gpumesh", ""},
		{"bad data dir", goodMachine(), func(c *Config) {
			c.CheckDataDir = func(string) error { return errors.New("data directory /srv/gpumesh: is a file, not a directory") }
		}, "data dir", Fail, "is a file", "--data"},
		{"port taken", goodMachine().with(func(s *fakeSystem) { s.ports["tcp4 0.0.0.0:4747"] = busy }), nil, "listen port", Fail, "TCP port 4747 is in use by pid 4242 (nginx: master process)", "--listen"},
		{"node running", goodMachine().with(func(s *fakeSystem) { s.ports["tcp4 0.0.0.0:4747"] = ours }), nil, "listen port", OK, "a gpumesh node is running here: TCP port 4747 is in use by pid 4243", ""},
		{"custom port", goodMachine().with(func(s *fakeSystem) { s.ports["tcp4 0.0.0.0:4747"] = busy }), func(c *Config) {
			c.ListenAddrs = []ma.Multiaddr{ma.StringCast("/ip4/0.0.0.0/tcp/5000")}
		}, "listen port", OK, "free: TCP 0.0.0.0:5000", ""},
	} {
		cfg := Config{System: tc.sys}
		if tc.cfg != nil {
			tc.cfg(&cfg)
		}
		r := run(t, cfg)[tc.check]
		if r.Status != tc.status || !strings.Contains(r.Found, tc.found) || !strings.Contains(r.Fix, tc.fix) || (tc.status != OK) != (r.Fix != "") {
			t.Errorf("%s: %s: %s %q → %q; want %s with %q → %q", tc.name, tc.check, r.Status, r.Found, r.Fix, tc.status, tc.found, tc.fix)
		}
	}
}

func TestMeshChecksFromAProbe(t *testing.T) {
	public := ma.StringCast("/ip4/203.0.113.9/tcp/4747")
	peerAddr := ma.StringCast("/ip4/198.51.100.1/tcp/4747/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo")
	n := 0
	seen := func(addr string) mesh.ProbePeer {
		n++
		return mesh.ProbePeer{Addr: peerAddr, ID: peer.ID(fmt.Sprint("peer-", n)), Observed: ma.StringCast(addr)}
	}
	for _, tc := range []struct {
		name              string
		res               mesh.ProbeResult
		reach, nat        Status
		reachSays, natSay string
	}{
		{"public", mesh.ProbeResult{Peers: []mesh.ProbePeer{seen("/ip4/192.168.1.20/tcp/4747")}, Reachable: []ma.Multiaddr{public}},
			OK, OK, "dialled this machine back at /ip4/203.0.113.9/tcp/4747", "none"},
		{"cone NAT", mesh.ProbeResult{Peers: []mesh.ProbePeer{seen("/ip4/203.0.113.9/tcp/31000"), seen("/ip4/203.0.113.9/tcp/31000")}, Unreachable: []ma.Multiaddr{public}},
			Warn, OK, "could not dial this machine back at /ip4/203.0.113.9/tcp/4747: peers reach it through relays", "endpoint-independent mapping"},
		{"symmetric NAT", mesh.ProbeResult{Peers: []mesh.ProbePeer{seen("/ip4/203.0.113.9/tcp/31000"), seen("/ip4/203.0.113.9/tcp/31001")}, Unreachable: []ma.Multiaddr{public}},
			Warn, Warn, "could not dial", "symmetric NAT"},
		{"one peer seen twice", mesh.ProbeResult{Peers: []mesh.ProbePeer{{Addr: peerAddr, ID: "same", Observed: ma.StringCast("/ip4/203.0.113.9/tcp/31000")}, {Addr: peerAddr, ID: "same", Observed: ma.StringCast("/ip4/203.0.113.9/tcp/31000")}}, ReachErr: errors.New("the peer declined to dial /ip4/203.0.113.9/tcp/4747 back")},
			Warn, OK, "not tested: the peer declined", "its kind is unknown"},
		{"one peer", mesh.ProbeResult{Peers: []mesh.ProbePeer{seen("/ip4/203.0.113.9/udp/31000/quic-v1")}, ReachErr: errors.New("no peers for autonat v2")},
			Warn, OK, "not tested: no peers for autonat v2", "its kind is unknown: give two --join peers"},
		{"nobody answers", mesh.ProbeResult{Peers: []mesh.ProbePeer{{Addr: peerAddr, Err: errors.New("unreachable: dial timeout")}}},
			Fail, Skip, "no --join peer answered: " + peerAddr.String() + ": unreachable: dial timeout", "no peer answered"},
	} {
		var asked []ma.Multiaddr
		cfg := Config{System: goodMachine(), Probe: func(_ context.Context, listen []ma.Multiaddr) (mesh.ProbeResult, error) {
			asked = listen
			return tc.res, nil
		}}
		r := run(t, cfg)
		if got := r["mesh reachability"]; got.Status != tc.reach || !strings.Contains(got.Found, tc.reachSays) {
			t.Errorf("%s: reachability %s %q, want %s %q", tc.name, got.Status, got.Found, tc.reach, tc.reachSays)
		}
		if got := r["NAT type"]; got.Status != tc.nat || !strings.Contains(got.Found, tc.natSay) {
			t.Errorf("%s: NAT %s %q, want %s %q", tc.name, got.Status, got.Found, tc.nat, tc.natSay)
		}
		if len(asked) != 2 || asked[0].String() != "/ip4/0.0.0.0/tcp/4747" {
			t.Errorf("%s: the probe was to listen on %v, want the node's ports", tc.name, asked)
		}
	}
	// A running node holds the port: the probe listens elsewhere, and the
	// dial back is not the node's.
	var asked []ma.Multiaddr
	sys := goodMachine().with(func(s *fakeSystem) {
		s.ports["tcp4 0.0.0.0:4747"] = &portuse.BusyError{Network: "tcp", Port: 4747, PID: 1, Command: "gpumesh node", Err: syscall.EADDRINUSE}
	})
	r := run(t, Config{System: sys, Probe: func(_ context.Context, listen []ma.Multiaddr) (mesh.ProbeResult, error) {
		asked = listen
		return mesh.ProbeResult{Peers: []mesh.ProbePeer{seen("/ip4/203.0.113.9/tcp/31000")}, Unreachable: []ma.Multiaddr{public}}, nil
	}})
	if len(asked) != 1 || asked[0].String() != "/ip4/0.0.0.0/tcp/0" {
		t.Errorf("with the port held the probe was to listen on %v", asked)
	}
	if got := r["mesh reachability"]; got.Status != Skip || !strings.Contains(got.Found, "gpumesh status") {
		t.Errorf("with the port held: %s %q", got.Status, got.Found)
	}
}

// One run on this machine: every check answers, and nothing is made.
func TestRealMachine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	results := Run(context.Background(), Config{DataDir: dir, ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")}})
	if len(results) < 12 {
		t.Fatalf("%d results: %+v", len(results), results)
	}
	for _, r := range results {
		if r.Check == "" || r.Found == "" {
			t.Errorf("a result says nothing: %+v", r)
		}
		t.Logf("%-5s %-18s %s", r.Status, r.Check, r.Found)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("doctor made %s (or: %v)", filepath.Dir(dir), err)
	}
}
