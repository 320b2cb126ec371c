package transfer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

const testProto = protocol.ID("/gpumesh/test/blob/1")

// testNet is an in-memory libp2p network of nodes, each with a store and
// a Service.
type testNet struct {
	t  testing.TB
	mn mocknet.Mocknet
}

func newTestNet(t testing.TB) *testNet {
	tn := &testNet{t: t, mn: mocknet.New()}
	t.Cleanup(func() { tn.mn.Close() })
	return tn
}

// testNode is one peer.
type testNode struct {
	h     host.Host
	store *blob.Store
	svc   *Service
	auth  *testAuth
}

func (n *testNode) id() peer.ID { return n.h.ID() }

// addNode adds a peer linked to every other; cfg, when set, adjusts its
// Service's configuration.
func (tn *testNet) addNode(limit int64, cfg func(*Config)) *testNode {
	tn.t.Helper()
	h, err := tn.mn.GenPeer()
	if err != nil {
		tn.t.Fatal(err)
	}
	if err := tn.mn.LinkAll(); err != nil {
		tn.t.Fatal(err)
	}
	st, err := blob.Open(blob.Config{Dir: filepath.Join(tn.t.TempDir(), "blobs"), Limit: limit})
	if err != nil {
		tn.t.Fatal(err)
	}
	n := &testNode{h: h, store: st, auth: &testAuth{}}
	c := Config{Protocol: testProto, Store: st, Auth: n.auth, Timeout: 5 * time.Second}
	if cfg != nil {
		cfg(&c)
	}
	n.svc, err = New(h, c)
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(func() {
		n.svc.Close()
		h.Close()
		st.Close()
	})
	return n
}

// cut unlinks two peers and closes their connections.
func (tn *testNet) cut(a, b peer.ID) {
	if err := tn.mn.UnlinkPeers(a, b); err != nil {
		tn.t.Error(err)
	}
	if err := tn.mn.DisconnectPeers(a, b); err != nil {
		tn.t.Error(err)
	}
}

// relink links two peers again.
func (tn *testNet) relink(a, b peer.ID) {
	if _, err := tn.mn.LinkPeers(a, b); err != nil {
		tn.t.Fatal(err)
	}
}

// testAuth allows everything unless told otherwise, and lets a test act
// at each request a node serves.
type testAuth struct {
	mu       sync.Mutex
	denyRead error
	denyPush error
	lease    string                           // the lease AllowPush names
	onRead   func(ctx context.Context, n int) // called with the count of reads so far
	reads    int
}

func (a *testAuth) AllowRead(ctx context.Context, p peer.ID, m blob.Digest) error {
	a.mu.Lock()
	a.reads++
	n, hook, deny := a.reads, a.onRead, a.denyRead
	a.mu.Unlock()
	if hook != nil {
		hook(ctx, n)
	}
	return deny
}

func (a *testAuth) AllowPush(ctx context.Context, p peer.ID, m blob.Digest) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.denyPush != nil {
		return "", a.denyPush
	}
	return a.lease, nil
}

func (a *testAuth) set(fn func(a *testAuth)) {
	a.mu.Lock()
	fn(a)
	a.mu.Unlock()
}

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// tree writes files of the given sizes under a new directory.
func tree(t testing.TB, seed uint64, sizes ...int) string {
	t.Helper()
	dir := t.TempDir()
	for i, n := range sizes {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), randBytes(seed+uint64(i), n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// putTree stores dir in n's store under lease "src".
func putTree(t testing.TB, n *testNode, dir string) blob.PutStats {
	t.Helper()
	if _, err := n.store.Lease("src"); err != nil {
		if err := n.store.SetLease(blob.Lease{ID: "src"}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := n.store.Put(context.Background(), dir, "src")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// sameFiles checks that n restores m to what dir holds.
func sameFiles(t testing.TB, n *testNode, m blob.Digest, dir string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "restored")
	if err := n.store.Restore(context.Background(), m, dst); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		got, err := os.ReadFile(filepath.Join(dst, e.Name()))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s: restored %d bytes (%v), want %d", e.Name(), len(got), err, len(want))
		}
	}
}

// lease creates a lease on n.
func lease(t testing.TB, n *testNode, id string) string {
	t.Helper()
	if err := n.store.SetLease(blob.Lease{ID: id}); err != nil {
		t.Fatal(err)
	}
	return id
}

var errTest = errors.New("test says no")
