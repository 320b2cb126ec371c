package mesh

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

// Isolate and Cut set their flags before they close a node's connections
// one by one. Meanwhile no new stream may reach a member over a
// connection not yet closed: a node isolated in that window once claimed
// its job from such a member and ran it beside its successor. Here the
// flag is set and the connection left open, as in that window.
func TestSimRefusesStreamsBetweenNodesApartOverOpenConnections(t *testing.T) {
	sim := NewSimNetwork(SimOptions{})
	defer sim.Close()
	nodes := simCluster(t, sim, 2, nil)
	waitFor(t, 20*time.Second, "both alive", func() bool { return allSee(nodes, StateAlive) })
	a, b := nodes[0], nodes[1]
	const proto = "/gpumesh/test/apart"
	b.Host().SetStreamHandler(proto, func(s network.Stream) { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := a.Host().NewStream(ctx, b.ID(), proto)
	if err != nil {
		t.Fatalf("a stream before the cut: %v", err)
	}
	s.Close()
	if got := a.Host().Network().Connectedness(b.ID()); got != network.Connected {
		t.Fatalf("a and b are %v before the cut", got)
	}

	sim.mu.Lock()
	sim.isolated[b.ID()] = true // the flag only: the connection stays open
	sim.mu.Unlock()
	for _, from := range []*Mesh{a, b} {
		to := a
		if from == a {
			to = b
		}
		if s, err := from.Host().NewStream(ctx, to.ID(), proto); !errors.Is(err, ErrSimUnreachable) {
			if s != nil {
				s.Close()
			}
			t.Errorf("a new stream from %s to %s with b isolated: %v; want ErrSimUnreachable", from.ID().ShortString(), to.ID().ShortString(), err)
		}
	}
	sim.mu.Lock()
	delete(sim.isolated, b.ID())
	sim.mu.Unlock()
	if s, err := a.Host().NewStream(ctx, b.ID(), proto); err != nil {
		t.Errorf("a stream once b is back: %v", err)
	} else {
		s.Close()
	}
}
