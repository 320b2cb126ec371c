package image_test

import (
	"archive/tar"
	"bytes"
	"io"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/image"
)

// entry is one member of a test layer.
type entry struct {
	name   string
	typ    byte // tar.TypeReg when 0
	body   string
	mode   int64
	link   string
	uid    int
	size   int64 // a header size other than len(body) (a crafted archive)
	devNum int64
}

// tarBytes writes entries as an uncompressed tar.
func tarBytes(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, e.devNum
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layer is a gzip layer of entries.
func layer(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf stacks layers (lowest first) with a config.
func imageOf(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", image.HostPlatform().Architecture
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// newCache opens a cache over a new store.
func newCache(t testing.TB, mod func(*image.Config)) (*image.Cache, *blob.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := blob.Open(blob.Config{Dir: filepath.Join(dir, "blobs"), Limit: blob.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := image.Config{Dir: filepath.Join(dir, "images"), Blobs: st}
	if mod != nil {
		mod(&cfg)
	}
	c, err := image.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, st
}

func openStoreFor(t testing.TB) *blob.Store {
	st, err := blob.Open(blob.Config{Dir: filepath.Join(t.TempDir(), "blobs"), Limit: blob.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
