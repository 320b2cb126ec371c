//go:build unix

package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/cardedit"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
)

// asNVML passes simulated cards off as NVML's to the node, which then
// gives its jobs' images their device nodes and driver as real ones'
// (the market still knows them simulated: the job allows them).
type asNVML struct{ device.Backend }

func (asNVML) Name() string { return "nvml" }

func (b asNVML) Cards(ctx context.Context) ([]device.Card, error) {
	cards, err := b.Backend.Cards(ctx)
	for i := range cards {
		cards[i].Backend = "nvml"
	}
	return cards, err
}

// A job in an image on a node with NVIDIA cards and no CDI specs gets,
// through the node, its card's device node and the control node (not the
// other card's), the driver's library read-only under
// /usr/local/nvidia/lib64 and LD_LIBRARY_PATH naming it; gpumesh status
// says the cards enter by the built-in rules, and why.
func TestJobInImageGetsItsCard(t *testing.T) {
	root := t.TempDir()
	for i, name := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		p := filepath.Join(root, "dev", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(240, uint32(i)))); err != nil {
			t.Skipf("cannot make device nodes: %v", err)
		}
	}
	for p, content := range map[string]string{
		"proc/driver/nvidia/version":          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n",
		"usr/lib64/libcuda.so.550.54.14":      "libcuda 550.54.14",
		"usr/lib64/libnvidia-ml.so.550.54.14": "libnvidia-ml 550.54.14",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("libcuda.so.550.54.14", filepath.Join(root, "usr/lib64/libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	cdiDir := t.TempDir()
	reg := imagetest.New(t)
	ref := reg.Push(t, "team/job:v1", testImage(t))
	sm := imageMesh(t, func(c *Config) {
		c.Executor.DevDir = filepath.Join(root, "dev")
		c.CardEdits = cardedit.Config{Root: root, CDIDirs: []string{cdiDir}}
		c.Verify = market.VerifyNever // no CUDA here to probe the cards with
		for i, b := range c.Devices {
			c.Devices[i] = asNVML{b}
		}
	}, "", "h100-sxm-80g:2")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(runner)
	sm.waitBook(coord, 2)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "card-in-image", Cards: 1, MaxPriceCNY: 50, Images: []market.ImageRef{{Vendor: "nvidia", Ref: ref}},
		Command: []string{"cards", "/usr/local/nvidia/lib64"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, spec.ID, 60*time.Second, market.JobSucceeded, market.JobFailed)
	var out bytes.Buffer
	if err := coord.Logs(ctx, api.LogRequest{Job: spec.ID}, &out, func() {}); err != nil {
		t.Fatal(err)
	}
	if rec.State != market.JobSucceeded {
		t.Fatalf("job %s: %s\n%s", rec.State, rec.Reason, out.String())
	}
	// The card it was given is the one CUDA_VISIBLE_DEVICES names.
	var given device.Card
	for _, c := range runner.devices.Cards() {
		if strings.Contains(out.String(), "env CUDA_VISIBLE_DEVICES="+c.UUID+"\n") {
			given = c
		}
	}
	if given.ID == "" {
		t.Fatalf("the job names none of the runner's cards:\n%s", out.String())
	}
	mine, other := "/dev/nvidia"+strconv.Itoa(given.Index), "/dev/nvidia"+strconv.Itoa(1-given.Index)
	for _, want := range []string{
		"ls:/usr/local/nvidia/lib64 libcuda.so.1 libcuda.so.550.54.14 libnvidia-ml.so.550.54.14\n",
		"cat:/usr/local/nvidia/lib64/libcuda.so.1 libcuda 550.54.14\n", "rw:/usr/local/nvidia/lib64/libcuda.so.1 false\n",
		"env LD_LIBRARY_PATH=/usr/local/nvidia/lib64\n",
		"open:" + mine + " no such device or address\n", "open:/dev/nvidiactl no such device or address\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the job's output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "open:"+other+" ") {
		t.Errorf("the job sees %s, a card it was not given:\n%s", other, out.String())
	}
	st := runner.imagesStatus()
	if len(st.Cards) != 1 || st.Cards[0].Vendor != "nvidia" || st.Cards[0].Via != "built-in" || !strings.Contains(st.Cards[0].Detail, "no CDI spec in "+cdiDir) {
		t.Errorf("status says %+v", st.Cards)
	}
}
