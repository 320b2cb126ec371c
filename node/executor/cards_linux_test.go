package executor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/cardedit"
)

// The tests in this file give jobs in images their cards' device nodes
// and driver files (node/cardedit) under the real OCI runtime, on a fake
// driver tree: the device nodes are character devices of major 240,
// which no driver serves, so that opening one inside the container says
// "no such device or address" once its permissions and the container's
// device cgroup let the job through. They skip like the other image
// tests, and without root.

var (
	cardNV0  = device.Card{ID: "GPU-aaa", UUID: "GPU-aaa", Vendor: device.VendorNVIDIA, Index: 0, Backend: "nvml"}
	cardNV1  = device.Card{ID: "GPU-bbb", UUID: "GPU-bbb", Vendor: device.VendorNVIDIA, Index: 1, Backend: "nvml"}
	cardAMD0 = device.Card{ID: "amd-0", Vendor: device.VendorAMD, Index: 0, Backend: "amd-smi", PCIBusID: "0000:03:00.0"}
	cardAMD1 = device.Card{ID: "amd-1", Vendor: device.VendorAMD, Index: 1, Backend: "amd-smi", PCIBusID: "0000:83:00.0"}
)

// noDriver is what opening a node of major 240 says.
const noDriver = "no such device or address"

// driverTree makes a node's tree under a temporary root: two NVIDIA
// cards' nodes and the control nodes (0666, as NVIDIA's are), two AMD
// cards' render nodes and kfd (0660 root:root, as a render group's would
// be to a user outside it) with their sysfs entries, and NVIDIA's driver
// 550.54.14: two libraries under their names and links, and nvidia-smi
// (the test entrypoint, so that it runs in the container).
func driverTree(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	node := func(name string, minor uint32, perm uint32) {
		p := filepath.Join(root, "dev", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFCHR|perm, int(unix.Mkdev(240, minor))); err != nil {
			t.Skipf("cannot make device nodes: %v", err)
		}
		if err := os.Chmod(p, os.FileMode(perm)); err != nil {
			t.Fatal(err)
		}
	}
	node("nvidia0", 0, 0o666)
	node("nvidia1", 1, 0o666)
	node("nvidiactl", 255, 0o666)
	node("nvidia-uvm", 254, 0o666)
	node("kfd", 100, 0o660)
	node("dri/renderD128", 128, 0o660)
	node("dri/renderD129", 129, 0o660)
	for bus, r := range map[string]string{"0000:03:00.0": "renderD128", "0000:83:00.0": "renderD129"} {
		if err := os.MkdirAll(filepath.Join(root, "sys/bus/pci/devices", bus, "drm", r), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, content string, mode os.FileMode) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n", 0o644)
	for _, lib := range []string{"libcuda.so", "libnvidia-ml.so"} {
		write("usr/lib64/"+lib+".550.54.14", lib+" 550.54.14", 0o644)
		if err := os.Symlink(lib+".550.54.14", filepath.Join(root, "usr/lib64", lib+".1")); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile(imageJob(t))
	if err != nil {
		t.Fatal(err)
	}
	write("usr/bin/nvidia-smi", string(bin), 0o755)
	return root
}

// opened returns the device nodes a report says it opened, with what
// opening said.
func opened(got map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range got {
		if p, ok := strings.CutPrefix(k, "open:"); ok {
			out[p] = v
		}
	}
	return out
}

// A job in an image on one NVIDIA card and one AMD card, with no CDI
// specs on the node, sees exactly those cards' device nodes and their
// vendors' control nodes — made for it, so that it opens them as the
// image's user even where the node's are its render group's — and not
// the other two cards'; NVIDIA's driver libraries read-only under every
// name in /usr/local/nvidia/lib64, found through LD_LIBRARY_PATH, and
// nvidia-smi in PATH, which gpumesh exec runs from there.
func TestImageJobSeesExactlyItsCards(t *testing.T) {
	root := driverTree(t)
	ex := containerized(t, nil)
	ed, err := cardedit.New(cardedit.Config{Root: root, CDIDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	imageEnv := []string{"PATH=/bin"}
	edits, err := ed.For([]device.Card{cardNV1, cardAMD1}, []device.Card{cardNV0, cardNV1, cardAMD0, cardAMD1}, imageEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range edits.Paths {
		if p.Via != cardedit.ViaBuiltin {
			t.Fatalf("paths %+v, want built-in", edits.Paths)
		}
	}
	a := Attempt{JobID: "cards", DeviceEnv: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-bbb", "ROCR_VISIBLE_DEVICES": "1"},
		Image: &Container{Rootfs: testRootfs(t, ex.Config().ContainerIDBase), Args: []string{"/bin/job", "sleep"}, Env: imageEnv,
			Cwd: "/app", UID: 1000, GID: 1000, Cards: edits}}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(StopCancelled)
	waitFor(t, 60*time.Second, func() bool {
		return strings.Contains(readAll(t, ex, a.Name(), Stdout), "node-file") || !isRunning(r)
	})
	var out strings.Builder
	p, err := r.Exec(ExecRequest{Command: []string{"nvidia-smi", "cards", "/usr/local/nvidia/lib64", "/usr/local/nvidia/bin"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec nvidia-smi: %v\nstderr of the job: %s", err, readAll(t, ex, a.Name(), Stderr))
	}
	if code, sig := p.Wait(); code != 0 || sig != "" {
		t.Fatalf("nvidia-smi exited %d %s: %s", code, sig, out.String())
	}
	got := report(out.String())
	for k, want := range map[string]string{
		"ls:/usr/local/nvidia/lib64":                            "libcuda.so.1 libcuda.so.550.54.14 libnvidia-ml.so.1 libnvidia-ml.so.550.54.14",
		"ls:/usr/local/nvidia/bin":                              "nvidia-smi",
		"cat:/usr/local/nvidia/lib64/libcuda.so.1":              "libcuda.so 550.54.14",
		"cat:/usr/local/nvidia/lib64/libnvidia-ml.so.550.54.14": "libnvidia-ml.so 550.54.14",
		"rw:/usr/local/nvidia/lib64/libcuda.so.1":               "false",
		"rw:/usr/local/nvidia/bin/nvidia-smi":                   "false",
		"env LD_LIBRARY_PATH":                                   "/usr/local/nvidia/lib64",
		"env PATH":                                              "/usr/local/nvidia/bin:/bin",
		"env CUDA_VISIBLE_DEVICES":                              "GPU-bbb",
		"uid":                                                   "1000",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	wantOpen := map[string]string{"/dev/nvidia1": noDriver, "/dev/nvidiactl": noDriver, "/dev/nvidia-uvm": noDriver,
		"/dev/kfd": noDriver, "/dev/dri/renderD129": noDriver}
	if o := opened(got); !mapsEqual(o, wantOpen) {
		t.Errorf("the job's device nodes:\n%v\nwant\n%v\n%s", o, wantOpen, out.String())
	}
	if devs := strings.Fields(got["dev"]); slices.Contains(devs, "nvidia0") || !slices.Contains(devs, "nvidia1") {
		t.Errorf("a card not in the job is in its /dev: %v", devs)
	}
}

// Where the supplier's CDI spec names the cards, they enter through it:
// the spec's device nodes, library, variable and createContainer hook
// (which runs, and reads the bundle as the container's root, as
// nvidia-ctk's hooks do); nothing of the other card.
func TestImageJobCardsThroughCDI(t *testing.T) {
	root := driverTree(t)
	ex := containerized(t, nil)
	hookDir, err := os.MkdirTemp("", "cdihook")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hookDir)
	if err := os.Chmod(hookDir, 0o777); err != nil { // the hook runs as the container's root
		t.Fatal(err)
	}
	a := Attempt{JobID: "cdi", DeviceEnv: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-bbb"}}
	bundle := filepath.Join(ex.Config().ContainerDir, "gpumesh-"+a.Name())
	cdiDir := t.TempDir()
	spec := `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia0, hostPath: ` + root + `/dev/nvidia0}
- name: "1"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia1, hostPath: ` + root + `/dev/nvidia1}
containerEdits:
  env: [FROM_CDI=yes]
  deviceNodes:
  - {path: /dev/nvidiactl, hostPath: ` + root + `/dev/nvidiactl}
  mounts:
  - {hostPath: ` + root + `/usr/lib64/libcuda.so.550.54.14, containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14, options: [ro, nosuid, nodev, bind]}
  hooks:
  - hookName: createContainer
    path: /bin/sh
    args: [sh, -c, "cat >/dev/null && cat ` + bundle + `/config.json >/dev/null && touch ` + hookDir + `/ran"]
`
	if err := os.WriteFile(filepath.Join(cdiDir, "nvidia.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	ed, err := cardedit.New(cardedit.Config{Root: root, CDIDirs: []string{cdiDir}})
	if err != nil {
		t.Fatal(err)
	}
	edits, err := ed.For([]device.Card{cardNV1}, []device.Card{cardNV0, cardNV1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(edits.Paths) != 1 || edits.Paths[0].Via != cardedit.ViaCDI {
		t.Fatalf("paths %+v, want CDI", edits.Paths)
	}
	a.Image = &Container{Rootfs: testRootfs(t, ex.Config().ContainerIDBase), Args: []string{"/bin/job", "cards", "/usr/lib/x86_64-linux-gnu"},
		Cwd: "/", UID: 1000, GID: 1000, Cards: edits}
	r, err := ex.Start(a)
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, r, 60*time.Second)
	out := readAll(t, ex, a.Name(), Stdout)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", res.ExitCode, out, readAll(t, ex, a.Name(), Stderr))
	}
	got := report(out)
	for k, want := range map[string]string{
		"ls:/usr/lib/x86_64-linux-gnu":                       "libcuda.so.550.54.14",
		"cat:/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14": "libcuda.so 550.54.14",
		"rw:/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14":  "false",
		"env FROM_CDI":             "yes",
		"env CUDA_VISIBLE_DEVICES": "GPU-bbb",
		"env LD_LIBRARY_PATH":      "",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	wantOpen := map[string]string{"/dev/nvidia1": noDriver, "/dev/nvidiactl": noDriver}
	if o := opened(got); !mapsEqual(o, wantOpen) {
		t.Errorf("the job's device nodes %v, want %v", o, wantOpen)
	}
	if _, err := os.Stat(filepath.Join(hookDir, "ran")); err != nil {
		t.Errorf("the CDI hook did not run (or could not read the bundle): %v", err)
	}
}

// Cards' edits that place a file in the container's own directories, or
// a device outside /dev, are refused before anything starts.
func TestImageJobBadCardEdits(t *testing.T) {
	ex, err := New(Config{Root: t.TempDir(), Isolation: IsolationProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	for _, e := range []cardedit.Edits{
		{Mounts: []cardedit.Mount{{Host: "/usr/lib/libcuda.so", Path: "/gpumesh/work/libcuda.so"}}},
		{Mounts: []cardedit.Mount{{Host: "/usr/lib/libcuda.so", Path: "/"}}},
		{Mounts: []cardedit.Mount{{Host: "lib", Path: "/usr/lib/libcuda.so"}}},
		{Devices: []cardedit.Device{{Path: "/etc/nvidia0", Host: "/dev/nvidia0"}}},
		{Devices: []cardedit.Device{{Path: "/dev/null", Host: "/dev/nvidia0"}}},
		{Devices: []cardedit.Device{{Path: "/dev/../etc/x", Host: "/dev/nvidia0"}}},
		{Env: []string{"NOVALUE"}},
	} {
		_, err := ex.Start(Attempt{JobID: "bad", Image: &Container{Rootfs: "/nonexistent", Args: []string{"/bin/job"}, Cwd: "/", Cards: &e}})
		if err == nil || !strings.Contains(err.Error(), "the cards'") {
			t.Errorf("%+v: %v", e, err)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func isRunning(r *Run) bool {
	select {
	case <-r.Done():
		return false
	default:
		return true
	}
}
