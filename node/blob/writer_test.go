package blob

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriterCommitsOnlyTheRightBytes(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	data := []byte("the right bytes")
	d := Sum(data)

	w, err := s.Writer(KindChunk, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("the wrong bytes"))
	var de *DigestError
	if err := w.Commit(); !errors.As(err, &de) || !errors.Is(err, ErrDigestMismatch) || de.Want != d || de.Got != Sum([]byte("the wrong bytes")) {
		t.Fatalf("Commit of wrong bytes = %v, want a *DigestError", err)
	}
	if s.Has(KindChunk, d) {
		t.Fatal("a chunk that failed its hash is visible under its name")
	}
	if _, err := os.Stat(s.path(KindChunk, d)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file under the chunk's name: %v", err)
	}

	w, _ = s.Writer(KindChunk, d, int64(len(data)))
	w.Write(data[:3])
	var se *SizeError
	if err := w.Commit(); !errors.As(err, &se) || se.Got != 3 {
		t.Fatalf("Commit of a short write = %v, want a *SizeError", err)
	}

	w, _ = s.Writer(KindChunk, d, int64(len(data)))
	if _, err := w.Write(append(data, '!')); !errors.As(err, &se) || se.Got != int64(len(data))+1 {
		t.Fatalf("Write past the size = %v, want a *SizeError", err)
	}
	w.Close()

	w, _ = s.Writer(KindChunk, d, int64(len(data)))
	w.Write(data)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	r, size, err := s.Reader(KindChunk, d)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != string(data) || size != int64(len(data)) {
		t.Fatalf("stored %q (%d), want %q", got, size, data)
	}
	if _, err := s.Writer(KindChunk, d, int64(len(data))); !errors.Is(err, ErrExists) {
		t.Fatalf("Writer for a stored chunk = %v, want ErrExists", err)
	}
	if u := s.Usage(); u.Bytes != int64(len(data)) || u.Reserved != 0 || u.Chunks != 1 {
		t.Fatalf("Usage = %+v, want one chunk of %d bytes and nothing reserved", u, len(data))
	}
	left, _ := os.ReadDir(filepath.Join(s.Dir(), ingestDir))
	if len(left) != 0 {
		t.Fatalf("ingest holds %d files after every writer ended", len(left))
	}
}

func TestWriterRefusesAManifestThatDoesNotDecode(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	junk := []byte(`{"version":1,"entries":[{"path":"/abs","type":"dir"}]}`)
	w, err := s.Writer(KindManifest, Sum(junk), int64(len(junk)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(junk)
	if err := w.Commit(); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("Commit = %v, want ErrBadManifest", err)
	}
	if s.Has(KindManifest, Sum(junk)) {
		t.Fatal("an undecodable manifest was stored")
	}
}

func TestWriterBounds(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	d := Sum([]byte("x"))
	for _, tc := range []struct {
		k    Kind
		d    Digest
		size int64
	}{
		{KindChunk, d, 0},
		{KindChunk, d, MaxChunkSize + 1},
		{KindManifest, d, MaxManifestSize + 1},
		{KindChunk, Digest{}, 1},
		{Kind(9), d, 1},
	} {
		if w, err := s.Writer(tc.k, tc.d, tc.size); err == nil {
			w.Close()
			t.Errorf("Writer(%v, %s, %d) opened", tc.k, tc.d.Short(), tc.size)
		}
	}
}

func TestAnInterruptedWriteLeavesNothing(t *testing.T) {
	s, c := openStore(t, NoLimit)
	data := randBytes(1, 1000)
	w, err := s.Writer(KindChunk, Sum(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	// The process "dies" here: no Commit, no Close.
	s = reopen(t, s, c, NoLimit)
	if s.Has(KindChunk, Sum(data)) {
		t.Fatal("an uncommitted chunk is in the store")
	}
	left, _ := os.ReadDir(filepath.Join(s.Dir(), ingestDir))
	if len(left) != 0 {
		t.Fatalf("reopen left %d interrupted writes in ingest", len(left))
	}
}

func TestOpenRefusesASecondUser(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	if s2, err := Open(Config{Dir: s.Dir(), Limit: NoLimit}); !errors.Is(err, ErrLocked) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestStoreIgnoresStrayFiles(t *testing.T) {
	s, c := openStore(t, NoLimit)
	stray := filepath.Join(s.Dir(), chunksDir, "ab", "notadigest")
	os.MkdirAll(filepath.Dir(stray), 0o700)
	os.WriteFile(stray, []byte("x"), 0o600)
	s = reopen(t, s, c, NoLimit)
	if u := s.Usage(); u.Chunks != 0 || u.Bytes != 0 {
		t.Fatalf("Usage = %+v, want the stray file not counted", u)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("the stray file was touched: %v", err)
	}
}
