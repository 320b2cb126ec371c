package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleTree has every kind of entry: nested directories with unusual
// modes, an empty file, small and multi-chunk files, a duplicate, links
// inside and outside the tree.
func sampleTree() map[string]node {
	big := randBytes(7, 5<<20+123)
	return map[string]node{
		"a":             {dir: true, mode: 0o750},
		"a/empty":       {mode: 0o600},
		"a/small.txt":   {mode: 0o644, data: []byte("hello, mesh\n")},
		"a/b":           {dir: true, mode: 0o500},
		"a/b/big.bin":   {mode: 0o400, data: big},
		"a/b/copy.bin":  {mode: 0o755, data: big},
		"a-sibling":     {mode: 0o640, data: randBytes(8, 700<<10)},
		"emptydir":      {dir: true, mode: 0o700},
		"link-in":       {target: "a/small.txt"},
		"link-out":      {target: "/etc/passwd"},
		"link-dangling": {target: "../nowhere"},
	}
}

func TestPutRestoreRoundTrip(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	s, _ := openStore(t, NoLimit)
	src := filepath.Join(t.TempDir(), "src")
	tree := sampleTree()
	writeTree(t, src, tree)

	st := put(t, s, src)
	if st.Files != 5 || st.Dirs != 3 || st.Symlinks != 3 {
		t.Errorf("counted %d files, %d dirs, %d links; want 5, 3, 3", st.Files, st.Dirs, st.Symlinks)
	}
	var total int64
	for _, n := range tree {
		total += int64(len(n.data))
	}
	if st.Bytes != total {
		t.Errorf("Bytes = %d, want %d", st.Bytes, total)
	}
	big := int64(len(tree["a/b/big.bin"].data))
	if st.NewBytes != total-big {
		t.Errorf("NewBytes = %d, want %d: the copy of big.bin is stored once", st.NewBytes, total-big)
	}

	dst := filepath.Join(t.TempDir(), "dst")
	if err := s.Restore(context.Background(), st.Manifest, dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, readTree(t, dst), tree)

	m, err := s.Manifest(st.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Entries {
		for _, c := range e.Chunks[:max(len(e.Chunks)-1, 0)] {
			if c.Size < MinChunkSize {
				t.Errorf("%s: a chunk of %d bytes before the last", e.Path, c.Size)
			}
		}
	}
}

func TestPutIsDeterministicAndDeduplicates(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	src := filepath.Join(t.TempDir(), "src")
	data := randBytes(3, 16<<20)
	writeTree(t, src, map[string]node{"w.bin": {mode: 0o644, data: data}})
	first := put(t, s, src)

	again := put(t, s, src)
	if again.Manifest != first.Manifest || again.NewBytes != 0 || again.NewChunks != 0 {
		t.Fatalf("the same tree again: %+v, want manifest %s and nothing new", again, first.Manifest)
	}

	// An edit in place and an insertion: content-defined cuts keep the
	// chunks away from both.
	edited := bytes.Clone(data)
	copy(edited[4<<20:], randBytes(4, 1000))
	edited = append(edited[:10<<20], append(randBytes(5, 777), edited[10<<20:]...)...)
	if err := os.WriteFile(filepath.Join(src, "w.bin"), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	st := put(t, s, src)
	if st.Manifest == first.Manifest {
		t.Fatal("an edited tree has the same manifest")
	}
	if st.NewBytes == 0 || st.NewBytes > 6*MaxChunkSize/2 || st.NewChunks > 6 {
		t.Fatalf("two small edits stored %d new bytes in %d chunks of %d; want a few chunks", st.NewBytes, st.NewChunks, st.Chunks)
	}
	t.Logf("two edits in 16 MiB: %d new bytes in %d of %d chunks", st.NewBytes, st.NewChunks, st.Chunks)

	// Another store cuts the same bytes alike.
	s2, _ := openStore(t, NoLimit)
	if other := put(t, s2, src); other.Manifest != st.Manifest {
		t.Fatalf("another store named the tree %s, this one %s", other.Manifest, st.Manifest)
	}
}

// TestChunkingIsFixed pins the cut points: a change of polynomial or
// bounds would make nodes of two versions share no chunks.
func TestChunkingIsFixed(t *testing.T) {
	sp := newSplitter()
	sp.reset(bytes.NewReader(randBytes(42, 6<<20)))
	buf := make([]byte, 0, MaxChunkSize)
	var sizes []int
	for {
		b, err := sp.next(buf)
		if err != nil {
			break
		}
		sizes = append(sizes, len(b))
	}
	want := []int{1577003, 841232, 990320, 1057899, 581208, 617089, 626705}
	if !slices.Equal(sizes, want) {
		t.Fatalf("chunk sizes %v, want %v", sizes, want)
	}
}

// A file shorter than MinChunkSize is read whole into a buffer of its
// size instead of going through the chunker; its chunks must be those the
// chunker makes of the same bytes (PutFile streams them through it), or
// stores of two versions would share nothing. A file that grew past the
// size its stat gave is cut as any other.
func TestSmallFilesAreChunkedAsTheChunkerWould(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	mustLease(t, s, "l")
	for _, size := range []int{0, 1, 4096, MinChunkSize - 1, MinChunkSize, MinChunkSize + 1, 3 * MinChunkSize} {
		data := randBytes(uint64(size), size)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		tree, err := s.Put(context.Background(), dir, "l")
		if err != nil {
			t.Fatal(err)
		}
		streamed, err := s.PutFile(context.Background(), "f", bytes.NewReader(data), "l")
		if err != nil {
			t.Fatal(err)
		}
		if tree.Manifest != streamed.Manifest {
			t.Errorf("a file of %d bytes: put as a tree %s, through the chunker %s", size, tree.Manifest, streamed.Manifest)
		}
	}

	// Grown: stat said 10 bytes; 2 MinChunkSize came.
	data := randBytes(7, 2*MinChunkSize)
	h := s.newHold()
	defer s.release(h)
	p := &putter{ctx: context.Background(), split: s.pools.splitter(), entries: []Entry{}, in: newIngest(s, h, &s.pools)}
	if err := p.small("f", 0o644, bytes.NewReader(data), 10); err != nil {
		t.Fatal(err)
	}
	if err := p.in.wait(); err != nil {
		t.Fatal(err)
	}
	streamed, err := s.PutFile(context.Background(), "f", bytes.NewReader(data), "l")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Manifest(streamed.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	var got []ChunkRef
	for _, c := range p.files[0].chunks {
		got = append(got, *c)
	}
	if want := m.Entries[0].Chunks; !slices.Equal(got, want) || p.entries[0].Size != int64(len(data)) {
		t.Errorf("a file that grew to %d bytes after its stat: chunks %v (size %d), the chunker's %v", len(data), got, p.entries[0].Size, want)
	}
}

func TestPutNeedsItsLease(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	src := t.TempDir()
	if _, err := s.Put(context.Background(), src, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Put without a lease = %v, want ErrNotFound", err)
	}
}

func TestPutRefusesNamesAManifestCannotHold(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows file names cannot hold a backslash")
	}
	s, _ := openStore(t, NoLimit)
	src := t.TempDir()
	os.Mkdir(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", `back\slash`), nil, 0o644)
	mustLease(t, s, "l")
	_, err := s.Put(context.Background(), src, "l")
	if err == nil || !strings.Contains(err.Error(), `"d/back\\slash": path holds a backslash`) {
		t.Fatalf("Put = %v, want an error naming the path", err)
	}
}

func TestPutStripsSpecialModeBits(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no setuid on Windows")
	}
	s, _ := openStore(t, NoLimit)
	src := t.TempDir()
	p := filepath.Join(src, "tool")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	if err := os.Chmod(p, 0o755|os.ModeSetuid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	st := put(t, s, src)
	m, _ := s.Manifest(st.Manifest)
	if m.Entries[0].Mode != 0o755 {
		t.Fatalf("mode %v stored, want 0755", m.Entries[0].Mode)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if err := s.Restore(context.Background(), st.Manifest, dst); err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(filepath.Join(dst, "tool"))
	if info.Mode() != 0o755 {
		t.Fatalf("restored mode %v, want -rwxr-xr-x", info.Mode())
	}
}

func TestPutOfAnEmptyTree(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	st := put(t, s, t.TempDir())
	dst := filepath.Join(t.TempDir(), "dst")
	if err := s.Restore(context.Background(), st.Manifest, dst); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, dst); len(got) != 0 {
		t.Fatalf("restored %v", got)
	}
}

func TestPutStopsWithItsContext(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	src := t.TempDir()
	writeTree(t, src, map[string]node{"f": {mode: 0o644, data: randBytes(1, 3<<20)}})
	mustLease(t, s, "l")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, src, "l"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put = %v, want context.Canceled", err)
	}
	if l, _ := s.Lease("l"); len(l.Manifests) != 0 {
		t.Fatalf("a cancelled Put leased %v", l.Manifests)
	}
}

// PutUnder makes its lease with the tree's manifest in it: the tree
// survives a restart and a collection, as it would after SetLease and Put;
// a lease ID that cannot be one fails before anything is stored or made.
func TestPutUnderKeepsTheTreeInTheLeaseItMakes(t *testing.T) {
	s, c := openStore(t, NoLimit)
	src := t.TempDir()
	data := randBytes(7, 3*MinChunkSize)
	if err := os.WriteFile(filepath.Join(src, "out.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	exp := c.Now().Add(time.Hour)
	st, err := s.PutUnder(context.Background(), src, Lease{ID: "outputs/job/0/1", Expires: exp})
	if err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, c, NoLimit)
	l, err := s.Lease("outputs/job/0/1")
	if err != nil || !slices.Equal(l.Manifests, []Digest{st.Manifest}) || !l.Expires.Equal(exp) {
		t.Fatalf("lease after restart: %+v, %v; want the manifest %s, expiring %v", l, err, st.Manifest.Short(), exp)
	}
	if _, err := s.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if err := s.Restore(context.Background(), st.Manifest, dst); err != nil {
		t.Fatalf("restore after a collection: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "out.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored out.bin: %d bytes, %v; want the %d bytes put", len(got), err, len(data))
	}

	before := s.Usage()
	if _, err := s.PutUnder(context.Background(), src, Lease{ID: "bad\x00id"}); err == nil {
		t.Fatal("PutUnder with a control character in the lease ID succeeded")
	}
	if after := s.Usage(); after.Leases != before.Leases || after.Bytes != before.Bytes {
		t.Fatalf("a refused PutUnder changed the store: %+v, then %+v", before, after)
	}
}

// The empty tree is the manifest an empty directory encodes to, so that
// its digest is the one every release put for it.
func TestEmptyTreeIsTheEmptyDirectorysManifest(t *testing.T) {
	b, err := (&Manifest{Version: ManifestVersion, Entries: []Entry{}}).Encode()
	if err != nil || string(b) != emptyTreeEncoding {
		t.Fatalf("the empty manifest encodes to %q (%v), want %q", b, err, emptyTreeEncoding)
	}
	if Sum(b) != EmptyTree() {
		t.Errorf("EmptyTree is %s, the empty manifest's digest %s", EmptyTree(), Sum(b))
	}
}

// PutUnder of an empty directory stores nothing and takes no lease, and
// a store that never held it answers for the empty tree all the same.
func TestPutUnderAnEmptyDirectoryWritesNothing(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	commits := 0
	s.beforeLeaseCommit = func() { commits++ }
	st, err := s.PutUnder(context.Background(), t.TempDir(), Lease{ID: "outputs/j/0/1", Expires: time.Now().Add(time.Hour)})
	if err != nil || st.Manifest != EmptyTree() || st.Files+st.Dirs+st.Symlinks != 0 {
		t.Fatalf("PutUnder of an empty directory: %+v %v", st, err)
	}
	if commits != 0 {
		t.Errorf("%d lease commits for an empty directory, want 0", commits)
	}
	if _, err := s.Lease("outputs/j/0/1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the lease of an empty directory: %v, want ErrNotFound", err)
	}
	if u := s.Usage(); u.Manifests != 0 || u.Bytes != 0 {
		t.Errorf("the store holds %+v after an empty directory", u)
	}

	fresh, _ := openStore(t, NoLimit)
	if _, err := fresh.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !fresh.Has(KindManifest, EmptyTree()) {
		t.Error("a fresh store does not hold the empty tree")
	}
	m, err := fresh.Manifest(EmptyTree())
	if err != nil || m.Version != ManifestVersion || len(m.Entries) != 0 {
		t.Fatalf("Manifest(EmptyTree): %+v %v", m, err)
	}
	if missing, err := fresh.Missing(EmptyTree()); err != nil || len(missing) != 0 {
		t.Errorf("Missing(EmptyTree): %v %v", missing, err)
	}
	r, size, err := fresh.Reader(KindManifest, EmptyTree())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if int64(len(b)) != size || Sum(b) != EmptyTree() {
		t.Errorf("Reader(EmptyTree) gave %q (%d bytes announced)", b, size)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := fresh.Restore(context.Background(), EmptyTree(), dst); err != nil {
		t.Errorf("restoring the empty tree: %v", err)
	} else if left, err := os.ReadDir(dst); err != nil || len(left) != 0 {
		t.Errorf("the empty tree restored to %d entries (%v)", len(left), err)
	}
}
