package blob

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// chunk stores b as an unleased chunk.
func chunk(t testing.TB, s *Store, b []byte) Digest {
	t.Helper()
	if _, err := s.put(KindChunk, Sum(b), b, nil); err != nil {
		t.Fatal(err)
	}
	return Sum(b)
}

func TestGCRemovesOnlyWhatNothingKeeps(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	ctx := context.Background()
	shared := randBytes(1, 2<<20)
	srcA, srcB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	writeTree(t, srcA, map[string]node{"shared": {mode: 0o644, data: shared}, "onlyA": {mode: 0o644, data: randBytes(2, 1<<20)}})
	writeTree(t, srcB, map[string]node{"shared": {mode: 0o644, data: shared}, "onlyB": {mode: 0o644, data: randBytes(3, 1<<20)}})
	a, b := put(t, s, srcA), put(t, s, srcB)
	kept := chunk(t, s, []byte("kept by its own lease"))
	if err := s.SetLease(Lease{ID: "chunks", Chunks: []Digest{kept}}); err != nil {
		t.Fatal(err)
	}
	loose := chunk(t, s, []byte("kept by nothing"))

	st, err := s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 1 || s.Has(KindChunk, loose) || !s.Has(KindChunk, kept) {
		t.Fatalf("GC removed %d objects (%+v), want the loose chunk alone", st.Objects, st)
	}

	if err := s.DeleteLease("test/a"); err != nil {
		t.Fatal(err)
	}
	before := s.Usage()
	st, err = s.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Has(KindManifest, a.Manifest) || !s.Has(KindManifest, b.Manifest) {
		t.Fatal("GC did not remove the unleased manifest alone")
	}
	if missing, _ := s.Missing(b.Manifest); len(missing) != 0 {
		t.Fatalf("GC removed %d chunks of a leased manifest", len(missing))
	}
	after := s.Usage()
	if before.Bytes-after.Bytes != st.Bytes || st.Bytes < 1<<20 {
		t.Fatalf("GC freed %d bytes (usage %d → %d), want onlyA's chunks and a's manifest", st.Bytes, before.Bytes, after.Bytes)
	}
	if after.Kept != after.Bytes {
		t.Fatalf("after a full GC %d of %d bytes are kept", after.Kept, after.Bytes)
	}
	if err := s.Restore(ctx, b.Manifest, filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatal(err)
	}
}

func TestAnExpiredLeaseKeepsNothing(t *testing.T) {
	s, c := openStore(t, NoLimit)
	d := chunk(t, s, []byte("short-lived"))
	if err := s.SetLease(Lease{ID: "fetch/1", Chunks: []Digest{d}, Expires: c.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.GC(context.Background()); st.Objects != 0 || st.ExpiredLeases != 0 {
		t.Fatalf("GC before expiry: %+v", st)
	}
	c.Advance(time.Hour)
	st, _ := s.GC(context.Background())
	if st.Objects != 1 || st.ExpiredLeases != 1 || s.Has(KindChunk, d) {
		t.Fatalf("GC after expiry: %+v", st)
	}
	if _, err := s.Lease("fetch/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the expired lease is still there: %v", err)
	}
}

func TestQuotaCollectsOldestFirst(t *testing.T) {
	const mib = 1 << 20
	s, c := openStore(t, 3*mib+mib/2)
	var ds []Digest
	for i := range 3 {
		ds = append(ds, chunk(t, s, randBytes(uint64(i), mib)))
		c.Advance(time.Minute)
	}
	// Reusing the oldest makes it the youngest.
	if !s.reuse(KindChunk, ds[0], nil) {
		t.Fatal("reuse of a stored chunk failed")
	}
	c.Advance(time.Minute)
	chunk(t, s, randBytes(9, mib))
	if s.Has(KindChunk, ds[1]) || !s.Has(KindChunk, ds[0]) || !s.Has(KindChunk, ds[2]) {
		t.Fatalf("after a write over the limit: has %v %v %v, want the oldest unused (1) removed alone",
			s.Has(KindChunk, ds[0]), s.Has(KindChunk, ds[1]), s.Has(KindChunk, ds[2]))
	}
	if u := s.Usage(); u.Bytes != 3*mib {
		t.Fatalf("Usage.Bytes = %d", u.Bytes)
	}
}

func TestQuotaErrorLeavesStoredContentIntact(t *testing.T) {
	const mib = 1 << 20
	limit := int64(4 * mib)
	s, _ := openStore(t, limit)
	ctx := context.Background()
	srcA, srcB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	writeTree(t, srcA, map[string]node{"f": {mode: 0o644, data: randBytes(1, 3*mib)}})
	writeTree(t, srcB, map[string]node{"f": {mode: 0o644, data: randBytes(2, 2*mib)}})
	a := put(t, s, srcA)
	mustLease(t, s, "b")
	_, err := s.Put(ctx, srcB, "b")
	var qe *QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, ErrQuota) {
		t.Fatalf("Put over the quota = %v, want a *QuotaError", err)
	}
	if qe.Limit != limit || qe.Used+qe.Reserved+qe.Need <= limit || qe.Used < a.Bytes {
		t.Fatalf("QuotaError %+v does not name sizes that exceed the limit %d", qe, limit)
	}
	if err := s.Restore(ctx, a.Manifest, filepath.Join(t.TempDir(), "a")); err != nil {
		t.Fatalf("the leased tree was damaged: %v", err)
	}
	if u := s.Usage(); u.Bytes > limit {
		t.Fatalf("the store holds %d bytes, over its limit %d", u.Bytes, limit)
	}

	// Once the first tree's lease is gone, the second fits.
	if err := s.DeleteLease("test/a"); err != nil {
		t.Fatal(err)
	}
	b, err := s.Put(ctx, srcB, "b")
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := s.Missing(a.Manifest); err == nil && len(missing) == 0 {
		t.Fatal("the unleased tree's chunks were not collected")
	}
	if err := s.Restore(ctx, b.Manifest, filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatal(err)
	}
}

func TestAWriteThatCannotFitRemovesNothing(t *testing.T) {
	const mib = 1 << 20
	s, _ := openStore(t, 2*mib)
	loose := chunk(t, s, randBytes(1, mib))
	kept := chunk(t, s, randBytes(2, mib/2))
	s.SetLease(Lease{ID: "k", Chunks: []Digest{kept}})
	// 2 MiB cannot fit beside the kept half MiB even if the loose chunk
	// went: it stays.
	if _, err := s.put(KindChunk, Sum(randBytes(3, 2*mib)), randBytes(3, 2*mib), nil); !errors.Is(err, ErrQuota) {
		t.Fatalf("put = %v, want ErrQuota", err)
	}
	if !s.Has(KindChunk, loose) {
		t.Fatal("a write that could not fit removed a cached chunk")
	}
}

func TestGCDuringPutKeepsWhatThePutStored(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	ctx := context.Background()
	src := t.TempDir()
	writeTree(t, src, map[string]node{"f": {mode: 0o644, data: randBytes(4, 6<<20)}, "g": {mode: 0o644, data: randBytes(5, 2<<20)}})
	collections := 0
	s.afterChunk = func() {
		if _, err := s.GC(ctx); err != nil {
			t.Error(err)
		}
		collections++
	}
	st := put(t, s, src)
	if collections < 4 {
		t.Fatalf("GC ran %d times during the Put", collections)
	}
	if err := s.Restore(ctx, st.Manifest, filepath.Join(t.TempDir(), "dst")); err != nil {
		t.Fatalf("a GC during Put removed part of it: %v", err)
	}
}

func TestDefaultLimit(t *testing.T) {
	const gb = 1_000_000_000
	for _, tc := range []struct{ total, free, held, want int64 }{
		{1000 * gb, 300 * gb, 0, 150 * gb},
		{1000 * gb, 900 * gb, 0, 250 * gb},
		{1000 * gb, 100 * gb, 100 * gb, 100 * gb}, // a restart with 100 GB held keeps its limit
		{1000 * gb, 0, 0, 1},
	} {
		if got := DefaultLimit(tc.total, tc.free, tc.held); got != tc.want {
			t.Errorf("DefaultLimit(%d, %d, %d) = %d, want %d", tc.total, tc.free, tc.held, got, tc.want)
		}
	}
}

func TestOpenWithoutALimitTakesTheDefault(t *testing.T) {
	s, _ := openStore(t, 0)
	total, free, err := DiskSpace(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if total <= 0 || free < 0 || free > total {
		t.Fatalf("DiskSpace = %d total, %d free", total, free)
	}
	if l := s.Usage().Limit; l <= 0 || l > total/4 {
		t.Fatalf("default limit %d on a disk of %d bytes", l, total)
	}
}

// TestConcurrentPutsRestoresAndCollections runs Puts of overlapping trees,
// Restores, lease resets and collections at once, under a limit: whatever
// leases keep stays restorable. (The limit leaves room for four Puts of
// four chunks in flight each beside what is kept: a tighter one would
// make them fail with ErrQuota, rightly.)
func TestConcurrentPutsRestoresAndCollections(t *testing.T) {
	const mib = 1 << 20
	s, _ := openStore(t, 64*mib)
	ctx := context.Background()
	shared := randBytes(100, 2*mib)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		src := filepath.Join(t.TempDir(), "src")
		writeTree(t, src, map[string]node{
			"shared": {mode: 0o644, data: shared},
			"own":    {mode: 0o644, data: randBytes(uint64(200+i), 2*mib)},
		})
		dsts := []string{t.TempDir(), t.TempDir(), t.TempDir()}
		wg.Go(func() {
			id := fmt.Sprintf("tree/%d", i)
			for round := range 3 {
				if err := s.SetLease(Lease{ID: id}); err != nil {
					errs <- err
					return
				}
				st, err := s.Put(ctx, src, id)
				if err != nil {
					errs <- err
					return
				}
				if err := s.Restore(ctx, st.Manifest, filepath.Join(dsts[round], "dst")); err != nil {
					errs <- fmt.Errorf("tree %d round %d: %w", i, round, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := s.GC(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if u := s.Usage(); u.Bytes > 64*mib || u.Reserved != 0 {
		t.Fatalf("usage after the run: %+v", u)
	}
}

func TestFits(t *testing.T) {
	const mib = 1 << 20
	s, _ := openStore(t, 4*mib)
	kept := chunk(t, s, randBytes(1, 2*mib))
	chunk(t, s, randBytes(2, mib)) // loose: it would be collected
	s.SetLease(Lease{ID: "k", Chunks: []Digest{kept}})
	if err := s.Fits(2 * mib); err != nil {
		t.Fatalf("Fits(2 MiB) beside 2 MiB kept under 4 MiB = %v", err)
	}
	var qe *QuotaError
	if err := s.Fits(2*mib + 1); !errors.As(err, &qe) || qe.Used != 2*mib || qe.Need != 2*mib+1 || qe.Limit != 4*mib {
		t.Fatalf("Fits(2 MiB + 1) = %v, want a *QuotaError naming 2 MiB kept", err)
	}
	if u := s.Usage(); u.Chunks != 2 {
		t.Fatalf("Fits removed something: %+v", u)
	}
	unlimited, _ := openStore(t, NoLimit)
	if err := unlimited.Fits(1 << 50); err != nil {
		t.Fatalf("Fits without a limit = %v", err)
	}
}
