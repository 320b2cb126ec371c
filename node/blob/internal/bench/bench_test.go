package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4GiB": 4 << 30, "256MiB": 256 << 20, "64KiB": 64 << 10, "1000": 1000, " 2 GiB ": 2 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "4GB", "-1", "0", "x"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}

func TestTreeVersions(t *testing.T) {
	tree := NewTree(8<<20, 0.05, 64<<10)
	dir := t.TempDir()
	if err := tree.Write(dir, 1); err != nil {
		t.Fatal(err)
	}
	v1 := readAll(t, dir)
	if err := tree.Write(dir, 2); err != nil {
		t.Fatal(err)
	}
	v2 := readAll(t, dir)
	if int64(len(v1)) != tree.Bytes(1) || int64(len(v2)) != tree.Bytes(2) {
		t.Fatalf("versions of %d and %d bytes, planned %d and %d", len(v1), len(v2), tree.Bytes(1), tree.Bytes(2))
	}
	if c := tree.Changed(); c < (8<<20)/20 || c > (8<<20)/20+1 {
		t.Fatalf("Changed = %d, want 5%% of 8 MiB", c)
	}
	if bytes.Equal(v1, v2) {
		t.Fatal("version 2 is version 1")
	}
}

func readAll(t *testing.T, dir string) []byte {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

func TestWatchEnds(t *testing.T) {
	stop := Watch()
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	p := stop()
	if p.Heap < 8<<20 {
		t.Fatalf("peak heap %d with 8 MiB live", p.Heap)
	}
	_ = buf[len(buf)-1]
}
