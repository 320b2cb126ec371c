package blob

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeManifest: whatever the bytes, DecodeManifest either refuses
// them or returns a manifest that is valid and whose canonical encoding is
// those very bytes (so one tree has one digest).
func FuzzDecodeManifest(f *testing.F) {
	good, _ := sampleManifest().Encode()
	f.Add(good)
	f.Add([]byte(`{"version":1,"entries":[]}`))
	f.Add([]byte(`{"version":1,"entries":[{"path":"a","type":"dir","mode":493},{"path":"a/b","type":"symlink","target":"/x"}]}`))
	f.Add([]byte(`{"version":1,"entries":[{"path":"../a","type":"file"}]}`))
	f.Add([]byte(`{"version":1,"entries":[{"path":"a","type":"file","mode":2541}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if m != nil {
				t.Fatal("a manifest returned with an error")
			}
			return
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatalf("a decoded manifest does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %q, re-encoded %q", b, again)
		}
		for _, e := range m.Entries {
			if e.Mode&^0o777 != 0 || checkPath(e.Path) != nil {
				t.Fatalf("decoded a bad entry %+v", e)
			}
		}
	})
}

// FuzzChunkRoundTrip: any bytes, put into the store as a file (alone and
// beside pseudo-random data long enough for several chunks) and restored,
// come back the same; chunks stay within their bounds.
func FuzzChunkRoundTrip(f *testing.F) {
	f.Add([]byte{}, uint64(1), uint32(0))
	f.Add([]byte("x"), uint64(2), uint32(MinChunkSize))
	f.Add(bytes.Repeat([]byte{0}, 4096), uint64(3), uint32(3*MaxChunkSize/2))
	f.Add([]byte("tail"), uint64(4), uint32(MaxChunkSize))
	f.Fuzz(func(t *testing.T, raw []byte, seed uint64, n uint32) {
		n %= 2 * MaxChunkSize
		data := append(randBytes(seed, int(n)), raw...)
		zeros := make([]byte, int(n)) // no cut in zeros: forced ones at MaxChunkSize
		s, _ := openStore(t, NoLimit)
		src := t.TempDir()
		for name, b := range map[string][]byte{"raw": raw, "data": data, "zeros": zeros} {
			if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		st := put(t, s, src)
		m, err := s.Manifest(st.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range m.Entries {
			for i, c := range e.Chunks {
				if c.Size > MaxChunkSize || (i < len(e.Chunks)-1 && c.Size < MinChunkSize) {
					t.Fatalf("%s: chunk %d of %d bytes", e.Path, i, c.Size)
				}
			}
		}
		dst := filepath.Join(t.TempDir(), "dst")
		if err := s.Restore(context.Background(), st.Manifest, dst); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string][]byte{"raw": raw, "data": data, "zeros": zeros} {
			got, err := os.ReadFile(filepath.Join(dst, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: restored %d bytes (%v), put %d", name, len(got), err, len(want))
			}
		}
	})
}

// FuzzParseDigest: a digest has one spelling, and ParseDigest takes
// nothing else.
func FuzzParseDigest(f *testing.F) {
	f.Add(Sum([]byte("x")).String())
	f.Add("sha256:")
	f.Add("sha256:" + Sum(nil).Hex()[:63] + "G")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDigest(s)
		if err != nil {
			return
		}
		if d.String() != s || d.IsZero() {
			t.Fatalf("%q parsed as %s", s, d)
		}
	})
}
