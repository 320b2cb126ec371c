package gossip

import (
	"context"
	"testing"
	"time"
)

// Ads published by every node of a small connected mesh reach every node's
// Book, each node's own ad included.
func TestAdsReachEveryBook(t *testing.T) {
	tn := newTestNet(t)
	const n = 12
	var gs []*Gossip
	for range n {
		gs = append(gs, startGossip(t, tn.addHost(), Config{}))
	}
	tn.connectRandom(3, 1)
	now := time.Now()
	ctx := context.Background()
	// Gossipsub needs a heartbeat or two to build its mesh before a
	// publish reaches nodes that are not direct peers of the publisher.
	for _, g := range gs {
		select {
		case <-g.MeshReady():
		case <-time.After(10 * time.Second):
			t.Fatal("no mesh after 10 s")
		}
	}
	for i, g := range gs {
		if err := g.PublishAd(ctx, testAd(tn.hosts[i].ID(), 1, now)); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	defer func() {
		if t.Failed() {
			for i, g := range gs {
				t.Logf("node %d: book %d, peers %d, scores %v", i, g.Book().Len(time.Now()), len(g.ListPeers()), g.PeerScores())
			}
		}
	}()
	eventually(t, 10*time.Second, "every Book holds every node's ad", func() bool {
		for _, g := range gs {
			if g.Book().Len(time.Now()) != n {
				return false
			}
		}
		return true
	})
	for i, g := range gs {
		ad, ok := g.Book().Get(tn.hosts[(i+1)%n].ID(), time.Now())
		if !ok || ad.FreeCards() != 7 || ad.Region != "cn-east" {
			t.Fatalf("node %d holds %+v", i, ad)
		}
		if s := g.Stats().Topics[g.Topics().Capacity]; s.Published != 1 || s.Accepted < n-1 || s.Rejects() != 0 {
			t.Fatalf("node %d stats %+v", i, s)
		}
	}
}
