package gossip

import (
	"errors"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/libp2p/go-libp2p/core/peer"
	"pgregory.net/rapid"
)

func TestBookNewestSeqWins(t *testing.T) {
	b := NewBook()
	p := newPeerID(t)
	now := time.Now()
	if err := b.Apply(testAd(p, 5, now), now); err != nil {
		t.Fatal(err)
	}
	older := testAd(p, 4, now)
	older.Region = "old"
	if err := b.Apply(older, now); !errors.Is(err, ErrStale) {
		t.Fatalf("older ad: err %v, want ErrStale", err)
	}
	if err := b.Apply(testAd(p, 5, now), now); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("same seq: err %v, want ErrDuplicate", err)
	}
	newer := testAd(p, 6, now)
	newer.Cards = newer.Cards[:1]
	if err := b.Apply(newer, now); err != nil {
		t.Fatal(err)
	}
	ad, ok := b.Get(p, now)
	if !ok || ad.Seq != 6 || ad.TotalCards() != 8 || ad.Region != "cn-east" {
		t.Fatalf("Get = %+v, %v", ad, ok)
	}
	if b.FreeCount(p, "rtx4090-48g", now) != 0 || b.FreeCount(p, "h100-sxm-80g", now) != 6 {
		t.Fatal("per-model free counts follow the newest ad")
	}
}

func TestBookExpiry(t *testing.T) {
	b := NewBook()
	p := newPeerID(t)
	now := time.Now()
	ad := testAd(p, 1, now) // expires now+30s
	if err := b.Apply(ad, now); err != nil {
		t.Fatal(err)
	}
	later := ad.ExpiresAt
	if b.Len(later.Add(-time.Millisecond)) != 1 || b.Len(later) != 0 {
		t.Fatal("an ad is void from its expiry on")
	}
	if _, ok := b.Get(p, later); ok {
		t.Fatal("Get returned an expired ad")
	}
	if offers, _ := b.Query(Query{}, later); len(offers) != 0 {
		t.Fatalf("Query returned expired offers %+v", offers)
	}
	if s := b.Snapshot(later); len(s) != 0 {
		t.Fatalf("Snapshot lists an expired peer: %+v", s)
	}
	if err := b.Apply(testAd(newPeerID(t), 1, now), later); !errors.Is(err, ErrExpired) {
		t.Fatalf("applying an expired ad: %v", err)
	}
	// An expired entry does not defend its seq: a node whose clock moved
	// back after a restart is heard again once its old ad has expired.
	if err := b.Apply(testAd(p, 1, later), later); err != nil {
		t.Fatalf("lower seq after expiry: %v", err)
	}
}

func TestBookForget(t *testing.T) {
	b := NewBook()
	p, q := newPeerID(t), newPeerID(t)
	now := time.Now()
	for _, id := range []peer.ID{p, q} {
		if err := b.Apply(testAd(id, 3, now), now); err != nil {
			t.Fatal(err)
		}
	}
	b.Forget(p)
	if _, ok := b.Get(p, now); ok || b.Len(now) != 1 || b.FreeCount(p, "h100-sxm-80g", now) != 0 {
		t.Fatal("a forgotten peer's cards leave the Book at once")
	}
	offers, _ := b.Query(Query{}, now)
	for _, o := range offers {
		if o.Peer == p {
			t.Fatal("Query offers a forgotten peer's cards")
		}
	}
	// A late copy of its last ad, or an older one, cannot bring it back...
	if err := b.Apply(testAd(p, 3, now), now); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("late copy: %v", err)
	}
	if err := b.Apply(testAd(p, 2, now), now); !errors.Is(err, ErrStale) {
		t.Fatalf("older ad: %v", err)
	}
	// ...until that ad would have expired; a newer ad brings it back at once.
	if err := b.CheckSeq(p, 3, now.Add(31*time.Second)); err != nil {
		t.Fatalf("after the forgotten ad's expiry: %v", err)
	}
	if err := b.Apply(testAd(p, 4, now), now); err != nil {
		t.Fatalf("newer ad after Forget: %v", err)
	}
	if b.Len(now) != 2 {
		t.Fatal("the peer is back")
	}
	b.Forget(newPeerID(t)) // unknown: no effect
	if b.Len(now) != 2 {
		t.Fatal("forgetting an unknown peer changed the Book")
	}
}

// A hidden peer (membership holds it dead) is out of every answer at once,
// while its ad stays: late copies are still refused, a newer ad is kept
// hidden too, and Show brings its cards back without a new ad.
func TestBookHide(t *testing.T) {
	b := NewBook()
	p, q := newPeerID(t), newPeerID(t)
	now := time.Now()
	for _, id := range []peer.ID{p, q} {
		if err := b.Apply(testAd(id, 3, now), now); err != nil {
			t.Fatal(err)
		}
	}
	visible := func(id peer.ID) []string {
		var where []string
		if _, ok := b.Get(id, now); ok {
			where = append(where, "Get")
		}
		if b.FreeCount(id, "h100-sxm-80g", now) != 0 {
			where = append(where, "FreeCount")
		}
		for _, s := range b.Snapshot(now) {
			if s.Peer == id {
				where = append(where, "Snapshot")
			}
		}
		offers, _ := b.Query(Query{}, now)
		for _, o := range offers {
			if o.Peer == id {
				where = append(where, "Query")
				break
			}
		}
		return where
	}
	b.Hide(p)
	if where := visible(p); len(where) != 0 || b.Len(now) != 1 || len(b.signedAds(now, 10)) != 0 {
		t.Fatalf("a hidden peer's cards still answer in %v (Len %d)", where, b.Len(now))
	}
	if where := visible(q); len(where) != 4 {
		t.Fatalf("the other peer answers only in %v", where)
	}
	// The ad is kept: a late copy or an older ad is refused as before.
	if err := b.Apply(testAd(p, 3, now), now); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("late copy of a hidden ad: %v", err)
	}
	if err := b.CheckSeq(p, 2, now); !errors.Is(err, ErrStale) {
		t.Fatalf("older ad than the hidden one: %v", err)
	}
	// A newer ad (published before the peer died, delivered late) stays
	// hidden.
	if err := b.Apply(testAd(p, 4, now), now); err != nil {
		t.Fatal(err)
	}
	if where := visible(p); len(where) != 0 {
		t.Fatalf("a newer ad of a hidden peer answers in %v", where)
	}
	// Back alive (a healed partition): its cards answer again at once.
	b.Show(p)
	if where := visible(p); len(where) != 4 || b.Len(now) != 2 {
		t.Fatalf("after Show the peer answers only in %v (Len %d)", where, b.Len(now))
	}
	if ad, _ := b.Get(p, now); ad.Seq != 4 {
		t.Fatalf("after Show: seq %d, want the newest kept ad, 4", ad.Seq)
	}
	// A hidden ad still expires; what the peer sends after that is new.
	b.Hide(p)
	later := now.Add(31 * time.Second)
	if err := b.Apply(testAd(p, 5, later), later); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get(p, later); !ok {
		t.Fatal("an ad after the hidden one expired is still hidden")
	}
	b.Hide(newPeerID(t)) // unknown: no effect
	b.Show(newPeerID(t))
	if b.Len(later) != 1 {
		t.Fatalf("Len %d after hiding an unknown peer", b.Len(later))
	}
}

func TestBookPrune(t *testing.T) {
	b := NewBook()
	now := time.Now()
	p, q := newPeerID(t), newPeerID(t)
	b.Apply(testAd(p, 1, now), now)
	b.Apply(testAd(q, 1, now), now)
	b.Forget(q)
	b.Prune(now.Add(time.Hour))
	b.mu.RLock()
	n, m := len(b.peers), len(b.forgotten)
	b.mu.RUnlock()
	if n != 0 || m != 0 {
		t.Fatalf("after Prune: %d entries, %d tombstones", n, m)
	}
	// Apply sweeps by itself once a minute.
	b = NewBook()
	b.Apply(testAd(p, 2, now), now)
	b.Apply(testAd(q, 2, now.Add(2*time.Minute)), now.Add(2*time.Minute))
	if _, ok := b.peers[p]; ok {
		t.Fatal("Apply did not sweep the expired entry")
	}
}

func offerAd(p peer.ID, now time.Time, groups ...CardGroup) Ad {
	ad := testAd(p, 1, now)
	ad.Cards = groups
	sortGroups(ad.Cards)
	return ad
}

func TestBookQuery(t *testing.T) {
	b := NewBook()
	now := time.Now()
	a, c := newPeerID(t), newPeerID(t)
	h100 := CardGroup{Model: "h100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81559, ComputeUnits: 3.17, Free: 8, PriceCNY: 17.5}
	h100pcie := CardGroup{Model: "h100-pcie-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81559, ComputeUnits: 2.42, Free: 2, Busy: 2, PriceCNY: 14}
	r4090 := CardGroup{Model: "rtx4090-24g", Vendor: device.VendorNVIDIA, MemoryMiB: 24564, ComputeUnits: 0.53, Free: 1, PriceCNY: 2}
	busy := CardGroup{Model: "a100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81920, ComputeUnits: 1, Busy: 4, PriceCNY: 11.4}
	b.Apply(offerAd(a, now, h100, r4090), now)
	b.Apply(offerAd(c, now, h100pcie, busy), now)

	models := func(os []Offer) string {
		var s []string
		for _, o := range os {
			s = append(s, o.Model)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		q    Query
		want string
	}{
		{Query{}, "rtx4090-24g,h100-pcie-80g,h100-sxm-80g"}, // cheapest first; no free A100
		{Query{Model: "*"}, "rtx4090-24g,h100-pcie-80g,h100-sxm-80g"},
		{Query{Model: "h100-*"}, "h100-pcie-80g,h100-sxm-80g"},
		{Query{Model: "h100-sxm-80g"}, "h100-sxm-80g"},
		{Query{Model: "h100"}, ""}, // exact, not a prefix
		{Query{Model: "a100-sxm-80g"}, ""},
		{Query{MinMemoryMiB: 40 << 10}, "h100-pcie-80g,h100-sxm-80g"},
		{Query{MinComputeUnits: 3}, "h100-sxm-80g"},
		{Query{MinFree: 3}, "h100-sxm-80g"},
		{Query{MinFree: 9}, ""},
		{Query{MaxPriceCNY: 14}, "rtx4090-24g,h100-pcie-80g"},
		{Query{Model: "h100-*", MaxPriceCNY: 10}, ""},
	} {
		got, err := b.Query(tc.q, now)
		if err != nil {
			t.Fatalf("%+v: %v", tc.q, err)
		}
		if models(got) != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.q, models(got), tc.want)
		}
	}
	got, _ := b.Query(Query{Model: "h100-sxm-80g"}, now)
	want := Offer{Peer: a, Region: "cn-east", Model: "h100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: 81559,
		ComputeUnits: 3.17, Free: 8, PriceCNY: 17.5, Availability: testAd(a, 1, now).Availability, Seq: 1, ExpiresAt: testAd(a, 1, now).ExpiresAt}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("offer %+v\nwant %+v", got, want)
	}
	for _, bad := range []Query{{Model: "*h100"}, {Model: "h1*0"}, {MinFree: -1}, {MaxPriceCNY: math.NaN()}, {MinComputeUnits: -1}, {MaxPriceCNY: math.Inf(1)}} {
		if _, err := b.Query(bad, now); err == nil {
			t.Errorf("query %+v accepted", bad)
		}
	}
}

func TestBookSnapshot(t *testing.T) {
	b := NewBook()
	now := time.Now()
	p := newPeerID(t)
	b.Apply(testAd(p, 9, now), now.Add(time.Second))
	s := b.Snapshot(now)
	if len(s) != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	got := s[0]
	if got.Peer != p || got.Cards != 10 || got.FreeCards != 7 || got.Seq != 9 || got.Region != "cn-east" ||
		!reflect.DeepEqual(got.Models, []string{"h100-sxm-80g", "rtx4090-48g"}) || !got.LastHeard.Equal(now.Add(time.Second)) {
		t.Fatalf("summary %+v", got)
	}
}

// Readers are never blocked out and never see a torn ad while writers apply.
func TestBookConcurrent(t *testing.T) {
	b := NewBook()
	now := time.Now()
	peers := make([]peer.ID, 8)
	for i := range peers {
		peers[i] = newPeerID(t)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for seq := uint64(1); seq <= 200; seq++ {
				p := peers[(int(seq)+w)%len(peers)]
				b.Apply(testAd(p, seq, now), now)
				switch seq % 50 {
				case 0:
					b.Forget(p)
				case 10:
					b.Hide(p)
				case 20:
					b.Show(p)
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 200 {
				offers, _ := b.Query(Query{Model: "h100-*"}, now)
				for _, o := range offers {
					if o.Free != 6 {
						t.Errorf("torn offer %+v", o)
						return
					}
				}
				for _, s := range b.Snapshot(now) {
					if s.Cards != 10 {
						t.Errorf("torn summary %+v", s)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// naiveBook is the reference the Book is checked against: the rules in
// their plainest form, and queries that scan and sort the slow, obvious way.
type naiveBook struct {
	last   map[peer.ID]Ad // the last ad taken from each peer
	tomb   map[peer.ID]Ad // the ad a forgotten peer had
	hidden map[peer.ID]bool
}

// current is the ad that decides p's sequence numbers.
func (n *naiveBook) current(p peer.ID, now time.Time) (Ad, bool) {
	ad, ok := n.last[p]
	return ad, ok && now.Before(ad.ExpiresAt)
}

// visible is the ad that answers queries: current and not hidden.
func (n *naiveBook) visible(p peer.ID, now time.Time) (Ad, bool) {
	ad, ok := n.current(p, now)
	return ad, ok && !n.hidden[p]
}

// takes says whether the Book must take ad at now.
func (n *naiveBook) takes(ad Ad, now time.Time) bool {
	if !now.Before(ad.ExpiresAt) {
		return false
	}
	if cur, ok := n.current(ad.Peer, now); ok {
		return ad.Seq > cur.Seq
	}
	if t, ok := n.tomb[ad.Peer]; ok && now.Before(t.ExpiresAt) {
		return ad.Seq > t.Seq
	}
	return true
}

func (n *naiveBook) query(q Query, now time.Time, peers []peer.ID) []Offer {
	var out []Offer
	for _, p := range peers {
		ad, ok := n.visible(p, now)
		if !ok {
			continue
		}
		for _, g := range ad.Cards {
			model := q.Model == "" || q.Model == "*" || g.Model == q.Model ||
				(strings.HasSuffix(q.Model, "*") && strings.HasPrefix(g.Model, strings.TrimSuffix(q.Model, "*")))
			if model && g.Free >= max(q.MinFree, 1) && g.MemoryMiB >= q.MinMemoryMiB &&
				g.ComputeUnits >= q.MinComputeUnits && (q.MaxPriceCNY == 0 || g.PriceCNY <= q.MaxPriceCNY) {
				out = append(out, Offer{Peer: p, Region: ad.Region, Model: g.Model, Vendor: g.Vendor, MemoryMiB: g.MemoryMiB,
					ComputeUnits: g.ComputeUnits, Free: g.Free, PriceCNY: g.PriceCNY, Availability: ad.Availability,
					Seq: ad.Seq, ExpiresAt: ad.ExpiresAt})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PriceCNY != out[j].PriceCNY {
			return out[i].PriceCNY < out[j].PriceCNY
		}
		if out[i].Peer != out[j].Peer {
			return out[i].Peer < out[j].Peer
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// Under any sequence of ads (in any order, late, expired), forgets, hides,
// shows and clock moves, the Book answers every query as the naive reference
// does.
func TestBookMatchesNaiveReference(t *testing.T) {
	peers := []peer.ID{newPeerID(t), newPeerID(t), newPeerID(t)}
	models := []string{"h100-sxm-80g", "h100-pcie-80g", "rtx4090-24g", "l40s-48g"}
	start := time.Now().Truncate(time.Millisecond)
	rapid.Check(t, func(rt *rapid.T) {
		b := NewBook()
		ref := &naiveBook{last: map[peer.ID]Ad{}, tomb: map[peer.ID]Ad{}, hidden: map[peer.ID]bool{}}
		now := start
		genAd := func() Ad {
			p := rapid.SampledFrom(peers).Draw(rt, "peer")
			issued := now.Add(-time.Duration(rapid.IntRange(0, 40).Draw(rt, "age_s")) * time.Second)
			ad := Ad{Peer: p, Seq: uint64(rapid.IntRange(1, 12).Draw(rt, "seq")), IssuedAt: issued,
				ExpiresAt: issued.Add(time.Duration(rapid.IntRange(1, 60).Draw(rt, "ttl_s")) * time.Second), Region: "r"}
			for _, m := range models {
				if !rapid.Bool().Draw(rt, "has_"+m) {
					continue
				}
				ad.Cards = append(ad.Cards, CardGroup{Model: m, Vendor: "nvidia",
					MemoryMiB:    uint64(rapid.SampledFrom([]int{24 << 10, 48 << 10, 80 << 10}).Draw(rt, "mem")),
					ComputeUnits: float64(rapid.IntRange(0, 4).Draw(rt, "cu")),
					Free:         rapid.IntRange(0, 8).Draw(rt, "free"), Busy: rapid.IntRange(0, 2).Draw(rt, "busy") + 1,
					PriceCNY: float64(rapid.IntRange(1, 20).Draw(rt, "price"))})
			}
			sortGroups(ad.Cards)
			return ad
		}
		rt.Repeat(map[string]func(*rapid.T){
			"apply": func(rt *rapid.T) {
				ad := genAd()
				want := ref.takes(ad, now)
				err := b.Apply(ad, now)
				if want != (err == nil) {
					rt.Fatalf("Apply seq %d of %s at %s: err %v, reference takes it: %v", ad.Seq, ad.Peer, now, err, want)
				}
				if err != nil && !now.Before(ad.ExpiresAt) && !errors.Is(err, ErrExpired) {
					rt.Fatalf("expired ad refused with %v", err)
				}
				if want {
					if _, ok := ref.current(ad.Peer, now); !ok {
						delete(ref.hidden, ad.Peer) // hiding ends with the hidden ad
					}
					ref.last[ad.Peer] = ad
					delete(ref.tomb, ad.Peer)
				}
			},
			"forget": func(rt *rapid.T) {
				p := rapid.SampledFrom(peers).Draw(rt, "peer")
				if ad, ok := ref.last[p]; ok {
					ref.tomb[p] = ad
					delete(ref.last, p)
				}
				delete(ref.hidden, p)
				b.Forget(p)
			},
			"hide": func(rt *rapid.T) {
				p := rapid.SampledFrom(peers).Draw(rt, "peer")
				ref.hidden[p] = true
				b.Hide(p)
			},
			"show": func(rt *rapid.T) {
				p := rapid.SampledFrom(peers).Draw(rt, "peer")
				delete(ref.hidden, p)
				b.Show(p)
			},
			"tick": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 20).Draw(rt, "dt_s")) * time.Second)
			},
			"": func(rt *rapid.T) { // check after every step
				q := Query{
					Model:           rapid.SampledFrom([]string{"", "*", "h100-*", "rtx4090-24g", "l40s-48g", "x-*"}).Draw(rt, "model"),
					MinMemoryMiB:    uint64(rapid.SampledFrom([]int{0, 32 << 10, 80 << 10}).Draw(rt, "min_mem")),
					MinComputeUnits: float64(rapid.IntRange(0, 3).Draw(rt, "min_cu")),
					MinFree:         rapid.IntRange(0, 5).Draw(rt, "min_free"),
					MaxPriceCNY:     float64(rapid.IntRange(0, 20).Draw(rt, "max_price")),
				}
				got, err := b.Query(q, now)
				if err != nil {
					rt.Fatal(err)
				}
				if want := ref.query(q, now, peers); !reflect.DeepEqual(got, want) {
					rt.Fatalf("query %+v:\n got %+v\nwant %+v", q, got, want)
				}
				for _, p := range peers {
					ad, ok := ref.visible(p, now)
					g, gok := b.Get(p, now)
					if ok != gok || (ok && !reflect.DeepEqual(ad, g)) {
						rt.Fatalf("Get(%s): got %+v %v, want %+v %v", p, g, gok, ad, ok)
					}
				}
				if b.Len(now) != len(b.Snapshot(now)) {
					rt.Fatal("Len and Snapshot disagree")
				}
			},
		})
	})
}

func TestBookHasMatchesGet(t *testing.T) {
	b := NewBook()
	now := time.Unix(1_700_000_000, 0)
	p := newPeerID(t)
	if b.Has(p, now) {
		t.Fatal("an empty book has p")
	}
	ad := testAd(p, 1, now)
	if err := b.Apply(ad, now); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{now, ad.ExpiresAt.Add(time.Second)} {
		_, got := b.Get(p, at)
		if b.Has(p, at) != got {
			t.Errorf("at %v: Has %v, Get found %v", at, b.Has(p, at), got)
		}
	}
	b.Hide(p)
	if b.Has(p, now) {
		t.Error("a hidden peer is still had")
	}
}
