package mesh

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// transportPair builds two bare transports (no memberlist) on a mocknet.
func transportPair(t *testing.T, cfg func(*transportConfig)) (*transport, *transport, mocknet.Mocknet) {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	var hs []host.Host
	for range 2 {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	var trs []*transport
	for _, h := range hs {
		c := transportConfig{host: h, network: "test"}
		if cfg != nil {
			cfg(&c)
		}
		tr := newTransport(c)
		t.Cleanup(func() { tr.Shutdown() })
		trs = append(trs, tr)
	}
	return trs[0], trs[1], mn
}

func addrOf(tr *transport) memberlist.Address {
	return memberlist.Address{Name: tr.self.String(), Addr: swimHostPort(tr.self)}
}

func recvPacket(t *testing.T, tr *transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no packet")
		return nil
	}
}

func TestTransportDeliversPacketsFromTheAuthenticatedPeer(t *testing.T) {
	a, b, _ := transportPair(t, nil)
	for _, msg := range []string{"one", "two", "three"} {
		if _, err := a.WriteToAddress([]byte(msg), addrOf(b)); err != nil {
			t.Fatal(err)
		}
		p := recvPacket(t, b)
		if string(p.Buf) != msg {
			t.Fatalf("got %q, want %q", p.Buf, msg)
		}
		if p.From.String() != swimHostPort(a.self) {
			t.Fatalf("From = %s, want the sender's synthetic address", p.From)
		}
	}
	// The reply goes back over the same stream: one stream in all.
	if _, err := b.WriteToAddress([]byte("back"), addrOf(a)); err != nil {
		t.Fatal(err)
	}
	if p := recvPacket(t, a); string(p.Buf) != "back" {
		t.Fatalf("reply %q", p.Buf)
	}
	if n := a.stats.packetStreams.Load() + b.stats.packetStreams.Load(); n != 2 {
		t.Errorf("%d packet stream ends opened, want 2 (one stream, both ends)", n)
	}
	// An address that is not its name's own is refused.
	bad := memberlist.Address{Name: b.self.String(), Addr: swimHostPort(a.self)}
	if _, err := a.WriteToAddress([]byte("x"), bad); err == nil {
		t.Error("write to a mismatched name and address accepted")
	}
}

func TestTransportSendQueueIsBoundedAndNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	a, b, _ := transportPair(t, func(c *transportConfig) {
		c.sendQueue = 4
		c.beforeDial = func(ctx context.Context, _ peer.ID) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	// The first packet starts a writer, which takes what is queued and
	// blocks dialing; the queue refills to 4; the rest are dropped at once.
	start := time.Now()
	for i := 0; i < 20; i++ {
		if _, err := a.WriteToAddress([]byte{byte(i)}, addrOf(b)); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("20 writes took %v: WriteTo blocked", d)
	}
	drops := int(a.stats.sendDrops.Load())
	kept := 20 - drops
	if kept < 4 || kept > 8 {
		t.Fatalf("kept %d of 20 packets, want between 4 and 8 (at most one batch in the writer, at most 4 queued)", kept)
	}
	close(release)
	last := -1
	for range kept {
		v := int(recvPacket(t, b).Buf[0])
		if v <= last {
			t.Fatalf("packet %d after %d: order lost", v, last)
		}
		last = v
	}
}

func TestTransportClosesIdlePacketStreams(t *testing.T) {
	a, b, _ := transportPair(t, func(c *transportConfig) { c.idleTimeout = 200 * time.Millisecond })
	if _, err := a.WriteToAddress([]byte("hello"), addrOf(b)); err != nil {
		t.Fatal(err)
	}
	recvPacket(t, b)
	open := func(tr *transport) int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		n := 0
		for _, l := range tr.links {
			n += len(l.streams)
		}
		return n
	}
	waitFor(t, 10*time.Second, "idle stream closed at both ends", func() bool { return open(a) == 0 && open(b) == 0 })
	// Traffic resumes on a new stream.
	if _, err := b.WriteToAddress([]byte("again"), addrOf(a)); err != nil {
		t.Fatal(err)
	}
	if p := recvPacket(t, a); string(p.Buf) != "again" {
		t.Fatalf("got %q", p.Buf)
	}
}

func TestTransportResetsMalformedPacketStream(t *testing.T) {
	a, b, mn := transportPair(t, nil)
	s, err := mn.Host(a.self).NewStream(context.Background(), b.self, b.packetProto)
	if err != nil {
		t.Fatal(err)
	}
	// A good frame, then an empty one (malformed).
	if _, err := s.Write(append(appendFrame(nil, []byte("ok")), 0)); err != nil {
		t.Fatal(err)
	}
	if p := recvPacket(t, b); string(p.Buf) != "ok" {
		t.Fatalf("got %q", p.Buf)
	}
	waitFor(t, 10*time.Second, "malformed stream counted", func() bool { return b.stats.malformed.Load() == 1 })
	buf := make([]byte, 1)
	if _, err := s.Read(buf); err == nil || err == io.EOF {
		t.Fatalf("read after malformed frame: %v, want a reset", err)
	}
	// The peer is not cut off: a well-formed stream still works.
	if _, err := a.WriteToAddress([]byte("fine"), addrOf(b)); err != nil {
		t.Fatal(err)
	}
	if p := recvPacket(t, b); string(p.Buf) != "fine" {
		t.Fatalf("got %q", p.Buf)
	}
}

func TestTransportStreamDeadlineResetsASilentPeer(t *testing.T) {
	a, b, _ := transportPair(t, nil)
	conn, err := a.DialAddressTimeout(addrOf(b), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The dialer speaks first (as memberlist does): libp2p negotiates the
	// protocol lazily, with the first write.
	if _, err := conn.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	var accepted interface{ Close() error }
	select {
	case c := <-b.StreamCh():
		accepted = c
	case <-time.After(10 * time.Second):
		t.Fatal("stream not accepted")
	}
	defer accepted.Close()
	// b never writes: a's read must end at its deadline (mocknet streams
	// ignore deadlines; the transport enforces them).
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	start := time.Now()
	_, err = conn.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("read from a silent peer returned data")
	}
	if ne, ok := err.(interface{ Timeout() bool }); !ok || !ne.Timeout() {
		t.Fatalf("read error %v is not a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline enforced after %v", d)
	}
}

func TestTransportShutdownEndsEverything(t *testing.T) {
	a, b, _ := transportPair(t, nil)
	if _, err := a.WriteToAddress([]byte("x"), addrOf(b)); err != nil {
		t.Fatal(err)
	}
	recvPacket(t, b)
	if _, err := a.DialAddressTimeout(addrOf(b), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteToAddress([]byte("x"), addrOf(a)); err != errTransportClosed {
		t.Fatalf("write after shutdown: %v", err)
	}
	// goleak in TestMain checks that every goroutine of b has ended.
}
