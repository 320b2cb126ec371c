package gossip

import (
	"context"
	"errors"
	"math"
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
		st := g.Stats()
		// Each of the n-1 other ads was taken from gossip or from the
		// book sync a connection starts (which can run after the publish,
		// under load, and then race the gossip copy); a copy that comes
		// second is ignored as a duplicate, never rejected.
		s := st.Topics[g.Topics().Capacity]
		dup := s.Ignored[ReasonDuplicate.String()]
		if s.Published != 1 || s.Accepted+st.Sync.Applied < n-1 || s.Accepted+dup > n-1 || s.Rejects() != 0 || s.Ignores() != dup || s.MeshPeers == 0 {
			t.Fatalf("node %d stats %+v, sync %+v", i, s, st.Sync)
		}
		// Every node received the n-1 other ads, each well over 150 bytes.
		if st.BytesIn < (n-1)*150 || st.BytesOut == 0 || st.RPCsIn == 0 {
			t.Fatalf("node %d traffic %+v", i, st)
		}
	}
}

// The Advertiser, publishing through Gossip, keeps a node's supply in its
// peers' Books; an update shows there after MinInterval at most.
func TestAdvertiserOverGossip(t *testing.T) {
	tn := newTestNet(t)
	a, b := startGossip(t, tn.addHost(), Config{}), startGossip(t, tn.addHost(), Config{})
	tn.connect(tn.hosts[0], tn.hosts[1])
	supply := Supply{Region: "cafe-7", Cards: []SupplyCard{card(t, "rtx4090-24g", 0, CardFree), card(t, "rtx4090-24g", 1, CardBusy)}}
	adv, err := NewAdvertiser(a, supply, AdvertiserConfig{Republish: a.MeshReady(), PeerCount: func() int { return a.Book().Len(time.Now()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer adv.Close()
	self := tn.hosts[0].ID()
	eventually(t, 10*time.Second, "the peer's Book holds the node's cards", func() bool {
		return b.Book().FreeCount(self, "rtx4090-24g", time.Now()) == 1
	})
	if ad, ok := a.Book().Get(self, time.Now()); !ok || ad.Region != "cafe-7" {
		t.Fatal("the node's own ad is in its own Book")
	}
	supply.Cards[1].State = CardFree
	if err := adv.Update(context.Background(), supply); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the update reaches the peer", func() bool {
		return b.Book().FreeCount(self, "rtx4090-24g", time.Now()) == 2
	})
}

func TestGossipConfigAndClose(t *testing.T) {
	tn := newTestNet(t)
	h := tn.addHost()
	for _, cfg := range []Config{{Network: ""}, {Network: "Bad Name"}, {Network: "-x"}, {Network: "ok", ValidateQueueSize: -1}} {
		if _, err := New(h, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	g, err := New(h, Config{Network: "main-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Topics().Capacity; got != "gpumesh/main-1/v1/capacity" {
		t.Fatalf("topic %q", got)
	}
	if got := g.Topics().BidRequest; got != "gpumesh/main-1/v1/bid-request" {
		t.Fatalf("topic %q", got)
	}
	if err := g.PublishAd(context.Background(), testAd(h.ID(), 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the node's own ad lands in its Book", func() bool { return g.Book().Len(time.Now()) == 1 })
	// An ad peers would refuse is refused here, with the reason.
	if err := g.PublishAd(context.Background(), testAd(h.ID(), 1, time.Now())); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("republishing seq 1: %v", err)
	}
	bad := testAd(h.ID(), 2, time.Now())
	bad.Cards[0].PriceCNY = math.Inf(1)
	if err := g.PublishAd(context.Background(), bad); !errors.Is(err, ErrBadField) {
		t.Fatalf("infinite price: %v", err)
	}
	if s := g.Stats().Topics[g.Topics().Capacity]; s.Published != 1 || s.Rejects() != 0 {
		t.Fatalf("own refused ads are not counted against peers: %+v", s)
	}
	g.Close()
	g.Close()
	if err := g.PublishAd(context.Background(), testAd(h.ID(), 3, time.Now())); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
