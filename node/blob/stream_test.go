package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"testing"
	"testing/iotest"
)

// A stream stored with PutFile reads back whole through OpenFile; the
// same bytes under the same name get the same manifest (on any node), and
// a second PutFile stores nothing new.
func TestPutFileOpenFile(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	mustLease(t, s, "l")
	data := randBytes(7, 5<<20+123)
	st, err := s.PutFile(context.Background(), "layer", bytes.NewReader(data), "l")
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != int64(len(data)) || st.Files != 1 || st.NewBytes != int64(len(data)) || st.Chunks < 2 {
		t.Errorf("stats %+v", st)
	}
	again, err := s.PutFile(context.Background(), "layer", iotest.HalfReader(bytes.NewReader(data)), "l")
	if err != nil || again.Manifest != st.Manifest || again.NewBytes != 0 {
		t.Errorf("again: %+v %v (first %s)", again, err, st.Manifest)
	}
	r, size, err := s.OpenFile(st.Manifest, "layer")
	if err != nil || size != int64(len(data)) {
		t.Fatalf("open: %d %v", size, err)
	}
	got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(r, 1<<10)))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(got, rest...), data) {
		t.Fatalf("read back %d bytes, %v", len(got)+len(rest), err)
	}
	r.Close()
	if _, _, err := s.OpenFile(st.Manifest, "other"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a path the tree lacks: %v", err)
	}
}

// A chunk corrupted on disk fails the read with a *DigestError and is
// removed, so a fetch brings it again; a missing chunk fails the open.
func TestOpenFileChecksChunks(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	mustLease(t, s, "l")
	data := randBytes(9, 3<<20)
	st, err := s.PutFile(context.Background(), "f", bytes.NewReader(data), "l")
	if err != nil {
		t.Fatal(err)
	}
	man, err := s.Manifest(st.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	c := man.Entries[0].Chunks[1]
	if err := os.WriteFile(s.path(KindChunk, c.Digest), bytes.Repeat([]byte{1}, int(c.Size)), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.OpenFile(st.Manifest, "f")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(r)
	r.Close()
	var de *DigestError
	if !errors.As(err, &de) || de.Want != c.Digest {
		t.Fatalf("corrupt chunk: %v", err)
	}
	if _, _, err := s.OpenFile(st.Manifest, "f"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the corrupt chunk was removed: %v", err)
	}
}

// A stream that fails stores no manifest and names the reader's error.
func TestPutFileReaderError(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	mustLease(t, s, "l")
	boom := errors.New("connection reset")
	_, err := s.PutFile(context.Background(), "f", io.MultiReader(bytes.NewReader(randBytes(1, 1<<20)), iotest.ErrReader(boom)), "l")
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if l, _ := s.Lease("l"); len(l.Manifests) != 0 {
		t.Errorf("lease holds %v", l.Manifests)
	}
	if _, err := s.PutFile(context.Background(), "../f", bytes.NewReader([]byte("x")), "l"); err == nil {
		t.Error("a path leaving the tree was taken")
	}
}
