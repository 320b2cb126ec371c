package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Scan, with no store, names a tree exactly as Put stores it: the same
// manifest digest, and chunks that ChunkOffsets finds in the files again.
func TestScanNamesTheTreeAsPutStoresIt(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	src := filepath.Join(t.TempDir(), "src")
	tree := sampleTree()
	writeTree(t, src, tree)
	m, st, err := Scan(context.Background(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, NoLimit)
	put := put(t, s, src)
	if st.Manifest != put.Manifest {
		t.Fatalf("scan names %s, put stored %s", st.Manifest, put.Manifest)
	}
	if d, _ := m.Digest(); d != st.Manifest {
		t.Errorf("the manifest returned is %s, the stats say %s", d, st.Manifest)
	}
	if st.Bytes != put.Bytes || st.NewBytes != put.NewBytes || st.Files != put.Files {
		t.Errorf("scan counted %+v, put %+v", st, put)
	}
	for _, e := range m.Entries {
		if e.Type != TypeFile {
			continue
		}
		data := tree[e.Path].data
		for i, off := range ChunkOffsets(e) {
			c := e.Chunks[i]
			if Sum(data[off:off+c.Size]) != c.Digest {
				t.Fatalf("%s chunk %d at %d is not the bytes there", e.Path, i, off)
			}
		}
	}
}

func TestPutPath(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	s, _ := openStore(t, NoLimit)
	mustLease(t, s, "p")
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, sampleTree())
	if err := os.Symlink("/etc", filepath.Join(src, "etc")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	st, err := s.PutPath(ctx, src, "a/b", "p")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Manifest(st.Manifest)
	if got := paths(m); got != "big.bin copy.bin" {
		t.Errorf("a/b stored as %q", got)
	}
	st, err = s.PutPath(ctx, src, "a/small.txt", "p")
	if err != nil {
		t.Fatal(err)
	}
	m, _ = s.Manifest(st.Manifest)
	if got := paths(m); got != "small.txt" || m.Entries[0].Size != 12 || st.Files != 1 {
		t.Errorf("a/small.txt stored as %q (%+v)", got, st)
	}
	for _, c := range []struct{ path, want string }{
		{"link-in", "is a symbolic link"},
		{"etc/passwd", "escapes"},
		{"../src", `".." element`},
		{"/etc", "is absolute"},
		{"nope", "no such file"},
	} {
		_, err := s.PutPath(ctx, src, c.path, "p")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PutPath %q: %v, want an error saying %q", c.path, err, c.want)
		}
	}
	if _, err := s.PutPath(ctx, src, "nope", "p"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing path: %v does not match fs.ErrNotExist", err)
	}
}

func paths(m *Manifest) string {
	var out []string
	for _, e := range m.Entries {
		out = append(out, e.Path)
	}
	return strings.Join(out, " ")
}

func TestSubtree(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinks need privileges on Windows")
	}
	s, _ := openStore(t, NoLimit)
	src := filepath.Join(t.TempDir(), "src")
	tree := sampleTree()
	writeTree(t, src, tree)
	whole, err := s.Manifest(put(t, s, src).Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
		typ        EntryType
	}{
		{".", paths(whole), TypeDir},
		{"a", "b b/big.bin b/copy.bin empty small.txt", TypeDir},
		{"a/b", "big.bin copy.bin", TypeDir},
		{"emptydir", "", TypeDir},
		{"a/b/big.bin", "big.bin", TypeFile},
		{"a-sibling", "a-sibling", TypeFile},
	} {
		sub, typ, err := whole.Subtree(c.path)
		if err != nil || typ != c.typ || paths(sub) != c.want {
			t.Errorf("Subtree(%q) = %q %s %v, want %q %s", c.path, paths(sub), typ, err, c.want, c.typ)
			continue
		}
		if _, err := sub.Encode(); err != nil {
			t.Errorf("Subtree(%q) is no valid manifest: %v", c.path, err)
		}
	}
	for _, c := range []struct{ path, want string }{
		{"link-in", `is a symbolic link (to "a/small.txt")`},
		{"link-in/x", "no such file"},
		{"a/../a", `".." element`},
		{"/a", "absolute"},
		{"a/missing", "no such file"},
	} {
		if _, _, err := whole.Subtree(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Subtree(%q): %v, want an error saying %q", c.path, err, c.want)
		}
	}

	// A subtree stored as a manifest of its own restores what it names,
	// and FileReader reads a file of it back from the chunks.
	mustLease(t, s, "sub")
	sub, _, _ := whole.Subtree("a/b")
	d, err := s.PutManifest(sub, "sub")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if err := s.Restore(context.Background(), d, dst); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dst, "big.bin"))
	if !bytes.Equal(got, tree["a/b/big.bin"].data) {
		t.Error("the restored subtree's file differs")
	}
	r := s.FileReader(sub.Entries[0])
	read, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(read, tree["a/b/big.bin"].data) {
		t.Errorf("FileReader: %d bytes, %v", len(read), err)
	}
}

// A chunk corrupted on disk fails FileReader with a *DigestError.
func TestFileReaderChecksChunks(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	src := filepath.Join(t.TempDir(), "src")
	writeTree(t, src, map[string]node{"f": {mode: 0o644, data: randBytes(3, 3<<20)}})
	m, _ := s.Manifest(put(t, s, src).Manifest)
	c := m.Entries[0].Chunks[1]
	if err := os.WriteFile(s.path(KindChunk, c.Digest), make([]byte, c.Size), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := io.ReadAll(s.FileReader(m.Entries[0]))
	var de *DigestError
	if !errors.As(err, &de) || de.Want != c.Digest {
		t.Fatalf("read of a corrupt chunk: %v", err)
	}
}

// FuzzSubtree: whatever path is asked of a manifest, Subtree refuses it
// or returns a valid manifest whose chunks are the manifest's own.
func FuzzSubtree(f *testing.F) {
	m := sampleManifest()
	for _, p := range []string{".", "d", "d/e", "d/f", "link", "../d", "d//e", "/", "d/e/empty", "x\x00"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		sub, typ, err := m.Subtree(path)
		if err != nil {
			return
		}
		if typ != TypeDir && typ != TypeFile {
			t.Fatalf("type %q", typ)
		}
		if _, err := sub.Encode(); err != nil {
			t.Fatalf("Subtree(%q) is invalid: %v", path, err)
		}
		own := map[Digest]bool{}
		for _, c := range m.Chunks() {
			own[c.Digest] = true
		}
		for _, c := range sub.Chunks() {
			if !own[c.Digest] {
				t.Fatalf("Subtree(%q) lists a chunk not in the manifest", path)
			}
		}
	})
}
