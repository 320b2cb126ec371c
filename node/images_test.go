package node

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

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
	spec := market.JobSpec{ID: "in-image", Cards: 1, MaxPriceCNY: 50, Images: []market.ImageRef{{Vendor: "nvidia", Ref: ref}},
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
	if _, err := coord.Submit(context.Background(), market.JobSpec{ID: "no-image", Cards: 1, MaxPriceCNY: 50, Images: []market.ImageRef{{Ref: ref}}}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "no-image", 90*time.Second, market.JobFailed, market.JobSucceeded)
	if rec.State != market.JobFailed || !strings.Contains(rec.Reason, "could not start on 3 suppliers") || !strings.Contains(rec.Reason, "no such image") {
		t.Fatalf("job %s: %s", rec.State, rec.Reason)
	}
}
