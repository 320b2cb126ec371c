package executor

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
	"strings"
	"testing"
	"time"
)

// The private network's tests need the sandbox (root, namespaces) and the
// ip and nft tools; they skip with the reason otherwise.

func requirePrivateNet(t *testing.T) *Executor {
	t.Helper()
	ex := sandboxed(t, nil)
	if c := ex.Capabilities(); !c.PrivateNet {
		t.Skipf("no private networks here: %s", c.PrivateNetReason)
	}
	return ex
}

func private(s string) *PrivateNet { return &PrivateNet{Addr: netip.MustParsePrefix(s)} }

// A job on a private network sees its address on its interface and the
// variables NCCL and gloo read; a TCP connection it opens to another
// address of the network arrives at the attempt's private listener, which
// reads where it was going, and the two talk.
func TestPrivateNetCarriesTheJobsConnectionsToItsListener(t *testing.T) {
	ex := requirePrivateNet(t)
	ipTool, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip tool")
	}
	for _, network := range []NetworkMode{NetworkNone, NetworkEgress} {
		t.Run(string(network), func(t *testing.T) {
			a := Attempt{JobID: "priv-" + string(network), Share: 1, Private: private("10.99.0.2/16"), Limits: Limits{Network: network},
				Command: []string{"bash", "-c", ipTool + ` -4 -o addr show dev gang0 | awk '{print "addr", $4}'
echo "env $GPUMESH_PRIVATE_ADDR $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"
exec 3<>/dev/tcp/10.99.0.1/4242 || exit 5
echo hello >&3
read -r line <&3
echo "got $line"`}}
			r, err := ex.Start(a)
			if err != nil {
				t.Fatal(err)
			}
			ln := r.PrivateListener()
			if ln == nil {
				t.Fatal("no private listener")
			}
			c, err := ln.Accept()
			if err != nil {
				<-r.Done()
				t.Fatalf("%v; the job: %s", err, r.Tail())
			}
			defer c.Close()
			dst, err := OriginalDst(c)
			if err != nil || dst != netip.MustParseAddrPort("10.99.0.1:4242") {
				t.Errorf("original destination %v, %v; want 10.99.0.1:4242", dst, err)
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != "hello\n" {
				t.Fatalf("read %q, %v", line, err)
			}
			fmt.Fprintln(c, "back")
			res := waitDone(t, r, 30*time.Second)
			out := readAll(t, ex, a.Name(), Stdout)
			want := "addr 10.99.0.2/16\nenv 10.99.0.2 =gang0 gang0\ngot back\n"
			if res.ExitCode != 0 || out != want {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", res.ExitCode, out, readAll(t, ex, a.Name(), Stderr), want)
			}
			if _, err := ln.Accept(); err == nil {
				t.Error("the private listener still accepts after the attempt ended")
			}
		})
	}
}

// The node reaches a port the job listens on at its private address
// (DialPrivate), and nothing outside the attempt reaches that address:
// not the node's own network, not another job.
func TestPrivateNetAddressIsReachedOnlyThroughTheNode(t *testing.T) {
	ex := requirePrivateNet(t)
	const port = 4300
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	a := Attempt{JobID: "priv-listen2", Private: private("10.98.0.1/16"),
		Command: []string{"bash", "-c", fmt.Sprintf(`%s=listen-addr ./helper 10.98.0.1:%d > listen.out & until grep -q listening listen.out; do sleep 0.05; done; echo ok > ready.txt; wait`, helperEnv, port)},
		Work:    writeFiles(map[string]string{"helper": string(self)})}
	job, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, job)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := job.DialPrivate(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(c, "via the node")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "echo: via the node\n" {
		t.Errorf("through DialPrivate: %q, %v", line, err)
	}
	c.Close()
	// Bound to its private address only: loopback does not reach it.
	if c, err := job.DialTCP(ctx, port); err == nil {
		c.Close()
		t.Error("the job's port on its private address answers on loopback too")
	}

	// From the node's own network: no way there. (Some networks accept
	// every connection, as a proxy would: the job must not answer it.)
	d := net.Dialer{Timeout: 2 * time.Second}
	if c, err := d.Dial("tcp", fmt.Sprintf("10.98.0.1:%d", port)); err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintln(c, "from the node's network")
		if line, _ := bufio.NewReader(c).ReadString('\n'); strings.HasPrefix(line, "echo:") {
			t.Errorf("the node's network reaches the job's private address: %q", line)
		}
		c.Close()
	}
	// From another job (network none, no private network): refused at once.
	other := Attempt{JobID: "priv-other", Command: []string{"bash", "-c",
		fmt.Sprintf(`if timeout 5 bash -c 'exec 3<>/dev/tcp/10.98.0.1/%d'; then echo reached; else echo refused; fi`, port)}}
	o, err := ex.Start(other)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, o, 30*time.Second)
	if out := readAll(t, ex, other.Name(), Stdout); out != "refused\n" {
		t.Errorf("another job dialling the private address: %q", out)
	}
	// From another job of another private network that holds the same
	// range: its connection goes to its own node's listener, never to
	// the first job.
	third := Attempt{JobID: "priv-third", Private: private("10.98.0.2/16"), Command: []string{"bash", "-c",
		fmt.Sprintf(`exec 3<>/dev/tcp/10.98.0.1/%d && echo hello >&3 && read -r line <&3; echo "read $line"`, port)}}
	th, err := ex.Start(third)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := th.PrivateListener().Accept()
	if err != nil {
		t.Fatal(err)
	}
	tc.Close() // the node refuses it
	waitDone(t, th, 30*time.Second)
	if out := readAll(t, ex, third.Name(), Stdout); out != "read \n" {
		t.Errorf("a job of another private network: %q", out)
	}

	uid := job.UID()
	job.Stop(StopCancelled)
	waitDone(t, job, 30*time.Second)
	if _, err := job.DialPrivate(ctx, port); !errors.Is(err, ErrAttemptEnded) {
		t.Errorf("DialPrivate after the end: %v", err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, fmt.Sprintf("gpumesh-u%d", uid))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the attempt's network namespace is left after it ended: %v", err)
	}
}

// A job in an image on a private network: the same address, variables
// and redirect as a host command's.
func TestPrivateNetInAnImage(t *testing.T) {
	ex := containerized(t, nil)
	if c := ex.Capabilities(); !c.PrivateNet {
		t.Skipf("no private networks here: %s", c.PrivateNetReason)
	}
	rootfs := testRootfs(t, ex.Config().ContainerIDBase)
	a := Attempt{JobID: "priv-img", Private: private("10.97.0.2/16"),
		Image: &Container{Rootfs: rootfs, Args: []string{"/bin/job", "dial", "10.97.0.1:29500"}, Cwd: "/"}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.PrivateListener().Accept()
	if err != nil {
		<-r.Done()
		t.Fatalf("%v; the job: %s", err, r.Tail())
	}
	if dst, err := OriginalDst(c); err != nil || dst != netip.MustParseAddrPort("10.97.0.1:29500") {
		t.Errorf("original destination %v, %v", dst, err)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Fprintln(c, "back to the image")
	c.Close()
	res := waitDone(t, r, 60*time.Second)
	got := report(readAll(t, ex, a.Name(), Stdout))
	if res.ExitCode != 0 || line != "hello from the image\n" || got["private"] != "10.97.0.2 =gang0" || got["dialed"] != `"back to the image\n" <nil>` {
		t.Errorf("exit %d, read %q, report %v; stderr %s", res.ExitCode, line, got, readAll(t, ex, a.Name(), Stderr))
	}
}

func waitReady(t *testing.T, r *Run) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(r.WorkDir(), "ready.txt")); err == nil {
			return
		}
		select {
		case <-r.Done():
			t.Fatalf("the job ended before it was ready: %+v\n%s", r.Result(), r.Tail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is not ready after 10s:\n%s", r.Tail())
		}
		time.Sleep(10 * time.Millisecond) // polling a file the job writes
	}
}

func TestPrivateNetBadInput(t *testing.T) {
	for _, c := range []struct {
		addr    string
		network NetworkMode
		want    string
	}{
		{"8.8.8.2/24", NetworkNone, "inside 10.0.0.0/8"},
		{"10.1.0.0/16", NetworkNone, "first and last"},
		{"10.1.255.255/16", NetworkNone, "first and last"},
		{"10.1.0.1/31", NetworkNone, "/8 to /30"},
		{"10.1.0.1/16", NetworkHost, "not host"},
		{"10.0.0.1/7", NetworkNone, "/8 to /30"},
	} {
		a := Attempt{JobID: "j", Command: []string{"true"}, Private: private(c.addr), Limits: Limits{Network: c.network}}
		if err := a.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %s: %v, want an error saying %q", c.addr, c.network, err, c.want)
		}
	}
	ex := newExecutor(t, IsolationProcess, time.Second)
	if c := ex.Capabilities(); c.PrivateNet || !strings.Contains(c.PrivateNetReason, "isolation process") {
		t.Errorf("process mode's capabilities: %+v", c)
	}
	if _, err := ex.Start(Attempt{JobID: "j", Command: []string{"true"}, Private: private("10.1.0.1/16")}); !errors.Is(err, ErrNetworkUnavailable) {
		t.Errorf("a private network in process mode: %v", err)
	}
}
