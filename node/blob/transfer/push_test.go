package transfer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestPushMovesOnlyWhatTheReceiverLacks(t *testing.T) {
	tn := newTestNet(t)
	runner, holder := tn.addNode(blob.NoLimit, nil), tn.addNode(blob.NoLimit, nil)
	holder.auth.set(func(x *testAuth) { x.lease = lease(t, holder, "ckpt/job/0") })
	// The holder refuses plain reads: the runner's push is what lets it
	// fetch.
	runner.auth.set(func(x *testAuth) { x.denyRead = errTest })

	dir := tree(t, 10, 6*mib, 3*mib)
	v1 := putTree(t, runner, dir)
	st, err := runner.svc.Push(testCtx(t), holder.id(), v1.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if st.Chunks != v1.Chunks || st.Bytes < v1.Bytes {
		t.Fatalf("first push moved %+v, want all %d chunks", st, v1.Chunks)
	}

	// The next checkpoint rewrites part of one file.
	f := filepath.Join(dir, "f00")
	data, _ := os.ReadFile(f)
	copy(data[2*mib:], randBytes(99, 100_000))
	os.WriteFile(f, data, 0o644)
	v2 := putTree(t, runner, dir)
	// Asking needs the holder's leave to read; and a holder that lacks a
	// manifest holds nothing under it.
	if _, err := holder.svc.Lacks(testCtx(t), runner.id(), v2.Manifest, []blob.Digest{v2.Manifest}); !errors.Is(err, ErrDenied) {
		t.Fatalf("Lacks without leave to read = %v, want ErrDenied", err)
	}
	lacking, err := runner.svc.Lacks(testCtx(t), holder.id(), v2.Manifest, nil)
	if err != nil || len(lacking) != 1+v2.Chunks || lacking[0] != v2.Manifest {
		t.Fatalf("Lacks = %v, %v; want the manifest and all its %d chunks", lacking, err, v2.Chunks)
	}
	if lacking, err := runner.svc.Lacks(testCtx(t), holder.id(), v1.Manifest, nil); err != nil || len(lacking) != 0 {
		t.Fatalf("Lacks of what was pushed = %v, %v", lacking, err)
	}

	st, err = runner.svc.Push(testCtx(t), holder.id(), v2.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	man, _ := runner.store.Manifest(v2.Manifest)
	enc, _ := man.Encode()
	if st.Chunks != v2.NewChunks || st.Bytes != v2.NewBytes+int64(len(enc)) {
		t.Fatalf("second push moved %+v, want the %d new chunks (%d bytes) and the manifest", st, v2.NewChunks, v2.NewBytes)
	}
	if l, _ := holder.store.Lease("ckpt/job/0"); !slices.Contains(l.Manifests, v2.Manifest) {
		t.Fatalf("the holder's lease %+v lacks the pushed manifest", l)
	}
	sameFiles(t, holder, v2.Manifest, dir)
	if lacking, err := runner.svc.Lacks(testCtx(t), holder.id(), v2.Manifest, nil); err != nil || len(lacking) != 0 {
		t.Fatalf("after the push the holder lacks %v (%v)", lacking, err)
	}
	// The leave to read ended with the push.
	if err := holder.store.DeleteLease("ckpt/job/0"); err != nil {
		t.Fatal(err)
	}
	holder.store.GC(testCtx(t))
	_, err = holder.svc.Fetch(testCtx(t), v2.Manifest, []peer.ID{runner.id()}, lease(t, holder, "again"))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("a fetch from the runner after the push = %v, want it refused", err)
	}
}

func TestPushRefusals(t *testing.T) {
	tn := newTestNet(t)
	runner := tn.addNode(blob.NoLimit, nil)
	full := tn.addNode(4*mib, nil)
	full.auth.set(func(x *testAuth) { x.lease = lease(t, full, "in") })
	denying := tn.addNode(blob.NoLimit, nil)
	denying.auth.set(func(x *testAuth) { x.denyPush = errTest })
	m := putTree(t, runner, tree(t, 20, 9*mib)).Manifest

	_, err := runner.svc.Push(testCtx(t), denying.id(), m)
	var re *RemoteError
	if !errors.As(err, &re) || !errors.Is(err, ErrDenied) || re.Message != errTest.Error() || re.Peer != denying.id() {
		t.Fatalf("Push to a denying peer = %v, want ErrDenied with its reason", err)
	}
	if denying.store.Has(blob.KindManifest, m) {
		t.Fatal("a refused push stored the manifest")
	}
	if _, err := runner.svc.Push(testCtx(t), full.id(), m); !errors.Is(err, blob.ErrQuota) {
		t.Fatalf("Push to a full peer = %v, want blob.ErrQuota", err)
	}
	if u := full.store.Usage(); u.Bytes > 4*mib {
		t.Fatalf("the full peer holds %d bytes", u.Bytes)
	}
	if _, err := runner.svc.Push(testCtx(t), full.id(), blob.Sum([]byte("not here"))); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Push of a manifest not held = %v, want blob.ErrNotFound", err)
	}
}
