package node

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"archive/tar"
	"io"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
)

var (
	jobBinOnce sync.Once
	jobBin     []byte
	jobBinErr  error
)

// imageJobBinary is node/executor/testdata/imagejob built static: the
// entrypoint of the test images, which reports what the job sees.
func imageJobBinary(t *testing.T) []byte {
	t.Helper()
	jobBinOnce.Do(func() {
		out := filepath.Join(t.TempDir(), "job")
		cmd := exec.Command("go", "build", "-o", out, "./executor/testdata/imagejob")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			jobBinErr = err
			jobBin = b
			return
		}
		jobBin, jobBinErr = os.ReadFile(out)
	})
	if jobBinErr != nil {
		t.Fatalf("building the test image's entrypoint: %v\n%s", jobBinErr, jobBin)
	}
	return jobBin
}

// testImage is an image whose entrypoint is the report program: Cmd
// "default", an env, a working dir and a user of its own; extra adds a
// layer of random bytes (a bigger image).
func testImage(t *testing.T, extra ...v1.Layer) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, body []byte, typ byte) {
		h := &tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: typ}
		if typ == tar.TypeDir {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	add("bin/", 0o755, nil, tar.TypeDir)
	add("bin/job", 0o755, imageJobBinary(t), tar.TypeReg)
	add("etc/", 0o755, nil, tar.TypeDir)
	add("etc/passwd", 0o644, []byte("root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n"), tar.TypeReg)
	add("app/", 0o777, nil, tar.TypeDir)
	tw.Close()
	b := buf.Bytes()
	base, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, append([]v1.Layer{base}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", image.HostPlatform().Architecture
	cf.Config = v1.Config{Entrypoint: []string{"/bin/job"}, Cmd: []string{"default"}, Env: []string{"FROM_IMAGE=image", "PATH=/bin"},
		WorkingDir: "/app", User: "app"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// imageMesh is a mesh of sandboxed nodes that run images, or a skip.
func imageMesh(t *testing.T, tweak func(*Config), specs ...string) *simMesh {
	t.Helper()
	requireSandbox(t)
	ex, err := executor.New(executor.Config{Root: t.TempDir(), Isolation: executor.IsolationSandbox, Runtime: executor.RuntimeAuto})
	if err != nil {
		t.Fatal(err)
	}
	caps := ex.Capabilities()
	ex.Close()
	if caps.Runtime == "" {
		t.Skipf("no image runs here: %s", caps.ImagesReason)
	}
	return newSimMeshWith(t, func(c *Config) {
		c.Executor.Isolation = executor.IsolationSandbox
		c.Executor.Runtime = caps.Runtime
		if tweak != nil {
			tweak(c)
		}
	}, specs...)
}

// A job in an image, submitted through any node, runs the image's
// entrypoint with the job's command in place of its Cmd, the image's
// env (under the job's), working directory and user, and sees its card
// through the vendor's variable.
func TestJobRunsInItsImage(t *testing.T) {
	reg := imagetest.New(t)
	ref := reg.Push(t, "team/job:v1", testImage(t))
	sm := imageMesh(t, nil, "", "h100-sxm-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 1)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "in-image", Cards: 1, MaxPriceCNY: 50, Images: []market.ImageRef{{Vendor: "nvidia", Ref: ref}},
		Command: []string{"report", "from-spec"}, Env: map[string]string{"FROM_JOB": "job"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "in-image", 60*time.Second, market.JobSucceeded, market.JobFailed)
	var out bytes.Buffer
	if err := coord.Logs(ctx, api.LogRequest{Job: "in-image"}, &out, func() {}); err != nil {
		t.Fatal(err)
	}
	if rec.State != market.JobSucceeded {
		t.Fatalf("job %s: %s\n%s", rec.State, rec.Reason, out.String())
	}
	for _, want := range []string{"args report from-spec\n", "uid 1000\n", "cwd /app\n", "env FROM_IMAGE=image\n", "env FROM_JOB=job\n",
		"env CUDA_VISIBLE_DEVICES=GPU-", "env GPUMESH_WORK_DIR=/gpumesh/work\n", "write layer true\n", "node-file false\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the job's output lacks %q:\n%s", want, out.String())
		}
	}
	if s := sm.nodes[1].images.Stats(); s.RegistryLayers != 1 || s.Unpacks != 1 {
		t.Errorf("the runner's image stats: %+v", s)
	}
	// What it left in its working directory is kept, and the directory
	// then leaves the runner's disk.
	p, _ := latestPlacement(rec, 0)
	if p.Outputs == "" {
		t.Errorf("the runner kept no outputs of the job in its image")
	}
	if _, err := os.Stat(filepath.Join(sm.nodes[1].exec.Root(), attemptName("in-image", 0, p.Epoch), "work")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runner still holds the working directory: %v", err)
	}
}

// A job whose image cannot be pulled on its supplier ends not_started
// there and, with no other supplier, fails saying why.
func TestJobWhoseImageIsMissingFails(t *testing.T) {
	reg := imagetest.New(t)
	ref := reg.Push(t, "team/job:v1", testImage(t))
	reg.Fail("/v2/team/job/", 404)
	sm := imageMesh(t, nil, "", "h100-sxm-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 1)
	if _, err := coord.Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "no-image", Cards: 1, MaxPriceCNY: 50, Images: []market.ImageRef{{Ref: ref}}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "no-image", 90*time.Second, market.JobFailed, market.JobSucceeded)
	if rec.State != market.JobFailed || !strings.Contains(rec.Reason, "could not start on 3 suppliers") || !strings.Contains(rec.Reason, "no such image") {
		t.Fatalf("job %s: %s", rec.State, rec.Reason)
	}
}

// Three nodes of one mesh start one image at once (no runtime needed:
// the pulls alone): the registry serves each layer once, the other nodes
// fetch it from the one that pulled it, and status and /metrics say how
// many bytes came from peers and from the registry.
func TestMeshPullsEachLayerOnce(t *testing.T) {
	reg := imagetest.New(t)
	img, err := random.Image(1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "team/big:v1", img)
	sm := newSimMesh(t, "", "", "")
	sm.linkAll()
	var wg sync.WaitGroup
	errs := make([]error, len(sm.nodes))
	for i, n := range sm.nodes {
		wg.Go(func() { _, errs[i] = n.images.Pull(context.Background(), ref) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	layers, _ := img.Layers()
	var total int64
	for _, l := range layers {
		d, _ := l.Digest()
		size, _ := l.Size()
		total += size
		if n := reg.BlobGets()[d.String()]; n != 1 {
			t.Errorf("the registry served layer %s %d times", d.Hex[:12], n)
		}
	}
	var peerBytes, registryBytes int64
	for _, n := range sm.nodes {
		st := n.imagesStatus()
		peerBytes += st.PeerBytes
		registryBytes += st.RegistryBytes
	}
	if registryBytes != total || peerBytes != 2*total {
		t.Errorf("bytes from the registry %d, from peers %d; want %d and %d", registryBytes, peerBytes, total, 2*total)
	}
	// A node's /metrics says the same as its status.
	for _, n := range sm.nodes {
		st := n.imagesStatus()
		want := []string{
			`gpumesh_image_layer_bytes_total{source="peer"} ` + strconv.FormatFloat(float64(st.PeerBytes), 'g', -1, 64),
			`gpumesh_image_layer_bytes_total{source="registry"} ` + strconv.FormatFloat(float64(st.RegistryBytes), 'g', -1, 64),
		}
		eventually(t, 30*time.Second, "/metrics shows the node's layer bytes", func() bool {
			rec := httptest.NewRecorder()
			n.obs.m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			for _, w := range want {
				if !strings.Contains(rec.Body.String(), w) {
					return false
				}
			}
			return true
		})
	}
}

// Three suppliers run the shares of one job in one image: each runs it,
// and the registry serves each layer about once (the suppliers fetch it
// from each other).
func TestThreeSuppliersRunOneImage(t *testing.T) {
	big, err := random.Layer(2<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	reg := imagetest.New(t)
	img := testImage(t, big)
	ref := reg.Push(t, "team/job:v1", img)
	sm := imageMesh(t, nil, "", "h100-sxm-80g:1", "h100-sxm-80g:1", "h100-sxm-80g:1")
	sm.linkAll()
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 3)
	spec := market.JobSpec{AllowSimulated: true, ID: "three", Cards: 3, MaxPriceCNY: 50, Images: []market.ImageRef{{Ref: ref}}, Command: []string{"report"}}
	if _, err := coord.Submit(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "three", 90*time.Second, market.JobSucceeded, market.JobFailed)
	if rec.State != market.JobSucceeded {
		t.Fatalf("job %s: %s", rec.State, rec.Reason)
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		d, _ := l.Digest()
		if n := reg.BlobGets()[d.String()]; n != 1 {
			t.Errorf("the registry served layer %s %d times, want once", d.Hex[:12], n)
		}
	}
}

// linkAll connects every pair of nodes: the simulated network makes a
// link on first contact through membership, which may not have happened
// yet between two nodes that learned of each other by gossip (on a real
// network the node dials the addresses membership gives).
func (sm *simMesh) linkAll() {
	sm.t.Helper()
	for i, a := range sm.nodes {
		for _, b := range sm.nodes[i+1:] {
			if err := sm.net.Connect(a.ID(), b.ID()); err != nil {
				sm.t.Fatal(err)
			}
		}
	}
}
