package executor

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzUnpackTar feeds arbitrary archives to the payload unpacker: it must
// never panic, never write outside its directory, and never write more than
// its limit.
func FuzzUnpackTar(f *testing.F) {
	f.Add(makeTarF(map[string]string{"a.txt": "hello", "d/b": "x"}))
	f.Add(makeTarF(map[string]string{"../up": "x"}))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "work")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = unpackTar(bytes.NewReader(data), dir, 1<<20, 1<<20)
		entries, _ := os.ReadDir(parent)
		if len(entries) != 1 {
			t.Fatalf("unpack wrote beside its dir: %v", entries)
		}
		var total int64
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				total += fi.Size()
			}
			if err == nil && fi.Mode()&os.ModeSymlink != 0 {
				t.Errorf("unpack made a symlink %s", p)
			}
			return nil
		})
		if total > 1<<20 {
			t.Fatalf("unpacked %d bytes past the limit", total)
		}
	})
}

func makeTarF(files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: int64(len(body)), Mode: 0o644})
		tw.Write([]byte(strings.Clone(body)))
	}
	tw.Close()
	return buf.Bytes()
}
