package gossip

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip/gossippb"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	pb "google.golang.org/protobuf/proto"
)

// A node that joins a mesh learns every ad its first peer holds at once,
// through book sync: here the peer's Book holds ads from authors that never
// published on gossip while the newcomer was there, so sync is the only way.
func TestBookSyncOnJoin(t *testing.T) {
	tn := newTestNet(t)
	old := startGossip(t, tn.addHost(), Config{})
	topic := old.Topics().Capacity
	now := time.Now()
	const authors = 5
	for i := range authors {
		key, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(key)
		ad := testAd(id, uint64(i+1), now)
		signed, err := pb.Marshal(pubsubMessage(t, topic, id, 1, mustEncode(t, ad), key))
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Book().applySigned(ad, signed, now); err != nil {
			t.Fatal(err)
		}
	}

	late := startGossip(t, tn.addHost(), Config{})
	tn.connect(tn.hosts[1], tn.hosts[0])
	// The sync counts itself complete after it applied the last ad.
	eventually(t, 10*time.Second, "the late node's Book holds every ad, the sync complete", func() bool {
		return late.Book().Len(time.Now()) == authors && late.Stats().Sync.Syncs == 1
	})
	if !reflect.DeepEqual(late.Book().Snapshot(now)[0].Models, old.Book().Snapshot(now)[0].Models) {
		t.Fatal("synced ads differ")
	}
	for _, s := range old.Book().Snapshot(now) {
		want, _ := old.Book().Get(s.Peer, now)
		got, _ := late.Book().Get(s.Peer, now)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("synced ad %+v\nwant %+v", got, want)
		}
	}
	if s := late.Stats(); s.Sync.Syncs != 1 || s.Sync.Applied != authors || len(s.Sync.Rejected) != 0 || s.Topics[topic].Accepted != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// syncServer is a host that answers book syncs with whatever it is told to.
func syncServer(t *testing.T, tn *testNet, proto protocol.ID, msgs func() [][]byte) peer.ID {
	h := tn.addHost()
	h.SetStreamHandler(proto, func(s network.Stream) {
		w := msgio.NewVarintWriter(s)
		for _, b := range msgs() {
			if w.WriteMsg(b) != nil {
				s.Reset()
				return
			}
		}
		s.Close()
	})
	return h.ID()
}

// A sync server can withhold ads but cannot slip in a forged, altered or
// malformed one: the first such message ends the sync with its reason and
// changes nothing; stale ads are skipped.
func TestSyncRefusesWhatGossipWould(t *testing.T) {
	tn := newTestNet(t)
	g := startGossip(t, tn.addHost(), Config{SyncPeers: -1})
	topic := g.Topics().Capacity
	authorHost := tn.addHost()
	author, key := authorHost.ID(), authorHost.Peerstore().PrivKey(authorHost.ID())
	otherKey, _, _ := crypto.GenerateEd25519Key(nil)
	now := time.Now()
	msg := func(m *pubsubpb.Message) []byte {
		b, err := pb.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := msg(pubsubMessage(t, topic, author, 1, mustEncode(t, testAd(author, 5, now)), key))
	stale := msg(pubsubMessage(t, topic, author, 2, mustEncode(t, testAd(author, 4, now)), key))
	altered := pubsubMessage(t, topic, author, 3, mustEncode(t, testAd(author, 6, now)), key)
	altered.Data = mustEncode(t, testAd(author, 7, now))

	for _, c := range []struct {
		name    string
		msgs    [][]byte
		reason  Reason // of the refusal; ReasonNone: the sync succeeds
		applied int
	}{
		{"good, then stale", [][]byte{good, stale}, ReasonNone, 1},
		{"garbage", [][]byte{[]byte("\xff\xff garbage")}, ReasonMalformed, 0},
		{"unsigned", [][]byte{msg(pubsubMessage(t, topic, author, 4, mustEncode(t, testAd(author, 8, now)), nil))}, ReasonUnsigned, 0},
		{"signed by another key", [][]byte{msg(pubsubMessage(t, topic, author, 5, mustEncode(t, testAd(author, 9, now)), otherKey))}, ReasonBadSignature, 0},
		{"altered after signing", [][]byte{msg(altered)}, ReasonBadSignature, 0},
		{"another topic", [][]byte{msg(pubsubMessage(t, "gpumesh/other/v1/capacity", author, 6, mustEncode(t, testAd(author, 10, now)), key))}, ReasonProtocol, 0},
		{"absurd ad", [][]byte{msg(pubsubMessage(t, topic, author, 7, env(testAd(author, 11, now), func(e *gossippb.Envelope) {
			capacity(e).Cards[0].Free = 1_000_000
		}), key))}, ReasonBadField, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			server := syncServer(t, tn, g.Topics().BookSync, func() [][]byte { return c.msgs })
			tn.connect(tn.hosts[0], tn.hosts[len(tn.hosts)-1])
			book := g.Book().Snapshot(time.Now())
			sent, applied, err := g.SyncFrom(context.Background(), server)
			if ReasonOf(err) != c.reason || applied != c.applied || sent != len(c.msgs) {
				t.Fatalf("sent %d, applied %d, err %v: want reason %v, %d applied", sent, applied, err, c.reason, c.applied)
			}
			if c.reason != ReasonNone {
				if got := g.Book().Snapshot(time.Now()); !reflect.DeepEqual(got, book) {
					t.Fatalf("Book changed: %+v", got)
				}
				if g.Stats().Sync.Rejected[c.reason.String()] == 0 {
					t.Fatalf("sync stats %+v", g.Stats().Sync)
				}
			}
		})
	}
	if ad, ok := g.Book().Get(author, time.Now()); !ok || ad.Seq != 5 {
		t.Fatalf("the good ad is held: %+v %v", ad, ok)
	}
}

// A node serves one sync per peer per interval, and never more than a few
// at once.
func TestSyncServeLimits(t *testing.T) {
	tn := newTestNet(t)
	server := startGossip(t, tn.addHost(), Config{SyncPeers: -1})
	client := startGossip(t, tn.addHost(), Config{SyncPeers: -1})
	tn.connect(tn.hosts[0], tn.hosts[1])
	if err := server.PublishAd(context.Background(), testAd(tn.hosts[0].ID(), 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the server holds its ad", func() bool { return server.Book().Len(time.Now()) == 1 })
	if sent, _, err := client.SyncFrom(context.Background(), tn.hosts[0].ID()); err != nil || sent != 1 {
		t.Fatalf("first sync: %d, %v", sent, err)
	}
	if _, _, err := client.SyncFrom(context.Background(), tn.hosts[0].ID()); !errors.Is(err, ErrSyncRefused) {
		t.Fatalf("second sync at once: %v, want ErrSyncRefused", err)
	}
}

func TestDecodeSyncedReasons(t *testing.T) {
	seeds := syncSeeds(t)
	want := []Reason{ReasonNone, ReasonNone, ReasonBadSignature, ReasonUnsigned, ReasonBadSignature, ReasonProtocol, ReasonProtocol, ReasonMalformed}
	for i, s := range seeds {
		_, err := decodeSynced(s, fuzzTopic, time.UnixMilli(fuzzNowMs))
		if ReasonOf(err) != want[i] {
			t.Errorf("seed %d: %v, want %v", i, err, want[i])
		}
	}
}

// A member whose ad this node lost (it expired while the member was cut
// off) is asked for its book once it is back: Repair brings the ad, and
// asks no more while the Book has it.
func TestRepairSyncsFromAMemberWhoseAdIsMissing(t *testing.T) {
	tn := newTestNet(t)
	a := startGossip(t, tn.addHost(), Config{SyncPeers: -1})
	b := startGossip(t, tn.addHost(), Config{SyncPeers: -1})
	tn.connect(tn.hosts[0], tn.hosts[1])
	now := time.Now()
	ad := testAd(b.self, 1, now)
	signed, err := pb.Marshal(pubsubMessage(t, b.Topics().Capacity, b.self, 1, mustEncode(t, ad), tn.hosts[1].Peerstore().PrivKey(b.self)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Book().applySigned(ad, signed, now); err != nil {
		t.Fatal(err)
	}
	if a.Book().Has(b.self, now) {
		t.Fatal("a holds b's ad before any sync")
	}
	a.Repair(a.self) // its own: nothing to do
	a.Repair(b.self)
	eventually(t, 10*time.Second, "a's book holds b's ad after the repair", func() bool {
		return a.Book().Has(b.self, time.Now())
	})
	a.Repair(b.self) // has it now: no second sync
	if n := a.Stats().Sync.Syncs; n != 1 {
		t.Errorf("%d syncs, want 1", n)
	}
}
