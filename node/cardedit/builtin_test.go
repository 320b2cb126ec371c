//go:build unix

package cardedit

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

var (
	nv0 = device.Card{ID: "GPU-aaa", UUID: "GPU-aaa", Vendor: device.VendorNVIDIA, Index: 0, Backend: "nvml", PCIBusID: "0000:17:00.0"}
	nv1 = device.Card{ID: "GPU-bbb", UUID: "GPU-bbb", Vendor: device.VendorNVIDIA, Index: 1, Backend: "nvml", PCIBusID: "0000:65:00.0"}
)

func devicesOf(e *Edits) []string {
	var out []string
	for _, d := range e.Devices {
		out = append(out, d.Path+"="+d.Host)
	}
	return out
}

func mountsOf(e *Edits) map[string]string {
	out := map[string]string{}
	for _, m := range e.Mounts {
		out[m.Path] = m.Host
	}
	return out
}

// An NVIDIA card without CDI specs: its own node and the control nodes,
// never the other card's; the loaded driver's compute and utility
// libraries under every name (not an older driver's, not video's, not the
// CUDA runtime's), its programs; both found through the environment.
func TestNVIDIABuiltin(t *testing.T) {
	r := newFakeRoot(t)
	r.nvidiaDriver()
	ed := r.editor()
	e, err := ed.For([]device.Card{nv1}, []device.Card{nv0, nv1}, []string{"LD_LIBRARY_PATH=/opt/img/lib", "PATH=/usr/bin", "HOME=/root"})
	if err != nil {
		t.Fatal(err)
	}
	wantDevs := []string{"/dev/nvidia-uvm=" + r.in("dev/nvidia-uvm"), "/dev/nvidia1=" + r.in("dev/nvidia1"), "/dev/nvidiactl=" + r.in("dev/nvidiactl")}
	if got := devicesOf(e); !reflect.DeepEqual(got, wantDevs) {
		t.Errorf("devices %v\nwant %v", got, wantDevs)
	}
	lib := func(name string) string { return r.in("usr/lib/nvidia/current/" + name) }
	wantMounts := map[string]string{
		"/usr/local/nvidia/lib64/libcuda.so":                            lib("libcuda.so.550.54.14"),
		"/usr/local/nvidia/lib64/libcuda.so.1":                          lib("libcuda.so.550.54.14"),
		"/usr/local/nvidia/lib64/libcuda.so.550.54.14":                  lib("libcuda.so.550.54.14"),
		"/usr/local/nvidia/lib64/libnvidia-ml.so.1":                     lib("libnvidia-ml.so.550.54.14"),
		"/usr/local/nvidia/lib64/libnvidia-ml.so.550.54.14":             lib("libnvidia-ml.so.550.54.14"),
		"/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1":         lib("libnvidia-ptxjitcompiler.so.550.54.14"),
		"/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.550.54.14": lib("libnvidia-ptxjitcompiler.so.550.54.14"),
		"/usr/local/nvidia/bin/nvidia-smi":                              r.in("usr/bin/nvidia-smi"),
		"/usr/local/nvidia/bin/nvidia-debugdump":                        r.in("usr/bin/nvidia-debugdump"),
	}
	if got := mountsOf(e); !reflect.DeepEqual(got, wantMounts) {
		t.Errorf("mounts %v\nwant %v", got, wantMounts)
	}
	wantEnv := []string{"LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/opt/img/lib", "PATH=/usr/local/nvidia/bin:/usr/bin"}
	if !reflect.DeepEqual(e.Env, wantEnv) {
		t.Errorf("env %v, want %v", e.Env, wantEnv)
	}
	if e.Hooks != nil || len(e.Groups) != 0 {
		t.Errorf("built-in edits with hooks %v or groups %v", e.Hooks, e.Groups)
	}
	if len(e.Paths) != 1 || e.Paths[0].Via != ViaBuiltin || !strings.Contains(e.Paths[0].Detail, "no CDI spec in "+r.cdi+" names nvidia.com devices") {
		t.Errorf("paths %+v", e.Paths)
	}
}

// NVIDIA_DRIVER_CAPABILITIES picks the driver's files; an image whose
// LD_LIBRARY_PATH and PATH already name the directories keeps them as
// they are (CUDA images do); without PATH the default is extended.
func TestNVIDIACapabilities(t *testing.T) {
	r := newFakeRoot(t)
	r.nvidiaDriver()
	ed := r.editor()
	e, err := ed.For([]device.Card{nv0}, []device.Card{nv0, nv1}, []string{"NVIDIA_DRIVER_CAPABILITIES=video, utility", "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"})
	if err != nil {
		t.Fatal(err)
	}
	got := mountsOf(e)
	for _, want := range []string{"/usr/local/nvidia/lib64/libnvidia-encode.so.1", "/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/usr/local/nvidia/bin/nvidia-smi"} {
		if got[want] == "" {
			t.Errorf("%s missing: %v", want, got)
		}
	}
	if got["/usr/local/nvidia/lib64/libcuda.so.1"] != "" {
		t.Errorf("libcuda without the compute capability")
	}
	wantEnv := []string{"LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64", "PATH=/usr/local/nvidia/bin:" + DefaultPath}
	if !reflect.DeepEqual(e.Env, wantEnv) {
		t.Errorf("env %v, want %v", e.Env, wantEnv)
	}
	if d := devicesOf(e); len(d) != 3 || !strings.HasPrefix(d[1], "/dev/nvidia0=") {
		t.Errorf("devices %v", d)
	}
}

// Without /proc/driver/nvidia/version (a driver not loaded, WSL), every
// version of a library is taken.
func TestNVIDIAUnknownVersion(t *testing.T) {
	r := newFakeRoot(t)
	r.nvidiaDriver()
	if err := os.RemoveAll(r.in("proc")); err != nil {
		t.Fatal(err)
	}
	e, err := r.editor().For([]device.Card{nv0}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mountsOf(e)["/usr/local/nvidia/lib64/libcuda.so.470.57.02"] == "" {
		t.Errorf("with no version known, an older driver's library is left out: %v", mountsOf(e))
	}
}

// AMD: /dev/kfd and the card's render node, found from its PCI device in
// sysfs; not the other card's, not the card nodes; no files, no variables
// (ROCm is the image's). Hygon adds /dev/mkfd and /opt/hyhal.
func TestAMDAndHygonBuiltin(t *testing.T) {
	r := newFakeRoot(t)
	r.drm("0000:03:00.0", "card0", "renderD128")
	r.drm("0000:83:00.0", "card1", "renderD129")
	r.devs("kfd", "mkfd", "dri/card0", "dri/card1", "dri/renderD128", "dri/renderD129")
	r.mkdir("opt/hyhal/lib")
	a0 := device.Card{ID: "amd-0", Vendor: device.VendorAMD, Index: 0, Backend: "amd-smi", PCIBusID: "0000:03:00.0"}
	a1 := device.Card{ID: "amd-1", Vendor: device.VendorAMD, Index: 1, Backend: "amd-smi", PCIBusID: "0000:83:00.0"}
	ed := r.editor()
	e, err := ed.For([]device.Card{a1}, []device.Card{a0, a1}, []string{"PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/dri/renderD129=" + r.in("dev/dri/renderD129"), "/dev/kfd=" + r.in("dev/kfd")}
	if got := devicesOf(e); !reflect.DeepEqual(got, want) {
		t.Errorf("devices %v, want %v", got, want)
	}
	if len(e.Mounts) != 0 || len(e.Env) != 0 {
		t.Errorf("AMD mounts %v env %v", e.Mounts, e.Env)
	}
	h0, h1 := a0, a1
	h0.Vendor, h1.Vendor, h0.ID, h1.ID = device.VendorHygon, device.VendorHygon, "dcu-0", "dcu-1"
	e, err = ed.For([]device.Card{h0}, []device.Card{h0, h1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"/dev/dri/renderD128=" + r.in("dev/dri/renderD128"), "/dev/kfd=" + r.in("dev/kfd"), "/dev/mkfd=" + r.in("dev/mkfd")}
	if got := devicesOf(e); !reflect.DeepEqual(got, want) {
		t.Errorf("Hygon devices %v, want %v", got, want)
	}
	if got := mountsOf(e); !reflect.DeepEqual(got, map[string]string{"/opt/hyhal": r.in("opt/hyhal")}) {
		t.Errorf("Hygon mounts %v", got)
	}
}

// Ascend: the card's davinci node and the three control nodes; the
// driver's directories and files at their own paths, its libraries in
// LD_LIBRARY_PATH. Moore Threads and Kunlunxin: their nodes, libraries
// and tools under /usr/local/gpumesh/<vendor>.
func TestOtherVendorsBuiltin(t *testing.T) {
	r := newFakeRoot(t)
	r.devs("davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc", "mtgpu.0", "mtgpu.1", "xpu0", "xpu1", "xpuctrl")
	r.mkdir("usr/local/Ascend/driver/lib64/common")
	r.mkdir("usr/local/Ascend/driver/lib64/driver")
	r.file("usr/local/Ascend/driver/version.info", "Version=24.1")
	r.mkdir("usr/local/dcmi")
	r.file("usr/local/bin/npu-smi", "#!")
	r.file("etc/ascend_install.info", "Driver_Install_Path_Param=/usr/local/Ascend")
	r.file("usr/lib64/libmusa.so.3.0.0", "ELF")
	r.link("usr/lib64/libmusa.so.3", "libmusa.so.3.0.0")
	r.file("usr/bin/mthreads-gmi", "#!")
	r.file("usr/lib64/libxpuml.so", "ELF")
	r.file("usr/local/bin/xpu-smi", "#!")
	ed := r.editor()
	card := func(v device.Vendor, i int) device.Card {
		return device.Card{ID: string(v) + string(rune('0'+i)), Vendor: v, Index: i, Backend: "tool"}
	}
	all := []device.Card{card(device.VendorHuawei, 0), card(device.VendorHuawei, 1), card(device.VendorMThreads, 0),
		card(device.VendorMThreads, 1), card(device.VendorKunlunxin, 0), card(device.VendorKunlunxin, 1)}

	e, err := ed.For([]device.Card{all[1]}, all, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/davinci1=" + r.in("dev/davinci1"), "/dev/davinci_manager=" + r.in("dev/davinci_manager"),
		"/dev/devmm_svm=" + r.in("dev/devmm_svm"), "/dev/hisi_hdc=" + r.in("dev/hisi_hdc")}
	if got := devicesOf(e); !reflect.DeepEqual(got, want) {
		t.Errorf("Ascend devices %v, want %v", got, want)
	}
	wantMounts := map[string]string{}
	for _, p := range []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/dcmi", "/usr/local/bin/npu-smi", "/etc/ascend_install.info"} {
		wantMounts[p] = r.in(p)
	}
	if got := mountsOf(e); !reflect.DeepEqual(got, wantMounts) {
		t.Errorf("Ascend mounts %v, want %v", got, wantMounts)
	}
	if want := []string{"LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64/driver"}; !reflect.DeepEqual(e.Env, want) {
		t.Errorf("Ascend env %v, want %v", e.Env, want)
	}

	e, err = ed.For([]device.Card{all[2], all[5]}, all, []string{"PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"/dev/mtgpu.0=" + r.in("dev/mtgpu.0"), "/dev/xpu1=" + r.in("dev/xpu1"), "/dev/xpuctrl=" + r.in("dev/xpuctrl")}
	if got := devicesOf(e); !reflect.DeepEqual(got, want) {
		t.Errorf("Moore Threads and Kunlunxin devices %v, want %v", got, want)
	}
	wantMounts = map[string]string{
		"/usr/local/gpumesh/mthreads/lib/libmusa.so.3":     r.in("usr/lib64/libmusa.so.3.0.0"),
		"/usr/local/gpumesh/mthreads/lib/libmusa.so.3.0.0": r.in("usr/lib64/libmusa.so.3.0.0"),
		"/usr/local/gpumesh/mthreads/bin/mthreads-gmi":     r.in("usr/bin/mthreads-gmi"),
		"/usr/local/gpumesh/kunlunxin/lib/libxpuml.so":     r.in("usr/lib64/libxpuml.so"),
		"/usr/local/gpumesh/kunlunxin/bin/xpu-smi":         r.in("usr/local/bin/xpu-smi"),
	}
	if got := mountsOf(e); !reflect.DeepEqual(got, wantMounts) {
		t.Errorf("mounts %v, want %v", got, wantMounts)
	}
	wantEnv := []string{"LD_LIBRARY_PATH=/usr/local/gpumesh/mthreads/lib:/usr/local/gpumesh/kunlunxin/lib",
		"PATH=/usr/local/gpumesh/mthreads/bin:/usr/local/gpumesh/kunlunxin/bin:/bin"}
	if !reflect.DeepEqual(e.Env, wantEnv) {
		t.Errorf("env %v, want %v", e.Env, wantEnv)
	}
	if len(e.Paths) != 2 || e.Paths[0].Vendor != device.VendorKunlunxin || e.Paths[1].Vendor != device.VendorMThreads {
		t.Errorf("paths %+v", e.Paths)
	}
}

// Simulated cards have no nodes and no driver: nothing enters.
func TestSimulatedCardsGetNothing(t *testing.T) {
	r := newFakeRoot(t)
	r.nvidiaDriver()
	sim := nv0
	sim.Backend = "sim"
	e, err := r.editor().For([]device.Card{sim}, []device.Card{sim, nv1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Devices)+len(e.Mounts)+len(e.Env)+len(e.Paths) != 0 {
		t.Errorf("edits %+v", e)
	}
}

// DeviceNames (what a host-command job's sandbox gets) is the union of
// the cards' nodes, sorted.
func TestDeviceNames(t *testing.T) {
	r := newFakeRoot(t)
	r.drm("0000:83:00.0", "card1", "renderD129")
	r.devs("nvidia0", "nvidia1", "nvidiactl", "kfd", "dri/renderD129")
	a1 := device.Card{ID: "amd-1", Vendor: device.VendorAMD, Index: 1, Backend: "amd-smi", PCIBusID: "0000:83:00.0"}
	got := DeviceNames(r.in("dev"), r.in("sys"), []device.Card{nv1, a1, nv0})
	want := []string{"dri/renderD129", "kfd", "nvidia0", "nvidia1", "nvidiactl"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DeviceNames = %v, want %v", got, want)
	}
}

// Bad configuration is refused, naming the field.
func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{{Root: "relative"}, {DevDir: "dev"}, {CDIDirs: []string{"etc/cdi"}}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
