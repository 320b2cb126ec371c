//go:build unix

package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumesh/gpumesh/node/image"
)

// FuzzUnpack feeds arbitrary archives to the layer reader: it must never
// panic nor write anything outside the root, whatever it refuses.
func FuzzUnpack(f *testing.F) {
	f.Add(tarBytes(f, entry{name: "a/b/c", body: "x"}, entry{name: "l", typ: tar.TypeSymlink, link: "a/b"}, entry{name: "l/d", body: "y"}))
	f.Add(tarBytes(f, entry{name: "../x", body: "x"}))
	f.Add(tarBytes(f, entry{name: "e", typ: tar.TypeSymlink, link: "/"}, entry{name: "e/x", body: "x"}))
	f.Add(tarBytes(f, entry{name: "e", typ: tar.TypeSymlink, link: "../.."}, entry{name: "e/x", body: "x"}))
	f.Add(tarBytes(f, entry{name: "h", typ: tar.TypeLink, link: "../../x"}, entry{name: "h2", typ: tar.TypeLink, link: "/etc/passwd"}))
	f.Add(tarBytes(f, entry{name: "d/", typ: tar.TypeDir, mode: 0o500}, entry{name: "d/f", body: "x", mode: 0o6755}))
	f.Add(sparseTar(f, 1<<40))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "root")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var budget int64 = 1 << 20
		_, _ = image.Unpack(context.Background(), bytes.NewReader(data), dir, image.UnpackOptions{Room: func(n int64) error {
			budget -= n
			if budget < 0 {
				return image.ErrTooBig
			}
			return nil
		}})
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 {
			t.Fatalf("the unpack wrote beside its root: %v", ents)
		}
		// Make everything removable for TempDir's cleanup.
		filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}
