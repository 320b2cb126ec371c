package image_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
)

// A pull by digest brings every layer into the blob store once, checked
// by digest and kept by the image's lease; a second pull of the image
// (after a restart too) asks the registry nothing.
func TestPullStoresLayersAsBlobs(t *testing.T) {
	reg := imagetest.New(t)
	img := imageOf(t, v1.Config{Cmd: []string{"/bin/app"}}, layer(t, entry{name: "bin/app", body: "app"}), layer(t, entry{name: "etc/conf", body: "x=1"}))
	ref := reg.Push(t, "team/app:v1", img)
	c, st := newCache(t, nil)
	got, err := c.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if got.Ref != ref || got.Digest != want.String() || len(got.Layers) != 2 || got.Config.Cmd[0] != "/bin/app" {
		t.Fatalf("pulled %+v", got)
	}
	layers, _ := img.Layers()
	for i, l := range layers {
		d, _ := l.Digest()
		m, ok := c.LayerBlob(d)
		if !ok || m.String() != got.Layers[i].Blob {
			t.Errorf("layer %d (%s) not in the store: %v", i, d, ok)
		}
		if n := reg.BlobGets()[d.String()]; n != 1 {
			t.Errorf("layer %d fetched %d times", i, n)
		}
	}
	lease, err := st.Lease("image/" + got.Digest)
	if err != nil || len(lease.Manifests) != 2 || lease.Expires.IsZero() {
		t.Errorf("lease %+v %v", lease, err)
	}
	before := reg.BlobGets()
	again, err := c.Pull(context.Background(), ref)
	if err != nil || again.Digest != got.Digest {
		t.Fatal(again, err)
	}
	if s := c.Stats(); s.RegistryLayers != 2 || s.Pulls != 1 {
		t.Errorf("stats %+v", s)
	}
	if len(reg.BlobGets()) != len(before) {
		t.Errorf("the second pull fetched blobs")
	}
}

// A manifest list resolves to this node's platform; a list without it
// fails naming what it has.
func TestPullManifestList(t *testing.T) {
	reg := imagetest.New(t)
	mine := imageOf(t, v1.Config{Cmd: []string{"mine"}}, layer(t, entry{name: "a", body: "mine"}))
	other := imageOf(t, v1.Config{Cmd: []string{"other"}}, layer(t, entry{name: "a", body: "other"}))
	host := image.HostPlatform()
	foreign := v1.Platform{OS: "linux", Architecture: "s390x"}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &foreign}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &host}})
	ref := reg.PushIndex(t, "team/multi:v1", idx)
	c, _ := newCache(t, nil)
	got, err := c.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := mine.Digest(); got.Digest != d.String() || got.Config.Cmd[0] != "mine" {
		t.Errorf("picked %s %v", got.Digest, got.Config.Cmd)
	}
	only := reg.PushIndex(t, "team/foreign:v1", mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &foreign}}))
	_, err = c.Pull(context.Background(), only)
	if err == nil || !strings.Contains(err.Error(), "no image for this node's platform linux/"+host.Architecture) || !strings.Contains(err.Error(), "(it has linux/s390x)") {
		t.Errorf("a list without the platform: %v", err)
	}
}

// Mirrors are asked first; a mirror that fails is skipped for the next
// source; the registry's own answer is the last resort.
func TestPullMirrors(t *testing.T) {
	origin, mirror, dead := imagetest.New(t), imagetest.New(t), imagetest.New(t)
	img := imageOf(t, v1.Config{Cmd: []string{"x"}}, layer(t, entry{name: "f", body: "mirrored"}))
	ref := origin.Push(t, "library/app:v1", img)
	mirror.Push(t, "library/app:v1", img)
	dead.Fail("/v2/", http.StatusBadGateway)
	mirrors := image.Mirrors{}
	for _, m := range []string{origin.Host + "=http://" + dead.Host, origin.Host + "=http://" + mirror.Host} {
		reg, mm, err := image.ParseMirror(m)
		if err != nil {
			t.Fatal(err)
		}
		mirrors.Add(reg, mm)
	}
	c, _ := newCache(t, func(cfg *image.Config) { cfg.Mirrors = mirrors })
	if _, err := c.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if len(origin.BlobGets()) != 0 || len(mirror.BlobGets()) == 0 {
		t.Errorf("origin served %v, mirror %v", origin.BlobGets(), mirror.BlobGets())
	}
	// The mirror loses the image: the origin serves it.
	c2, _ := newCache(t, func(cfg *image.Config) { cfg.Mirrors = mirrors })
	mirror.Fail("/v2/library/app/", http.StatusNotFound)
	if _, err := c2.Pull(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if len(origin.BlobGets()) == 0 {
		t.Error("the origin was not asked after the mirrors failed")
	}
	for _, bad := range []string{"docker.io", "docker.io=ftp://x", "docker.io=https://m/path", "=https://m", "Bad Host!=https://m"} {
		if _, _, err := image.ParseMirror(bad); err == nil {
			t.Errorf("ParseMirror(%q) took it", bad)
		}
	}
	if reg, m, err := image.ParseMirror("index.docker.io=https://mirror.example.com:8443"); err != nil || reg != "docker.io" || m.Host != "mirror.example.com:8443" || m.Insecure {
		t.Errorf("docker hub mirror: %q %+v %v", reg, m, err)
	}
}

// Bad answers become clear errors, and nothing is recorded.
func TestPullErrors(t *testing.T) {
	reg := imagetest.New(t)
	img := imageOf(t, v1.Config{Cmd: []string{"x"}}, layer(t, entry{name: "f", body: "bytes"}))
	ref := reg.Push(t, "team/app:v1", img)
	private := imagetest.New(t, imagetest.WithBasicAuth("u", "p"))
	pref := private.Push(t, "team/app:v1", img)
	corrupt := imagetest.New(t)
	cref := corrupt.Push(t, "team/app:v1", img)
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	corrupt.Corrupt(ld.String())
	slow := imagetest.New(t, imagetest.WithBandwidth(1))
	big, err := random.Layer(1<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	sref := slow.Push(t, "team/app:v1", imageOf(t, v1.Config{Cmd: []string{"x"}}, big))

	c, st := newCache(t, func(cfg *image.Config) { cfg.Timeout = 2 * time.Second })
	missing := strings.Replace(ref, ref[strings.Index(ref, "@sha256:")+8:], strings.Repeat("ab", 32), 1)
	for _, tc := range []struct {
		ref  string
		want string
		is   error
	}{
		{"not a ref", "want repository@sha256", image.ErrBadReference},
		{"ubuntu:22.04", "want repository@sha256", image.ErrBadReference},
		{missing, "no such image on " + reg.Host, nil},
		{pref, "answered 401 Unauthorized: the image is private or the credentials are wrong", nil},
		{cref, "does not match its digest", image.ErrBadLayer},
	} {
		_, err := c.Pull(context.Background(), tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: %v, want %q", tc.ref, err, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.Pull(ctx, sref); err == nil || !strings.Contains(err.Error(), "deadline") && !strings.Contains(err.Error(), "in time") {
		t.Errorf("a registry too slow: %v", err)
	}
	if _, ok := c.LayerBlob(ld); ok {
		t.Error("the corrupt layer was recorded")
	}
	if _, err := st.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	if u := st.Usage(); u.Manifests != 0 {
		t.Errorf("the store holds %d manifests after failed pulls", u.Manifests)
	}
	if ents, _ := os.ReadDir(filepath.Join(t.TempDir())); len(ents) != 0 {
		t.Error("unexpected files")
	}
	// With the right credentials the private image pulls.
	c2, _ := newCache(t, func(cfg *image.Config) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{"`+private.Host+`":{"username":"u","password":"p"}}}`), 0o600)
		cfg.Keychain = image.DockerConfig(dir)
	})
	if _, err := c2.Pull(context.Background(), pref); err != nil {
		t.Errorf("with credentials: %v", err)
	}
}

// Many concurrent pulls of one image fetch each layer once.
func TestConcurrentPullsShareTheWork(t *testing.T) {
	reg := imagetest.New(t)
	img, err := random.Image(64<<10, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "team/rand:v1", img)
	c, _ := newCache(t, nil)
	errs := make(chan error, 8)
	for range 8 {
		go func() { _, err := c.Pull(context.Background(), ref); errs <- err }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for d, n := range reg.BlobGets() {
		if n != 1 {
			t.Errorf("blob %s fetched %d times", d, n)
		}
	}
}

var _ = blob.NoLimit
