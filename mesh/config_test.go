package mesh

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func TestConfigValidateNamesTheBadField(t *testing.T) {
	rsa, _, _ := crypto.GenerateKeyPair(crypto.RSA, 2048)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no identity", Config{}, "DataDir or Identity"},
		{"rsa identity", Config{Identity: rsa}, "Ed25519"},
		{"network name", Config{DataDir: "d", Network: "Café Mesh"}, "network name"},
		{"short secret", Config{DataDir: "d", Secret: []byte("short")}, "secret is 5 bytes"},
		{"quic when private", Config{DataDir: "d", Secret: []byte("0123456789abcdef"), ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/0.0.0.0/udp/1/quic-v1")}}, "TCP only"},
		{"websocket listen", Config{DataDir: "d", ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/0.0.0.0/tcp/1/ws")}}, "want TCP"},
		{"join without peer id", Config{DataDir: "d", Join: []ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/tcp/4747")}}, "/p2p/<peer ID>"},
		{"retry bounds", Config{DataDir: "d", JoinRetryMin: time.Second, JoinRetryMax: time.Millisecond}, "JoinRetryMin"},
		{"profile", Config{DataDir: "d", Profile: Profile{Name: "x", ProbeInterval: time.Second}}, "ProbeTimeout"},
		{"meta", Config{DataDir: "d", Meta: Meta{Cards: 1, FreeCards: 3}}, "free cards"},
		{"watermarks", Config{DataDir: "d", ConnLow: 10, ConnHigh: 5}, "ConnLow < ConnHigh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.withDefaults().Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if err := (Config{DataDir: "d"}).withDefaults().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	private := Config{DataDir: "d", Secret: []byte("0123456789abcdef")}.withDefaults()
	if err := private.Validate(); err != nil {
		t.Fatalf("private defaults do not validate: %v", err)
	}
	for _, a := range private.ListenAddrs {
		if !isTCP(a) {
			t.Errorf("private default listen address %s is not TCP", a)
		}
	}
}

func TestProfilesValidateAndFastIsFaster(t *testing.T) {
	for _, p := range []Profile{FastProfile(), LANProfile(), WANProfile()} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	fast, lan := FastProfile(), LANProfile()
	if fast.ProbeInterval != 200*time.Millisecond || fast.ProbeTimeout != 100*time.Millisecond || fast.SuspicionMult != 5 || fast.GossipInterval != 100*time.Millisecond {
		t.Errorf("fast profile timings changed: %+v", fast)
	}
	if lan.ProbeInterval != time.Second || lan.SuspicionMult != 4 {
		t.Errorf("LAN profile is not memberlist's LAN defaults: %+v", lan)
	}
	c := memberlist.DefaultLANConfig()
	fast.apply(c)
	if c.UDPBufferSize != fast.PacketSize || c.ProbeInterval != fast.ProbeInterval || c.AwarenessMaxMultiplier <= 1 || c.SuspicionMaxTimeoutMult <= 1 {
		t.Errorf("apply: %+v", c)
	}
}

func TestStateText(t *testing.T) {
	for s, want := range map[State]string{StateAlive: "alive", StateSuspect: "suspect", StateDead: "dead", StateLeft: "left"} {
		b, err := s.MarshalText()
		if err != nil || string(b) != want {
			t.Errorf("%d: %q %v", s, b, err)
		}
	}
	if _, err := State(0).MarshalText(); err == nil {
		t.Error("zero state marshals")
	}
}

func TestAliveDelegateRejectsForgedNamesAddressesAndMeta(t *testing.T) {
	k, _, _ := crypto.GenerateEd25519Key(nil)
	id, _ := peer.IDFromPrivateKey(k)
	k2, _, _ := crypto.GenerateEd25519Key(nil)
	other, _ := peer.IDFromPrivateKey(k2)
	good, _ := encodeMeta(Meta{Region: "x"})
	table := newMemberTable("self", time.Minute)
	node := func(name string, ipOf peer.ID, port uint16, meta []byte) *memberlist.Node {
		return &memberlist.Node{Name: name, Addr: swimIP(ipOf), Port: port, Meta: meta}
	}
	if err := table.validAlive(node(id.String(), id, swimPort, good)); err != nil {
		t.Fatalf("valid node rejected: %v", err)
	}
	for name, n := range map[string]*memberlist.Node{
		"name not a peer ID":   node("not-a-peer", id, swimPort, good),
		"address of another":   node(id.String(), other, swimPort, good),
		"another port":         node(id.String(), id, 1234, good),
		"undecodable metadata": node(id.String(), id, swimPort, []byte{0xff}),
	} {
		if err := table.validAlive(n); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Known members take the fast path, which still checks the address.
	table.upsert(node(id.String(), id, swimPort, good), time.Now())
	if err := table.validAlive(node(id.String(), other, swimPort, good)); err == nil {
		t.Error("known member with a forged address accepted")
	}
}
