package mesh

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

func loopbackTCP() []ma.Multiaddr {
	return []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")}
}

func loopbackTCPAndQUIC() []ma.Multiaddr {
	return []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0"), ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1")}
}

// realNode starts a node on real loopback sockets.
func realNode(t *testing.T, cfg Config) *Mesh {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.ListenAddrs == nil {
		cfg.ListenAddrs = loopbackTCP()
	}
	cfg.DisableNAT = true
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t, slog.LevelInfo)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestRealThreeNodesOnLoopbackTCP(t *testing.T) {
	a := realNode(t, Config{Meta: Meta{Region: "a", Cards: 2, FreeCards: 2, Models: []string{"rtx4090-24g"}}})
	b := realNode(t, Config{Join: a.Addrs()})
	c := realNode(t, Config{Join: a.Addrs(), ListenAddrs: loopbackTCPAndQUIC()})
	nodes := []*Mesh{a, b, c}
	waitFor(t, 20*time.Second, "3 real nodes alive everywhere", func() bool { return allSee(nodes, StateAlive) })
	for _, n := range nodes {
		mem, _ := n.Member(a.ID())
		if mem.Region != "a" || mem.Cards != 2 || len(mem.Addrs) == 0 {
			t.Errorf("%s sees a as %+v", n.ID().ShortString(), mem.Meta)
		}
	}
	waitFor(t, 20*time.Second, "probe traffic counted", func() bool {
		s := a.Stats()
		return s.PacketsReceived > 0 && s.BytesSent > 0 && s.StreamBytes > 0
	})
	// The host's own byte totals count the same traffic, both ways.
	waitFor(t, 20*time.Second, "host bytes counted", func() bool {
		in, out := a.Bytes()
		return in > 0 && out > 0
	})
	// A graceful leave over real sockets is seen as left.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "left over TCP", func() bool {
		return stateOf(a, c.ID()) == StateLeft && stateOf(b, c.ID()) == StateLeft
	})
}

func TestRealPrivateMeshRefusesOtherSecretsAndPublicNodes(t *testing.T) {
	secret := []byte("this is the cafe's mesh secret")
	a := realNode(t, Config{Secret: secret})
	b := realNode(t, Config{Secret: secret, Join: a.Addrs()})
	waitFor(t, 20*time.Second, "private pair alive", func() bool { return allSee([]*Mesh{a, b}, StateAlive) })

	for name, cfg := range map[string]Config{
		"other secret": {Secret: []byte("some other mesh secret, same length!")},
		"no secret":    {},
	} {
		t.Run(name, func(t *testing.T) {
			intruder := realNode(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := intruder.Join(ctx, a.Addrs()...)
			if !errors.Is(err, ErrJoinFailed) {
				t.Fatalf("join: %v, want ErrJoinFailed", err)
			}
			if !strings.Contains(err.Error(), "secret") {
				t.Errorf("the joining side is not told about the secret: %v", err)
			}
			t.Logf("joining side sees: %v", err)
			if a.NumAlive() != 2 || intruder.NumAlive() != 1 {
				t.Errorf("membership changed: a sees %d alive, intruder %d", a.NumAlive(), intruder.NumAlive())
			}
		})
	}
}

func TestRealPrivateMeshRejectsQUICListenAddress(t *testing.T) {
	_, err := New(Config{DataDir: t.TempDir(), Secret: []byte("0123456789abcdef"), ListenAddrs: loopbackTCPAndQUIC(), DisableNAT: true})
	if err == nil || !strings.Contains(err.Error(), "TCP only") {
		t.Fatalf("QUIC with a secret: %v", err)
	}
}

func TestRealWrongNetworkNameIsRefused(t *testing.T) {
	a := realNode(t, Config{Network: "north"})
	b := realNode(t, Config{Network: "south"})
	_, err := b.Join(context.Background(), a.Addrs()...)
	if !errors.Is(err, ErrJoinFailed) || !strings.Contains(err.Error(), "wrong network name") {
		t.Fatalf("join across networks: %v", err)
	}
}

// A node whose bootstrap peer is down starts alone and joins once the peer
// comes up at the address it was given.
func TestRealJoinRetryWhenBootstrapComesUpLater(t *testing.T) {
	dir := t.TempDir()
	// Learn the identity and a free port the bootstrap node will use.
	probe := realNode(t, Config{DataDir: dir})
	addrs := probe.Addrs()
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	listen := make([]ma.Multiaddr, 0, len(addrs))
	for _, a := range addrs {
		bare, _ := ma.SplitFunc(a, func(c ma.Component) bool { return c.Protocol().Code == ma.P_P2P })
		listen = append(listen, bare)
	}

	late := realNode(t, Config{Join: addrs, JoinRetryMin: 100 * time.Millisecond, JoinRetryMax: 300 * time.Millisecond})
	waitFor(t, 20*time.Second, "failed join attempts while the bootstrap is down", func() bool { return late.joinFailures.Load() >= 2 })
	if late.NumAlive() != 1 {
		t.Fatalf("alive members %d while alone", late.NumAlive())
	}
	boot := realNode(t, Config{DataDir: dir, ListenAddrs: listen})
	waitFor(t, 20*time.Second, "joined once the bootstrap is up", func() bool { return allSee([]*Mesh{boot, late}, StateAlive) })
}

func TestRealNodeWithNATTraversalStartsAndStops(t *testing.T) {
	m, err := New(Config{DataDir: t.TempDir(), ListenAddrs: loopbackTCPAndQUIC(), Logger: testLogger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Addrs()) == 0 {
		t.Error("no addresses")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}
