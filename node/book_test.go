package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
)

// A member that membership declares dead leaves gossip's Book at once, long
// before its ad would expire: the Book answers, the status and the peer list
// lose its cards. Its ad is kept, hidden, so its cards return when it comes
// back alive (a healed partition).
func TestDeadMembersCardsLeaveTheBookAtOnce(t *testing.T) {
	sm := newSimMesh(t, "a100-80g:1", "rtx4090-24g:2", "h100-sxm-80g:4")
	a, c := sm.nodes[0], sm.nodes[2]
	sm.waitBook(a, 7)
	ad, ok := a.gossip.Book().Get(c.ID(), time.Now())
	if !ok {
		t.Fatal("a holds no ad of c")
	}

	sm.net.Isolate(c.ID())
	eventually(t, 20*time.Second, "a holds c dead", func() bool {
		m, ok := a.Mesh().Member(c.ID())
		return ok && m.State == mesh.StateDead
	})
	dead := time.Now()
	// The driver hides c as soon as it takes the event; the ad would live
	// on for tens of seconds.
	eventually(t, 2*time.Second, "c's cards leave a's Book", func() bool {
		cards, _ := a.BookCards()
		return cards == 3
	})
	if left := time.Until(ad.ExpiresAt); left < time.Second {
		t.Fatalf("c's ad expires %v after c was held dead: the test cannot tell hiding from expiry", left)
	}
	t.Logf("hidden %v after a held c dead; its ad had %v to live", time.Since(dead).Round(time.Millisecond), time.Until(ad.ExpiresAt).Round(time.Second))
	if err := a.gossip.Book().CheckSeq(c.ID(), ad.Seq, time.Now()); !errors.Is(err, gossip.ErrDuplicate) && !errors.Is(err, gossip.ErrStale) {
		t.Errorf("a no longer holds c's ad (CheckSeq of its seq: %v): it cannot bring c's cards back", err)
	}
	// The status is rebuilt every second.
	eventually(t, 3*time.Second, "a's status counts the 3 cards of a and b", func() bool {
		st, err := a.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cards := st.(*api.Status).Mesh.Cards
		return cards.Total == 3 && cards.Free == 3
	})
	peers, err := a.Peers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.ID == c.ID().String() && (p.State != "dead" || p.FreeCards != 0) {
			t.Errorf("a lists c as %s with %d free cards, want dead with none", p.State, p.FreeCards)
		}
	}

	sm.net.Reconnect(c.ID())
	eventually(t, 30*time.Second, "c's cards are back in a's Book", func() bool {
		m, ok := a.Mesh().Member(c.ID())
		cards, _ := a.BookCards()
		return ok && m.State == mesh.StateAlive && cards == 7
	})
}
