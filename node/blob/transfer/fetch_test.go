package transfer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// mib is 1 MiB.
const mib = 1 << 20

// bigTree is a tree of some 10 chunks.
func bigTree(t testing.TB, seed uint64) string { return tree(t, seed, 5*mib, 4*mib, 100, 0) }

// holders sets up two holders of the same tree and a fetcher whose
// requests are of one chunk, two at a time to each holder (cfg may change
// that).
func holders(t *testing.T, cfg func(*Config)) (tn *testNet, a, b, c *testNode, src string, m blob.Digest) {
	tn = newTestNet(t)
	small := func(c *Config) {
		c.Batch, c.HolderStreams = 1, 2
		if cfg != nil {
			cfg(c)
		}
	}
	a, b, c = tn.addNode(blob.NoLimit, small), tn.addNode(blob.NoLimit, small), tn.addNode(blob.NoLimit, small)
	src = bigTree(t, 1)
	m = putTree(t, b, src).Manifest
	if got := putTree(t, c, src).Manifest; got != m {
		t.Fatalf("two stores named one tree %s and %s", m, got)
	}
	return tn, a, b, c, src, m
}

// gate lets a test hold one holder's requests for chunks until another
// holder had one. A holder's first request is for the manifest.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

// open opens the gate at a holder's first request for chunks.
func (g *gate) open(_ context.Context, n int) {
	if n > 1 {
		g.once.Do(func() { close(g.ch) })
	}
}

// wait holds a holder's requests for chunks until the gate opens.
func (g *gate) wait(ctx context.Context, n int) {
	if n > 1 {
		select {
		case <-g.ch:
		case <-ctx.Done():
		}
	}
}

// testCtx bounds a test's calls.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestFetchSplitsTheWorkAmongHolders(t *testing.T) {
	_, a, b, c, src, m := holders(t, nil)
	// b answers nothing until c has a request: so both have requests
	// in flight at once, whatever the goroutines' order.
	cSeen := newGate()
	b.auth.set(func(x *testAuth) { x.onRead = cSeen.wait })
	c.auth.set(func(x *testAuth) { x.onRead = cSeen.open })

	st, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id(), c.id()}, lease(t, a, "fetch"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Present != 0 || st.Fetched != st.Chunks || st.Chunks < 8 {
		t.Fatalf("stats %+v: want every one of some 10 chunks fetched", st)
	}
	if st.Holders[b.id()].Chunks == 0 || st.Holders[c.id()].Chunks == 0 {
		t.Fatalf("b served %d chunks, c %d: want both some", st.Holders[b.id()].Chunks, st.Holders[c.id()].Chunks)
	}
	sameFiles(t, a, m, src)

	again, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id(), c.id()}, "fetch")
	if err != nil || again.Fetched != 0 || again.Present != st.Chunks || again.Bytes != 0 {
		t.Fatalf("a second fetch: %+v, %v; want nothing moved", again, err)
	}
}

func TestFetchResumesAfterACut(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addNode(blob.NoLimit, func(c *Config) { c.HolderStreams, c.Batch, c.Pipeline = 1, 2, 1 })
	b := tn.addNode(blob.NoLimit, nil)
	src := bigTree(t, 2)
	m := putTree(t, b, src).Manifest
	// The link goes down as b takes its fourth request (the manifest, then
	// three batches of chunks: one request in flight at a time, so the
	// first two batches arrived).
	b.auth.set(func(x *testAuth) {
		x.onRead = func(_ context.Context, n int) {
			if n == 4 {
				tn.cut(a.id(), b.id())
			}
		}
	})
	id := lease(t, a, "fetch")
	first, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, id)
	var ie *IncompleteError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIncomplete) || ie.Holders[b.id()] == nil {
		t.Fatalf("Fetch over a cut link = %v, want an *IncompleteError naming b", err)
	}
	if first.Fetched != 4 || ie.Chunks != first.Chunks-4 {
		t.Fatalf("before the cut: %+v (%d left); want 4 chunks in", first, ie.Chunks)
	}

	// What came in is leased (through the manifest): a collection keeps it.
	if _, err := a.store.GC(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	b.auth.set(func(x *testAuth) { x.onRead = nil })
	tn.relink(a.id(), b.id())
	second, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, id)
	if err != nil {
		t.Fatal(err)
	}
	if second.Present != 4 || second.Fetched != first.Chunks-4 {
		t.Fatalf("after the cut: %+v; want the 4 chunks kept and the rest fetched", second)
	}
	sameFiles(t, a, m, src)
}

// A fetch leaves what it brings to the kernel's write-back (it can be
// fetched again), so a crash may leave a chunk torn under its name. After
// the restart the store does not take its word for it: the restore finds
// the torn chunk and removes it, and the next fetch brings that one alone.
func TestAChunkTornByACrashAfterAFetchIsFetchedAgain(t *testing.T) {
	tn := newTestNet(t)
	a, b := tn.addNode(blob.NoLimit, nil), tn.addNode(blob.NoLimit, nil)
	src := bigTree(t, 5)
	m := putTree(t, b, src).Manifest
	id := lease(t, a, "fetch")
	if _, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, id); err != nil {
		t.Fatal(err)
	}
	man, err := a.store.Manifest(m)
	if err != nil {
		t.Fatal(err)
	}
	torn := man.Chunks()[1].Digest

	// The crash: the node stops, and the chunk's file keeps only half its
	// bytes (where the store keeps it: chunks/ab/abcdef…).
	dir := a.store.Dir()
	a.svc.Close()
	if err := a.store.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "chunks", torn.Hex()[:2], torn.Hex())
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, info.Size()/2); err != nil {
		t.Fatal(err)
	}
	st, err := blob.Open(blob.Config{Dir: dir, Limit: blob.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a.store = st
	if a.svc, err = New(a.h, Config{Protocol: testProto, Store: st, Auth: a.auth, Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.svc.Close() })

	err = st.Restore(testCtx(t), m, filepath.Join(t.TempDir(), "restored"))
	var de *blob.DigestError
	if !errors.As(err, &de) || de.Want != torn {
		t.Fatalf("Restore after the crash = %v, want a *DigestError for the torn chunk %s", err, torn.Short())
	}
	again, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, id)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fetched != 1 || again.Present != again.Chunks-1 {
		t.Fatalf("the fetch after the restore found the torn chunk: %+v; want it alone fetched again", again)
	}
	sameFiles(t, a, m, src)
}

func TestFetchGetsAVanishedHoldersChunksFromTheOthers(t *testing.T) {
	tn, a, b, c, src, m := holders(t, nil)
	cSeen := newGate()
	b.auth.set(func(x *testAuth) {
		x.onRead = func(ctx context.Context, n int) {
			cSeen.wait(ctx, n)
			if n == 3 {
				tn.cut(a.id(), b.id())
			}
		}
	})
	c.auth.set(func(x *testAuth) { x.onRead = cSeen.open })
	st, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id(), c.id()}, lease(t, a, "fetch"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Holders[b.id()].Err == nil || st.Holders[c.id()].Err != nil {
		t.Fatalf("holders %+v: want b dropped, c not", st.Holders)
	}
	if st.Fetched != st.Chunks || st.Holders[c.id()].Chunks <= st.Holders[b.id()].Chunks {
		t.Fatalf("stats %+v: want c to serve what b could not", st)
	}
	sameFiles(t, a, m, src)
}

func TestFetchDetectsACorruptHolderAndFetchesElsewhere(t *testing.T) {
	_, a, b, c, src, m := holders(t, nil)
	// Every chunk file on b's disk gets one byte flipped.
	man, _ := b.store.Manifest(m)
	for _, ref := range man.Chunks() {
		p := filepath.Join(b.store.Dir(), "chunks", ref.Digest.Hex()[:2], ref.Digest.Hex())
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x40
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// c answers only once b had a request, so b surely serves some.
	bSeen := newGate()
	b.auth.set(func(x *testAuth) { x.onRead = bSeen.open })
	c.auth.set(func(x *testAuth) { x.onRead = bSeen.wait })

	st, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id(), c.id()}, lease(t, a, "fetch"))
	if err != nil {
		t.Fatal(err)
	}
	hb := st.Holders[b.id()]
	var ce *CorruptError
	if st.Corrupt == 0 || hb.Corrupt != st.Corrupt || hb.Chunks != 0 || !errors.As(hb.Err, &ce) || ce.Peer != b.id() {
		t.Fatalf("stats %+v, b %+v: want b's corrupt chunks counted and b dropped for them", st, hb)
	}
	if !errors.Is(hb.Err, blob.ErrDigestMismatch) {
		t.Fatalf("b dropped for %v", hb.Err)
	}
	if st.Holders[c.id()].Chunks != st.Chunks {
		t.Fatalf("c served %d of %d chunks", st.Holders[c.id()].Chunks, st.Chunks)
	}
	sameFiles(t, a, m, src)
}

func TestFetchRefusedByEveryHolder(t *testing.T) {
	_, a, b, c, _, m := holders(t, nil)
	b.auth.set(func(x *testAuth) { x.denyRead = errTest })
	c.auth.set(func(x *testAuth) { x.denyRead = errTest })
	_, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id(), c.id()}, lease(t, a, "fetch"))
	var ie *IncompleteError
	if !errors.As(err, &ie) || !ie.NoManifest || !errors.Is(ie.Holders[b.id()], ErrDenied) || !strings.Contains(err.Error(), errTest.Error()) {
		t.Fatalf("Fetch = %v, want an *IncompleteError with the holders' refusals", err)
	}
	if a.store.Has(blob.KindManifest, m) {
		t.Fatal("a refused manifest was stored")
	}
}

func TestFetchNeedsItsLeaseAndAHolder(t *testing.T) {
	_, a, b, _, _, m := holders(t, nil)
	if _, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, "none"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Fetch without a lease = %v, want blob.ErrNotFound", err)
	}
	_, err := a.svc.Fetch(testCtx(t), m, []peer.ID{a.id()}, lease(t, a, "f"))
	var ie *IncompleteError
	if !errors.As(err, &ie) || !ie.NoManifest || !strings.Contains(err.Error(), "no holder to ask") {
		t.Fatalf("Fetch from itself alone = %v, want an *IncompleteError", err)
	}
}

func TestFetchIntoAFullStore(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addNode(4*mib, nil)
	b := tn.addNode(blob.NoLimit, nil)
	m := putTree(t, b, bigTree(t, 3)).Manifest
	_, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, lease(t, a, "fetch"))
	var qe *blob.QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("Fetch into a full store = %v, want a *blob.QuotaError", err)
	}
	if u := a.store.Usage(); u.Chunks != 0 {
		t.Fatalf("a fetch that cannot fit stored %d chunks (%d bytes) first", u.Chunks, u.Bytes)
	}
}

func TestCollectionsDuringAFetchKeepWhatItBrought(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addNode(blob.NoLimit, func(c *Config) { c.Batch, c.HolderStreams = 1, 2 })
	b := tn.addNode(blob.NoLimit, nil)
	src := bigTree(t, 4)
	m := putTree(t, b, src).Manifest
	var collections atomic.Int32
	b.auth.set(func(x *testAuth) {
		x.onRead = func(ctx context.Context, _ int) {
			if _, err := a.store.GC(ctx); err != nil {
				t.Error(err)
			}
			collections.Add(1)
		}
	})
	st, err := a.svc.Fetch(testCtx(t), m, []peer.ID{b.id()}, lease(t, a, "fetch"))
	if err != nil {
		t.Fatal(err)
	}
	if n := int(collections.Load()); n < st.Chunks {
		t.Fatalf("%d collections during a fetch of %d chunks", n, st.Chunks)
	}
	sameFiles(t, a, m, src)
}
