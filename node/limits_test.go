package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	ma "github.com/multiformats/go-multiaddr"
)

// A spec the market accepts is one the executor accepts: the bounds agree.
func TestResourceBoundsMatchTheExecutor(t *testing.T) {
	if market.MinJobMemoryBytes != executor.MinMemoryBytes || market.MinJobPids != executor.MinPids ||
		market.MaxJobCPUWeight != executor.MaxCPUWeight {
		t.Fatalf("market bounds (memory %d, pids %d, cpu %d) differ from the executor's (%d, %d, %d)",
			market.MinJobMemoryBytes, market.MinJobPids, market.MaxJobCPUWeight,
			executor.MinMemoryBytes, executor.MinPids, executor.MaxCPUWeight)
	}
	for _, r := range []market.Resources{
		{MemoryBytes: market.MinJobMemoryBytes, Pids: market.MinJobPids, CPUWeight: 1},
		{MemoryBytes: market.MaxJobMemoryBytes, Pids: market.MaxJobPids, CPUWeight: market.MaxJobCPUWeight},
	} {
		n := &Node{}
		if _, err := n.limitsOf(market.Execution{Exec: market.ExecSpec{Resources: r}}, nil); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// The node gives an attempt what its spec declares, capped by the
// supplier's policy, and the caps to what the spec leaves zero.
func TestAttemptLimitsAreTheSpecsCappedByThePolicy(t *testing.T) {
	caps := market.Policy{MaxMemoryBytes: 16 << 30, MaxPids: 1000, MaxCPUWeight: 200}
	for _, c := range []struct {
		name   string
		policy market.Policy
		exec   market.ExecSpec
		gang   bool
		want   executor.Limits
	}{
		{"nothing declared, caps", caps, market.ExecSpec{},
			false, executor.Limits{MemoryBytes: 16 << 30, Pids: 1000, CPUWeight: 100, Devices: []string{"nvidia0"}}},
		{"declared under the caps", caps, market.ExecSpec{Network: market.NetworkEgress, Resources: market.Resources{MemoryBytes: 1 << 30, Pids: 64, CPUWeight: 150}},
			false, executor.Limits{MemoryBytes: 1 << 30, Pids: 64, CPUWeight: 150, Network: executor.NetworkEgress, Devices: []string{"nvidia0"}}},
		{"declared over the caps (the market declines these; the node still caps)", caps, market.ExecSpec{Resources: market.Resources{MemoryBytes: 64 << 30, Pids: 5000, CPUWeight: 900}},
			false, executor.Limits{MemoryBytes: 16 << 30, Pids: 1000, CPUWeight: 200, Devices: []string{"nvidia0"}}},
		{"no caps, nothing declared", market.Policy{}, market.ExecSpec{Network: market.NetworkNone},
			false, executor.Limits{Network: executor.NetworkNone, Devices: []string{"nvidia0"}}},
		{"a gang gets the network it declared (its ranks meet on their private network)", market.Policy{MaxNetwork: market.NetworkNone, MaxPids: 100}, market.ExecSpec{Network: market.NetworkNone},
			true, executor.Limits{Pids: 100, Network: executor.NetworkNone, Devices: []string{"nvidia0"}}},
	} {
		n := &Node{cfg: Config{Policy: c.policy}}
		e := market.Execution{Exec: c.exec}
		if c.gang {
			e.Gang = &market.GangInfo{NNodes: 2, Master: "m"}
		}
		got, err := n.limitsOf(e, []string{"nvidia0"})
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: limits %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestAutoJobMemoryKeepsAReserve(t *testing.T) {
	const gib = 1 << 30
	for total, want := range map[int64]int64{
		8 * gib:    7 * gib,     // a reserve of 1 GiB, the least
		64 * gib:   58982 << 20, // a tenth (6553.6 MiB) kept, to whole MiB
		512 * gib:  496 * gib,   // 16 GiB kept, the most
		2048 * gib: 2032 * gib,  // still 16 GiB
		1536 << 20: 768 << 20,   // too small to keep 1 GiB: half
		10 << 20:   market.MinJobMemoryBytes,
	} {
		if got := jobMemoryOf(total); got != want {
			t.Errorf("jobMemoryOf(%d MiB) = %d MiB, want %d MiB", total>>20, got>>20, want>>20)
		}
	}
	if got, err := AutoJobMemory(); err != nil {
		if !errors.Is(err, errHostMemoryUnknown) {
			t.Fatal(err)
		}
	} else if got < market.MinJobMemoryBytes || got%(1<<20) != 0 {
		t.Errorf("AutoJobMemory = %d bytes", got)
	}
}

func TestNodePorts(t *testing.T) {
	listen := []ma.Multiaddr{
		ma.StringCast("/ip4/0.0.0.0/tcp/4747"),
		ma.StringCast("/ip4/0.0.0.0/udp/4747/quic-v1"),
		ma.StringCast("/ip6/::/tcp/4748"),
		ma.StringCast("/ip4/127.0.0.1/udp/4801/quic-v1/webtransport"),
	}
	if got, want := nodePorts(nil, listen), []int{4747, 4748, 4801}; !slices.Equal(got, want) {
		t.Errorf("nodePorts = %v, want %v", got, want)
	}
	if got := nodePorts(nil, nil); len(got) != 0 {
		t.Errorf("no listeners: %v", got)
	}
}

// A node tells its executor to keep jobs away from its API port and every
// port its mesh listens on, on any address (the executor refuses the node's
// own addresses on all ports anyway).
func TestExecutorBlocksTheNodesAPIAndMeshPorts(t *testing.T) {
	n, err := Start(context.Background(), Config{
		DataDir: t.TempDir(),
		Mesh: mesh.Config{DisableNAT: true, ListenAddrs: []ma.Multiaddr{
			ma.StringCast("/ip4/127.0.0.1/tcp/0"), ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1")}},
		Devices:  []device.Backend{},
		API:      &api.Config{Addr: "127.0.0.1:0"},
		Executor: executor.Config{Isolation: executor.IsolationProcess, BlockPorts: []int{9999}},
		Logger:   testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	_, apiPort, _ := strings.Cut(n.APIAddr(), ":")
	want := []string{"9999", apiPort}
	for _, a := range n.Mesh().Addrs() {
		for _, code := range []int{ma.P_TCP, ma.P_UDP} {
			if v, err := a.ValueForProtocol(code); err == nil {
				want = append(want, v)
			}
		}
	}
	if len(want) < 4 {
		t.Fatalf("the node listens on %v: want a TCP and a QUIC port", n.Mesh().Addrs())
	}
	got := map[string]bool{}
	for _, p := range n.exec.Config().BlockPorts {
		got[strconv.Itoa(p)] = true
	}
	for _, p := range want {
		if !got[p] {
			t.Errorf("the executor's BlockPorts %v lack port %s (API %s, mesh %v)", n.exec.Config().BlockPorts, p, n.APIAddr(), n.Mesh().Addrs())
		}
	}
}

// requireSandbox skips a test unless this machine can run the job sandbox.
func requireSandbox(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the job sandbox (uids, cgroups, namespaces) runs only as root")
	}
	ex, err := executor.New(executor.Config{Root: t.TempDir(), Isolation: executor.IsolationSandbox})
	if errors.Is(err, executor.ErrSandboxUnavailable) {
		t.Skipf("the job sandbox is unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ex.Close()
}

// limitScript prints the memory and pids limits of the job's own cgroup
// (v1 or v2) as "memory N" and "pids N", then runs rest.
const limitScript = `p=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
if [ -n "$p" ]; then
	echo "memory $(cat /sys/fs/cgroup/memory$p/memory.limit_in_bytes)"
	echo "pids $(cat /sys/fs/cgroup/pids$(awk -F: '$2 ~ /(^|,)pids(,|$)/ {print $3}' /proc/self/cgroup)/pids.max)"
else
	p=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
	echo "memory $(cat /sys/fs/cgroup$p/memory.max)"
	echo "pids $(cat /sys/fs/cgroup$p/pids.max)"
fi
`

// A job submitted through a node runs in a cgroup with the memory and pids
// it declared, or the supplier's caps where it declared none, and a job
// that uses more memory than it has is killed, not the node.
func TestJobGetsItsLimitsInItsCgroup(t *testing.T) {
	requireSandbox(t)
	const capMem, capPids = 96 << 20, 200
	sm := newSimMeshWith(t, func(c *Config) {
		c.Executor.Isolation = executor.IsolationSandbox
		c.Policy.MaxMemoryBytes, c.Policy.MaxPids = capMem, capPids
	}, "", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 1)
	ctx := context.Background()
	logs := func(id string) string {
		var out bytes.Buffer
		if err := coord.Logs(ctx, api.LogRequest{Job: id}, &out, func() {}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}

	// Declared limits below the caps: the job's cgroup has them.
	_, err := coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "modest", Cards: 1, MaxPriceCNY: 50,
		Resources: market.Resources{MemoryBytes: 48 << 20, Pids: 64}, Command: []string{"bash", "-c", limitScript}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := waitState(t, coord, "modest", 60*time.Second, market.JobSucceeded, market.JobFailed); rec.State != market.JobSucceeded {
		t.Fatalf("modest job %s: %s", rec.State, rec.Reason)
	}
	if out := logs("modest"); !strings.Contains(out, "memory "+strconv.Itoa(48<<20)+"\n") || !strings.Contains(out, "pids 64\n") {
		t.Errorf("the declared limits are not the job's cgroup's:\n%s", out)
	}

	// Nothing declared: the supplier's caps are its limits, and a job
	// past its memory is killed.
	_, err = coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "hog", Cards: 1, MaxPriceCNY: 50, Command: []string{"bash", "-c",
		limitScript + `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo "survived with ${#x} bytes"`}})
	if err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "hog", 60*time.Second, market.JobFailed, market.JobSucceeded)
	out := logs("hog")
	if !strings.Contains(out, "memory "+strconv.Itoa(capMem)+"\n") || !strings.Contains(out, "pids "+strconv.Itoa(capPids)+"\n") {
		t.Errorf("the supplier's caps are not the undeclared job's limits:\n%s", out)
	}
	if rec.State != market.JobFailed || strings.Contains(out, "survived") {
		t.Errorf("the hog %s (%s), output:\n%s\nwant it killed for memory", rec.State, rec.Reason, out)
	}
	// The node is fine: it runs the next job.
	if _, err := coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "after", Cards: 1, MaxPriceCNY: 50, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, "after", 60*time.Second, market.JobSucceeded)
}
