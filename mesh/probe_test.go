package mesh

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// A probe of a loopback node: the peer answers and says where it saw the
// probe; a dial back is not tried (loopback is no public address); a peer
// that is not there is named with why.
func TestProbeAsksThePeers(t *testing.T) {
	a := realNode(t, Config{})
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := peer.IDFromPrivateKey(key)
	gone := ma.StringCast("/ip4/127.0.0.1/tcp/1/p2p/" + other.String())
	res, err := Probe(context.Background(), ProbeConfig{
		Join:        []ma.Multiaddr{a.Addrs()[0], gone},
		ListenAddrs: loopbackTCP(),
		Timeout:     10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Peers) != 2 {
		t.Fatalf("%d peers: %+v", len(res.Peers), res.Peers)
	}
	p := res.Peers[0]
	if p.Err != nil || p.ID != a.ID() || p.Observed == nil || !strings.HasPrefix(p.Observed.String(), "/ip4/127.0.0.1/tcp/") {
		t.Errorf("the live peer: %+v", p)
	}
	if res.Peers[1].Err == nil || !strings.Contains(res.Peers[1].Err.Error(), "unreachable") {
		t.Errorf("the absent peer: %+v", res.Peers[1])
	}
	if res.ReachErr == nil || len(res.Reachable)+len(res.Unreachable) > 0 {
		t.Errorf("loopback was dialled back: %+v", res)
	}
	if _, err := Probe(context.Background(), ProbeConfig{}); err == nil {
		t.Error("a probe without peers ran")
	}
}
