package gangnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/executor"
	"golang.org/x/sys/unix"
)

// These tests run the private network for real: jobs in the executor's
// sandbox (root, namespaces, the ip and nft tools), their connections
// redirected in their namespaces and carried between two libp2p hosts on
// loopback TCP. They skip, saying why, where the sandbox or private
// networks are not available.

var (
	progOnce sync.Once
	progPath string
	progErr  error
)

// rendezvousProgram builds testdata/rendezvous (static) once.
func rendezvousProgram(t testing.TB) []byte {
	t.Helper()
	progOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gangnet-prog-")
		if err != nil {
			progErr = err
			return
		}
		progPath = filepath.Join(dir, "rendezvous")
		cmd := exec.Command("go", "build", "-o", progPath, "./testdata/rendezvous")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			progErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if progErr != nil {
		t.Fatalf("building the rendezvous program: %v", progErr)
	}
	b, err := os.ReadFile(progPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sandbox is a sandboxed executor with private networks, or a skip.
func sandbox(t testing.TB) *executor.Executor {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the private network runs jobs in the sandbox, which needs root")
	}
	ex, err := executor.New(executor.Config{Root: t.TempDir(), Isolation: executor.IsolationSandbox, Grace: time.Second})
	if errors.Is(err, executor.ErrSandboxUnavailable) {
		t.Skipf("the sandbox is unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	if c := ex.Capabilities(); !c.PrivateNet {
		t.Skipf("no private networks here: %s", c.PrivateNetReason)
	}
	return ex
}

// startShare starts rank's attempt of job on ex, running the rendezvous
// program with args, and adds it to svc.
func startShare(t testing.TB, ex *executor.Executor, svc *Service, job string, rank int, roster []Peer, network executor.NetworkMode, args ...string) *executor.Run {
	t.Helper()
	prog := rendezvousProgram(t)
	addr, err := Addr(job, rank)
	if err != nil {
		t.Fatal(err)
	}
	master, _ := Addr(job, 0)
	a := executor.Attempt{JobID: job, Share: roster[rank].Share, Epoch: roster[rank].Epoch,
		Command: append([]string{"./rendezvous"}, args...),
		Gang:    &executor.Gang{NNodes: len(roster), NodeRank: rank, MasterAddr: master.Addr().String(), MasterPort: 29500, WorldSize: len(roster)},
		Private: &executor.PrivateNet{Addr: addr},
		Limits:  executor.Limits{Network: network},
		Work: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "rendezvous"), prog, 0o755)
		}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Add(Member{Job: job, Rank: rank, Roster: roster, Listener: r.PrivateListener(), Dest: executor.OriginalDst, Dial: r.DialPrivate}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Stop(executor.StopCancelled)
		<-r.Done()
		svc.Remove(job, rank, roster[rank].Epoch)
	})
	return r
}

func waitRun(t testing.TB, r *executor.Run, within time.Duration) executor.Result {
	t.Helper()
	select {
	case <-r.Done():
		return r.Result()
	case <-time.After(within):
		t.Fatalf("%s still runs after %v: %s", r.Attempt().Name(), within, r.Tail())
		return executor.Result{}
	}
}

// A gang of two shares, each in a namespace of its own with network none
// (egress for one), on two nodes: the worker reaches the master at
// MASTER_ADDR:MASTER_PORT, both open a port chosen at run time and
// connect to each other's, as NCCL does; a process outside the job does
// not reach the master's address.
func TestGangRendezvousOverThePrivateNetwork(t *testing.T) {
	ex := sandbox(t)
	a, b := newHost(t), newHost(t)
	connect(t, a, b)
	sa, sb := newService(t, a, nil), newService(t, b, nil)
	job := "gang-rdv"
	roster := []Peer{{Node: a.ID(), Share: 0, Epoch: 5}, {Node: b.ID(), Share: 1, Epoch: 5}}
	// The worker first: it waits for its master, as torchrun's do.
	r1 := startShare(t, ex, sb, job, 1, roster, executor.NetworkEgress)
	r0 := startShare(t, ex, sa, job, 0, roster, executor.NetworkNone)
	master, _ := Addr(job, 0)
	worker, _ := Addr(job, 1)
	for rank, r := range []*executor.Run{r0, r1} {
		res := waitRun(t, r, 90*time.Second)
		out := string(r.Tail())
		next := 1 - rank
		want := fmt.Sprintf("rank %d of 2: master %s:29500, ring to %d at ", rank, master.Addr(), next)
		if res.ExitCode != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, []netip.Prefix{master, worker}[next].Addr().String()+":") {
			t.Errorf("rank %d: exit %d, output %q; want it to start %q", rank, res.ExitCode, out, want)
		}
	}
}

// Nothing outside the job reaches a share's address: not the node's own
// network, not another job on the node (none, or a private network of
// its own with the same addresses).
func TestOnlyTheGangReachesItsShares(t *testing.T) {
	ex := sandbox(t)
	h := newHost(t)
	svc := newService(t, h, nil)
	job := "gang-closed"
	roster := []Peer{{Node: h.ID(), Share: 0, Epoch: 1}, {Node: h.ID(), Share: 1, Epoch: 1}}
	r0 := startShare(t, ex, svc, job, 0, roster, executor.NetworkNone, "sink", "29500")
	waitOutput(t, r0, "sink listening")
	master, _ := Addr(job, 0)
	target := netip.AddrPortFrom(master.Addr(), 29500).String()

	// The node's network: no route there (some networks accept every
	// connection, as a proxy does: the sink must not count it).
	if c, err := net.DialTimeout("tcp", target, 2*time.Second); err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprint(c, "outsider")
		c.(*net.TCPConn).CloseWrite()
		if line, _ := bufio.NewReader(c).ReadString('\n'); line == "8\n" {
			t.Error("the node's own network reaches the master's sink")
		}
		c.Close()
	}
	// Another job with the same addresses: its connection goes to its
	// own namespace's listener, which no gang member serves.
	for _, other := range []executor.Attempt{
		{JobID: "stranger-none", Command: []string{"bash", "-c", "exec 3<>/dev/tcp/" + strings.Replace(target, ":", "/", 1) + " && echo reached || echo refused"}},
		{JobID: "stranger-private", Private: &executor.PrivateNet{Addr: mustAddr(t, job, 1)},
			Command: []string{"bash", "-c", "exec 3<>/dev/tcp/" + strings.Replace(target, ":", "/", 1) + " && echo outsider >&3 && read -r n <&3; echo \"read $n\""}},
	} {
		r, err := ex.Start(other)
		if err != nil {
			t.Fatal(err)
		}
		if ln := r.PrivateListener(); ln != nil {
			// Its node's gangnet does not know the job: as a node would,
			// it resets what arrives.
			c, err := ln.Accept()
			if err == nil {
				reset(c)
			}
		}
		waitRun(t, r, 30*time.Second)
		if out := string(r.Tail()); strings.Contains(out, "reached") || strings.Contains(out, "read 9") {
			t.Errorf("%s: %q", other.JobID, out)
		}
	}
}

func mustAddr(t testing.TB, job string, rank int) netip.Prefix {
	t.Helper()
	a, err := Addr(job, rank)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitOutput waits until the run's output holds s.
func waitOutput(t testing.TB, r *executor.Run, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(string(r.Tail()), s) {
		select {
		case <-r.Changed():
		case <-r.Done():
			t.Fatalf("%s ended: %s", r.Attempt().Name(), r.Tail())
		case <-deadline:
			t.Fatalf("%s has not printed %q: %s", r.Attempt().Name(), s, r.Tail())
		}
	}
}

// dialFrom connects to addr from inside the network namespace of the
// run's process, as the job itself would.
func dialFrom(r *executor.Run, addr string) (net.Conn, error) {
	pid, _, ok := r.Process()
	if !ok {
		return nil, errors.New("not started")
	}
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the job's namespace
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err != nil {
			done <- result{nil, err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		done <- result{c, err}
	}()
	res := <-done
	return res.c, res.err
}

// BenchmarkPrivateNetThroughput sends 256 MiB to a share's sink from
// another share of its gang on another node (its namespace → redirect →
// node → libp2p over loopback TCP → node → the sink's namespace) and,
// alternately, to the same sink over loopback TCP inside the sink's own
// namespace; three times each, medians compared.
func BenchmarkPrivateNetThroughput(b *testing.B) {
	for range b.N {
		ex := sandbox(b)
		ha, hb := newHost(b), newHost(b)
		connect(b, ha, hb)
		sa, sb := newService(b, ha, nil), newService(b, hb, nil)
		job := "gang-bench"
		roster := []Peer{{Node: ha.ID(), Share: 0, Epoch: 1}, {Node: hb.ID(), Share: 1, Epoch: 1}}
		sender := startShare(b, ex, sa, job, 0, roster, executor.NetworkNone, "sink", "5001") // a share that idles
		sink := startShare(b, ex, sb, job, 1, roster, executor.NetworkNone, "sink", "5000")
		waitOutput(b, sink, "sink listening")
		waitOutput(b, sender, "sink listening")
		const size = 256 << 20
		send := func(c net.Conn, err error) float64 {
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 256<<10)
			t0 := time.Now()
			for sent := 0; sent < size; sent += len(buf) {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || strings.TrimSpace(line) != strconv.Itoa(size) {
				b.Fatalf("the sink read %q, %v", line, err)
			}
			return float64(size) / (1 << 20) / time.Since(t0).Seconds()
		}
		to := netip.AddrPortFrom(mustAddr(b, job, 1).Addr(), 5000).String()
		var direct, private []float64
		for range 3 {
			direct = append(direct, send(sink.DialTCP(context.Background(), 5000)))
			private = append(private, send(dialFrom(sender, to)))
		}
		slices.Sort(direct)
		slices.Sort(private)
		b.ReportMetric(direct[1], "direct-MiB/s")
		b.ReportMetric(private[1], "private-MiB/s")
		b.ReportMetric(private[1]/direct[1]*100, "%of-direct")
		b.Logf("256 MiB × 3 (medians): loopback TCP in the sink's namespace %.0f MiB/s %.0f; share to share over the private network (redirect, libp2p between two nodes on loopback TCP) %.0f MiB/s %.0f = %.1f%% of direct",
			direct[1], direct, private[1], private, private[1]/direct[1]*100)
	}
}
