package layers_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/blob/transfer"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
	"github.com/gpumesh/gpumesh/node/layers"
)

// lanNode is one node of a test LAN: a content store, its transfers, an
// image cache and the layer service.
type lanNode struct {
	h      host.Host
	store  *blob.Store
	xfer   *transfer.Service
	cache  *image.Cache
	layers *layers.Service
}

// layerAuth lets any peer read a recorded layer, as the node does.
type layerAuth struct{ c func() *image.Cache }

func (a layerAuth) AllowRead(_ context.Context, _ peer.ID, m blob.Digest) error {
	if c := a.c(); c != nil && c.IsLayerBlob(m) {
		return nil
	}
	return blob.ErrNotFound
}

func (layerAuth) AllowPush(context.Context, peer.ID, blob.Digest) (string, error) {
	return "", blob.ErrNotFound
}

// newLAN makes n nodes on an in-memory network, every one linked.
func newLAN(t testing.TB, n int) []*lanNode {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	var nodes []*lanNode
	for range n {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &lanNode{h: h})
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	members := func() []peer.ID {
		var ids []peer.ID
		for _, x := range nodes {
			ids = append(ids, x.h.ID())
		}
		return ids
	}
	for _, x := range nodes {
		dir := t.TempDir()
		st, err := blob.Open(blob.Config{Dir: filepath.Join(dir, "blobs"), Limit: blob.NoLimit})
		if err != nil {
			t.Fatal(err)
		}
		x.store = st
		var mu sync.Mutex
		get := func() *image.Cache { mu.Lock(); defer mu.Unlock(); return x.cache }
		x.xfer, err = transfer.New(x.h, transfer.Config{Protocol: "/test/blob/1", Store: st, Auth: layerAuth{get}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		x.layers, err = layers.New(layers.Config{Host: x.h, Protocol: "/test/layers/1", Fetcher: x.xfer, Local: localOf{get}, Members: members,
			Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c, err := image.Open(image.Config{Dir: filepath.Join(dir, "images"), Blobs: st, Peers: x.layers})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		x.cache = c
		mu.Unlock()
		t.Cleanup(func() {
			x.layers.Close()
			x.xfer.Close()
			c.Close()
			st.Close()
			x.h.Close()
		})
	}
	return nodes
}

type localOf struct{ c func() *image.Cache }

func (l localOf) LayerBlob(d v1.Hash) (blob.Digest, bool) {
	if c := l.c(); c != nil {
		return c.LayerBlob(d)
	}
	return blob.Digest{}, false
}

// Three nodes of a LAN start one image at once: the registry serves each
// layer once; the other two nodes fetch it from the one that pulled it
// (or from each other), and every node ends with the same image.
func TestLANPullsEachLayerOnce(t *testing.T) {
	reg := imagetest.New(t)
	img, err := random.Image(1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "team/big:v1", img)
	nodes := newLAN(t, 3)
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	digests := make([]string, len(nodes))
	for i, x := range nodes {
		wg.Go(func() {
			got, err := x.cache.Pull(context.Background(), ref)
			errs[i] = err
			if err == nil {
				digests[i] = got.Digest
			}
		})
	}
	wg.Wait()
	want, _ := img.Digest()
	for i, err := range errs {
		if err != nil || digests[i] != want.String() {
			t.Fatalf("node %d: %s %v", i, digests[i], err)
		}
	}
	layers, _ := img.Layers()
	gets := reg.BlobGets()
	for _, l := range layers {
		d, _ := l.Digest()
		if n := gets[d.String()]; n != 1 {
			t.Errorf("the registry served layer %s %d times, want once", d.Hex[:12], n)
		}
	}
	var fromPeers, fromRegistry int64
	for _, x := range nodes {
		s := x.cache.Stats()
		fromPeers += s.PeerLayers
		fromRegistry += s.RegistryLayers
	}
	if fromRegistry != 3 || fromPeers != 6 {
		t.Errorf("layers from the registry %d, from peers %d; want 3 and 6", fromRegistry, fromPeers)
	}
	// A fourth pull, on a node that has the image, asks no one.
	before := len(reg.BlobGets())
	if _, err := nodes[0].cache.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if len(reg.BlobGets()) != before {
		t.Error("a cached image was fetched again")
	}
}

// A node whose peers are gone pulls from the registry itself.
func TestLayerWithoutPeersComesFromTheRegistry(t *testing.T) {
	reg := imagetest.New(t)
	img, err := random.Image(64<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "team/x:v1", img)
	nodes := newLAN(t, 3)
	nodes[1].layers.Close()
	nodes[2].layers.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := nodes[0].cache.Pull(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if s := nodes[0].cache.Stats(); s.RegistryLayers != 2 {
		t.Errorf("stats %+v", s)
	}
}

// While one node pulls a layer, another that asks for it waits; when the
// puller reports failure, or goes away without a word, a waiter becomes
// the puller.
func TestAWaiterTakesOverAFailedPull(t *testing.T) {
	nodes := newLAN(t, 3)
	d, err := v1.NewHash("sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	// Two askers that are not the tracker; the third node is.
	tr := trackerOf(t, nodes, d)
	var askers []*lanNode
	for _, x := range nodes {
		if x.h.ID() != tr {
			askers = append(askers, x)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, how := range []string{"reports failure", "goes away"} {
		first, second := askers[0], askers[1]
		_, pulled, err := first.layers.Layer(ctx, d, 1, "l")
		if err != nil || pulled == nil {
			t.Fatalf("%s: the first asker is not told to pull: %v", how, err)
		}
		type result struct {
			pulled func(blob.Digest, error)
			err    error
		}
		done := make(chan result, 1)
		go func() {
			_, p, err := second.layers.Layer(ctx, d, 1, "l")
			done <- result{p, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("%s: the second asker did not wait: %v %v", how, r.pulled != nil, r.err)
		case <-time.After(200 * time.Millisecond): // it waits, as it should (nothing to observe but its silence)
		}
		if how == "reports failure" {
			pulled(blob.Digest{}, errors.New("registry unreachable"))
		} else {
			first.h.Close() // the puller's stream breaks
		}
		r := <-done
		if r.err != nil || r.pulled == nil {
			t.Fatalf("%s: the waiter was not made the puller: %v", how, r.err)
		}
		r.pulled(blob.Digest{}, errors.New("done with the test"))
		askers[0], askers[1] = askers[1], askers[0]
	}
}

// trackerOf finds the tracker the nodes agree on for d: the one whose own
// acquire makes it the puller without a stream (it asks itself).
func trackerOf(t *testing.T, nodes []*lanNode, d v1.Hash) peer.ID {
	t.Helper()
	ids := make([]peer.ID, len(nodes))
	for i, x := range nodes {
		ids[i] = x.h.ID()
	}
	return layers.Tracker(d, ids)
}
