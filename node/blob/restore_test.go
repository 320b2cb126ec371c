package blob

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestRestoreRefusesANonEmptyDirectory(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	src := t.TempDir()
	writeTree(t, src, map[string]node{"f": {mode: 0o644, data: []byte("new")}})
	st := put(t, s, src)
	dst := t.TempDir()
	os.WriteFile(filepath.Join(dst, "f"), []byte("old"), 0o644)
	if err := s.Restore(context.Background(), st.Manifest, dst); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Restore = %v, want ErrNotEmpty", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "old" {
		t.Fatalf("f holds %q, want it untouched", b)
	}
}

func TestRestoreOfAMissingManifestOrChunk(t *testing.T) {
	s, c := openStore(t, NoLimit)
	if err := s.Restore(context.Background(), Sum([]byte("none")), t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Restore of an unknown manifest = %v, want ErrNotFound", err)
	}
	src := t.TempDir()
	data := randBytes(2, 3<<20)
	writeTree(t, src, map[string]node{"f": {mode: 0o644, data: data}})
	st := put(t, s, src)
	m, _ := s.Manifest(st.Manifest)
	lost := m.Entries[0].Chunks[1]
	os.Remove(s.path(KindChunk, lost.Digest))
	s = reopen(t, s, c, NoLimit)

	dst := filepath.Join(t.TempDir(), "dst")
	err := s.Restore(context.Background(), st.Manifest, dst)
	var me *MissingError
	if !errors.As(err, &me) || !errors.Is(err, ErrNotFound) || me.Chunks != 1 || me.First != lost.Digest || me.Bytes != lost.Size {
		t.Fatalf("Restore = %v, want a *MissingError naming chunk %s", err, lost.Digest)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Restore without all chunks touched %s: %v", dst, err)
	}
	missing, err := s.Missing(st.Manifest)
	if err != nil || len(missing) != 1 || missing[0] != lost {
		t.Fatalf("Missing = %v, %v; want [%v]", missing, err, lost)
	}
}

func TestRestoreFindsAndRemovesACorruptChunk(t *testing.T) {
	s, clock := openStore(t, NoLimit)
	src := t.TempDir()
	writeTree(t, src, map[string]node{
		"a":     {mode: 0o644, data: []byte("first")},
		"d":     {dir: true, mode: 0o555},
		"d/big": {mode: 0o444, data: randBytes(3, 2<<20)},
	})
	st := put(t, s, src)
	m, _ := s.Manifest(st.Manifest)
	bad := m.Entries[2].Chunks[0]
	p := s.path(KindChunk, bad.Digest)
	b, _ := os.ReadFile(p)
	b[100] ^= 1
	os.WriteFile(p, b, 0o600)
	// The store checked its chunks as Put wrote them; opened again, it
	// checks each once more as a restore reads it.
	s = reopen(t, s, clock, NoLimit)

	dst := t.TempDir()
	err := s.Restore(context.Background(), st.Manifest, dst)
	var de *DigestError
	if !errors.As(err, &de) || de.Want != bad.Digest {
		t.Fatalf("Restore = %v, want a *DigestError for %s", err, bad.Digest)
	}
	if s.Has(KindChunk, bad.Digest) {
		t.Fatal("the corrupt chunk is still in the store")
	}
	if got := readTree(t, dst); len(got) != 0 {
		t.Fatalf("a failed restore left %d entries", len(got))
	}
}

// TestRestoreNeverWritesThroughALink feeds the restorer a tree the decoder
// would refuse (an entry under a link that points out of the tree): the
// os.Root layer must still keep every write inside.
func TestRestoreNeverWritesThroughALink(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	s, _ := openStore(t, NoLimit)
	data := []byte("payload")
	if _, err := s.put(KindChunk, Sum(data), data, nil); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, target := range []string{outside, "../" + filepath.Base(outside)} {
		man := &Manifest{Version: 1, Entries: []Entry{
			{Path: "l", Type: TypeSymlink, Target: target},
			{Path: "l/x", Type: TypeFile, Mode: 0o644, Size: int64(len(data)), Chunks: []ChunkRef{{Sum(data), int64(len(data))}}},
		}}
		if _, err := man.Encode(); !errors.Is(err, ErrBadManifest) {
			t.Fatalf("the decoder would take an entry under a link: %v", err)
		}
		dir := filepath.Join(filepath.Dir(outside), "dst")
		os.RemoveAll(dir)
		os.Mkdir(dir, 0o700)
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		r := &restorer{s: s, ctx: context.Background(), root: root}
		if err := r.tree(man); err == nil {
			t.Errorf("target %s: the restorer wrote l/x", target)
		}
		root.Close()
		if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
			t.Fatalf("target %s: a file was written outside the tree", target)
		}
	}
}

func TestRestoreRefusesEscapingPaths(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	data := []byte("payload")
	s.put(KindChunk, Sum(data), data, nil)
	outside := t.TempDir()
	dir := filepath.Join(t.TempDir(), "dst")
	os.Mkdir(dir, 0o700)
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	rel, _ := filepath.Rel(dir, outside)
	for _, p := range []string{filepath.ToSlash(filepath.Join(rel, "x")), filepath.ToSlash(filepath.Join(outside, "x"))} {
		r := &restorer{s: s, ctx: context.Background(), root: root}
		man := &Manifest{Version: 1, Entries: []Entry{{Path: p, Type: TypeFile, Mode: 0o644, Size: 7, Chunks: []ChunkRef{{Sum(data), 7}}}}}
		if err := r.tree(man); err == nil {
			t.Errorf("the restorer wrote %s", p)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a file was written outside the tree: %v", entries)
	}
}
