package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
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

// Once a node has heard every live member's ad, a job the mesh could never
// hold fails at once with what is missing (until then it would wait in
// pending: the missing ads might hold the cards).
func TestImpossibleJobFailsFastOnceEveryMemberIsHeard(t *testing.T) {
	sm := newSimMesh(t, "", "h100-sxm-80g:2", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 3)
	eventually(t, 5*time.Second, "the book is complete", func() bool {
		var complete bool
		if err := coord.do(context.Background(), func() { complete = coord.book.Complete() }); err != nil {
			t.Fatal(err)
		}
		return complete
	})
	spec := market.JobSpec{AllowSimulated: true, ID: "huge", Cards: 16, Models: []string{"h100-sxm-80g"}, MaxPriceCNY: 60, Command: []string{"true"}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "huge", 10*time.Second, market.JobFailed)
	if !strings.Contains(rec.Reason, "needs 16 cards of h100-sxm-80g") || !strings.Contains(rec.Reason, "the mesh has 2") {
		t.Fatalf("failed with reason %q, want what is missing", rec.Reason)
	}
}

// A placement changes a supplier's free cards in every peer's book at once
// (its capacity ad), but its membership metadata — gossiped to every member
// by memberlist — at most every MetaFreeEvery: the free count alone does not
// start a membership wave per placement. The held-back count still follows.
func TestFreeCountReachesMembershipAtMostEveryInterval(t *testing.T) {
	const every = 8 * time.Second
	sm := newSimMeshWith(t, func(c *Config) { c.MetaFreeEvery = every }, "", "a100-80g:2")
	coord, sup := sm.nodes[0], sm.nodes[1]
	sm.waitBook(coord, 2)
	metaFree := func() int {
		m, ok := coord.Mesh().Member(sup.ID())
		if !ok {
			t.Fatal("the coordinator does not know the supplier")
		}
		return m.FreeCards
	}
	eventually(t, 10*time.Second, "the membership shows both cards free", func() bool { return metaFree() == 2 })
	// Turning coordination off changes the summary: the metadata goes out
	// at once, and free-count changes are held for `every` after it.
	sm.neverCoordinate(sup)
	sent := time.Now()

	spec := market.JobSpec{AllowSimulated: true, ID: "one", Cards: 1, MaxPriceCNY: 30, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, "one", 10*time.Second, market.JobRunning)
	eventually(t, 2*time.Second, "the book shows one card free", func() bool {
		_, free := coord.BookCards()
		return free == 1
	})
	// Memberlist spreads news within a few hundred ms here: a second
	// without it is the hold, not the gossip's delay.
	for hold := time.Now().Add(time.Second); time.Now().Before(hold) && time.Now().Before(sent.Add(every-time.Second)); {
		if metaFree() != 2 {
			t.Fatalf("the membership showed the new free count %v after the summary went out, within MetaFreeEvery (%v)", time.Since(sent).Round(time.Millisecond), every)
		}
		time.Sleep(50 * time.Millisecond) // polling the membership view
	}
	eventually(t, every+5*time.Second, "the membership shows one card free", func() bool { return metaFree() == 1 })
	if held := time.Since(sent); held < every-time.Second {
		t.Errorf("the free count reached the membership %v after the last update, want about %v", held.Round(time.Millisecond), every)
	}
}
