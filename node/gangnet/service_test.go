package gangnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/mesh/leaktest"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestMain(m *testing.M) { leaktest.VerifyMain(m) }

// newHost is a libp2p host on loopback TCP, closed with the test.
func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func connect(t testing.TB, a, b host.Host) {
	t.Helper()
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func newService(t testing.TB, h host.Host, tweak func(*Config)) *Service {
	t.Helper()
	cfg := Config{Host: h, Network: "test", DialWait: 2 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// share stands in for a share's namespace without one: its "redirect"
// listener on loopback, whose connections say where they were going by
// the order they are made in (connect registers the destination first),
// and its ports, servers on loopback that Dial maps to.
type share struct {
	t   testing.TB
	job string
	ln  net.Listener

	mu    sync.Mutex
	dests map[string]netip.AddrPort // the listener's side's remote address → destination
	ports map[int]int               // the share's port → the loopback port that serves it
	wake  chan struct{}
}

func newShare(t testing.TB, job string) *share {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &share{t: t, job: job, ln: ln, dests: map[string]netip.AddrPort{}, ports: map[int]int{}, wake: make(chan struct{})}
}

func (s *share) member(rank int, roster []Peer) Member {
	return Member{Job: s.job, Rank: rank, Roster: roster, Listener: s.ln, Dest: s.dest, Dial: s.dial}
}

// connect is the share connecting to rank's address and port: its
// connection arrives at the share's listener, as the redirect makes it.
func (s *share) connect(rank, port int) net.Conn {
	s.t.Helper()
	a, err := Addr(s.job, rank)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.connectTo(netip.AddrPortFrom(a.Addr(), uint16(port)))
}

func (s *share) connectTo(dst netip.AddrPort) net.Conn {
	s.t.Helper()
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.dests[c.LocalAddr().String()] = dst
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	return c
}

// dest is where the connection was going, once connectTo said so.
func (s *share) dest(c net.Conn) (netip.AddrPort, error) {
	timeout := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		d, ok := s.dests[c.RemoteAddr().String()]
		wake := s.wake
		s.mu.Unlock()
		if ok {
			return d, nil
		}
		select {
		case <-wake:
		case <-timeout:
			return d, errors.New("no destination")
		}
	}
}

func (s *share) dial(ctx context.Context, port int) (net.Conn, error) {
	s.mu.Lock()
	real, ok := s.ports[port]
	s.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", real))
}

// serve makes the share listen on port: each connection gets its lines
// back as "rank R: LINE", and "bye" at the end of its input.
func (s *share) serve(rank, port int) {
	s.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	var wg sync.WaitGroup
	s.t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "rank %d: %s\n", rank, sc.Text())
				}
				fmt.Fprintln(c, "bye")
			}()
		}
	}()
	s.mu.Lock()
	s.ports[port] = ln.Addr().(*net.TCPAddr).Port
	s.mu.Unlock()
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// exchange writes line, half-closes, and returns everything read back.
func exchange(t testing.TB, c net.Conn, line string) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "write: " + err.Error()
	}
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b) + "read: " + err.Error()
	}
	return string(b)
}

// gang is two nodes running one share each of job j1, epoch 3 and 4.
type gang struct {
	a, b     host.Host
	sa, sb   *Service
	s0, s1   *share
	roster   []Peer
	job      string
	services []*Service
}

func newGang(t *testing.T, tweak func(*Config)) *gang {
	t.Helper()
	g := &gang{a: newHost(t), b: newHost(t), job: "j1"}
	connect(t, g.a, g.b)
	g.sa, g.sb = newService(t, g.a, tweak), newService(t, g.b, tweak)
	g.roster = []Peer{{Node: g.a.ID(), Share: 0, Epoch: 3}, {Node: g.b.ID(), Share: 1, Epoch: 4}}
	g.s0, g.s1 = newShare(t, g.job), newShare(t, g.job)
	if err := g.sa.Add(g.s0.member(0, g.roster)); err != nil {
		t.Fatal(err)
	}
	if err := g.sb.Add(g.s1.member(1, g.roster)); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestSharesReachEachOtherAcrossNodes(t *testing.T) {
	g := newGang(t, nil)
	g.s0.serve(0, 29500)
	g.s1.serve(1, 41234) // a port chosen at run time, as NCCL's

	if got := exchange(t, g.s1.connect(0, 29500), "hello master"); got != "rank 0: hello master\nbye\n" {
		t.Errorf("rank 1 → rank 0: %q", got)
	}
	if got := exchange(t, g.s0.connect(1, 41234), "hello worker"); got != "rank 1: hello worker\nbye\n" {
		t.Errorf("rank 0 → rank 1: %q", got)
	}
	// Many at once, both ways.
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if got, want := exchange(t, g.s1.connect(0, 29500), fmt.Sprint(i)), fmt.Sprintf("rank 0: %d\nbye\n", i); got != want {
				errs <- fmt.Sprintf("%q, want %q", got, want)
			}
		}()
		go func() {
			defer wg.Done()
			if got, want := exchange(t, g.s0.connect(1, 41234), fmt.Sprint(i)), fmt.Sprintf("rank 1: %d\nbye\n", i); got != want {
				errs <- fmt.Sprintf("%q, want %q", got, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A connection to a port that does not listen yet is carried once it
// does (a rendezvous whose master starts last); one that never listens is
// reset after DialWait.
func TestConnectionWaitsForItsPort(t *testing.T) {
	g := newGang(t, func(c *Config) { c.DialWait = 3 * time.Second })
	c := g.s1.connect(0, 29500)
	time.AfterFunc(300*time.Millisecond, func() { g.s0.serve(0, 29500) })
	if got := exchange(t, c, "early"); got != "rank 0: early\nbye\n" {
		t.Errorf("a connection made before the port listened: %q", got)
	}
	start := time.Now()
	got := exchange(t, g.s1.connect(0, 29999), "nobody")
	if strings.Contains(got, "rank 0") || time.Since(start) > 6*time.Second {
		t.Errorf("a connection to a port nobody listens on: %q after %v", got, time.Since(start))
	}
}

// The share's connections to addresses that hold no share of the gang
// (beyond the roster, its own, another subnet) are reset at once.
func TestConnectionsToNoShareAreReset(t *testing.T) {
	g := newGang(t, nil)
	g.s0.serve(0, 29500)
	other, _ := Addr("another-job", 0)
	for name, c := range map[string]net.Conn{
		"beyond the roster": g.s1.connect(5, 29500),
		"another subnet":    g.s1.connectTo(netip.AddrPortFrom(other.Addr(), 29500)),
	} {
		if got := exchange(t, c, "x"); strings.Contains(got, "rank 0") || !strings.Contains(got, "reset") {
			t.Errorf("%s: %q", name, got)
		}
	}
}

// Only the node the roster names for a rank, with that rank's share and
// epoch, reaches a share; a stranger, a stale epoch and another job are
// refused.
func TestOnlyTheGangsNodesConnect(t *testing.T) {
	g := newGang(t, func(c *Config) { c.DialWait = 500 * time.Millisecond })
	g.s1.serve(1, 4000)
	stranger := newHost(t)
	connect(t, stranger, g.b)
	ask := func(from host.Host, req request) string {
		t.Helper()
		st, err := from.NewStream(context.Background(), g.b.ID(), Protocol("test"))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		st.SetDeadline(time.Now().Add(10 * time.Second))
		if err := writeFrame(st, req); err != nil {
			t.Fatal(err)
		}
		var resp response
		if err := readFrame(st, &resp); err != nil {
			return "unreadable: " + err.Error()
		}
		if resp.OK {
			return "ok"
		}
		return resp.Error
	}
	good := request{Job: "j1", FromRank: 0, FromShare: 0, FromEpoch: 3, ToRank: 1, ToShare: 1, ToEpoch: 4, Port: 4000}
	if got := ask(g.a, good); got != "ok" {
		t.Fatalf("the gang's own node: %s", got)
	}
	for name, c := range map[string]struct {
		from host.Host
		edit func(*request)
		want string
	}{
		"a stranger claiming rank 0": {stranger, func(*request) {}, "not in the roster"},
		"a stale epoch of rank 0":    {g.a, func(r *request) { r.FromEpoch = 2 }, "not in the roster"},
		"rank 0 as another share":    {g.a, func(r *request) { r.FromShare = 7 }, "not in the roster"},
		"the target's older epoch":   {g.a, func(r *request) { r.ToEpoch = 1 }, "runs here as share 1 epoch 4"},
		"another job":                {g.a, func(r *request) { r.Job = "j2" }, "does not run on node"},
		"a bad port":                 {g.a, func(r *request) { r.Port = 70000 }, "bad request: port 70000"},
		"to itself":                  {g.a, func(r *request) { r.FromRank = 1 }, "connects to itself"},
	} {
		req := good
		c.edit(&req)
		if got := ask(c.from, req); !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

// Shares of one gang on one node reach each other without a stream.
func TestSharesOnOneNode(t *testing.T) {
	h := newHost(t)
	s := newService(t, h, nil)
	roster := []Peer{{Node: h.ID(), Share: 0, Epoch: 1}, {Node: h.ID(), Share: 1, Epoch: 1}}
	s0, s1 := newShare(t, "one"), newShare(t, "one")
	for i, sh := range []*share{s0, s1} {
		if err := s.Add(sh.member(i, roster)); err != nil {
			t.Fatal(err)
		}
	}
	s0.serve(0, 29500)
	if got := exchange(t, s1.connect(0, 29500), "next door"); got != "rank 0: next door\nbye\n" {
		t.Errorf("%q", got)
	}
	var streams int
	for _, c := range h.Network().Conns() {
		streams += len(c.GetStreams())
	}
	if streams != 0 {
		t.Errorf("%d streams open", streams)
	}
}

// Removing a share cuts its connections both ways; Close cuts the rest.
func TestRemoveCutsTheSharesConnections(t *testing.T) {
	g := newGang(t, nil)
	g.s0.serve(0, 29500)
	c := g.s1.connect(0, 29500)
	defer c.Close()
	fmt.Fprintln(c, "one")
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "rank 0: one\n" {
		t.Fatalf("%q, %v", line, err)
	}
	g.sa.Remove("j1", 0, 3)
	if _, err := io.ReadAll(r); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("the connection of a removed share goes on")
	}
	if got := exchange(t, g.s1.connect(0, 29500), "two"); strings.Contains(got, "rank 0") {
		t.Errorf("a removed share still answers: %q", got)
	}
}

func TestMemberValidation(t *testing.T) {
	h := newHost(t)
	s := newService(t, h, nil)
	other := newHost(t)
	sh := newShare(t, "v")
	for name, c := range map[string]struct {
		m    Member
		want string
	}{
		"bad job":      {Member{Job: "../x", Roster: []Peer{{Node: h.ID()}}, Listener: sh.ln, Dest: sh.dest, Dial: sh.dial}, "job"},
		"no roster":    {Member{Job: "v", Listener: sh.ln, Dest: sh.dest, Dial: sh.dial}, "roster of 0"},
		"rank outside": {Member{Job: "v", Rank: 1, Roster: []Peer{{Node: h.ID()}}, Listener: sh.ln, Dest: sh.dest, Dial: sh.dial}, "rank 1 of 1"},
		"another node": {Member{Job: "v", Roster: []Peer{{Node: other.ID()}}, Listener: sh.ln, Dest: sh.dest, Dial: sh.dial}, "not this one"},
		"no listener":  {Member{Job: "v", Roster: []Peer{{Node: h.ID()}}, Dest: sh.dest, Dial: sh.dial}, "Listener"},
	} {
		if err := s.Add(c.m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	m := sh.member(0, []Peer{{Node: h.ID(), Epoch: 1}})
	if err := s.Add(m); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(m); err == nil || !strings.Contains(err.Error(), "here already") {
		t.Errorf("added twice: %v", err)
	}
}

// A stream that sends garbage is reset; the service goes on.
func TestGarbageRequestIsDropped(t *testing.T) {
	g := newGang(t, nil)
	g.s1.serve(1, 4000)
	st, err := g.a.NewStream(context.Background(), g.b.ID(), Protocol("test"))
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte{0xff, 0xff, 'x'})
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(st); err == nil {
		t.Error("a garbage request got an answer")
	}
	st.Reset()
	if got := exchange(t, g.s0.connect(1, 4000), "still"); got != "rank 1: still\nbye\n" {
		t.Errorf("after garbage: %q", got)
	}
	var _ network.Stream = st
}
