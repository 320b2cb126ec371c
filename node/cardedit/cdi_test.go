//go:build unix

package cardedit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

// cdiRoot is a fake root with real NVIDIA device nodes (CDI wants device
// nodes; root only) and the driver's files.
func cdiRoot(t *testing.T) *fakeRoot {
	r := newFakeRoot(t)
	r.node("nvidia0", 195, 0)
	r.node("nvidia1", 195, 1)
	r.node("nvidiactl", 195, 255)
	r.file("usr/lib/nvidia/current/libcuda.so.550.54.14", "ELF")
	r.file("usr/lib/nvidia/current/libnvidia-ml.so.550.54.14", "ELF")
	r.file("etc/ld.so.conf", "/usr/lib/nvidia/current\n")
	r.file("usr/bin/nvidia-smi", "#!")
	r.file("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build\n")
	return r
}

// spec writes a CDI spec file in the root's CDI directory. devices maps a
// device's name to its device nodes (under /dev); the spec's own edits
// hold the control node, a library, a variable and a hook, as
// nvidia-ctk's do.
func (r *fakeRoot) spec(file string, devices [][2]string) string {
	r.t.Helper()
	var b strings.Builder
	b.WriteString("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n")
	for _, d := range devices {
		b.WriteString("- name: \"" + d[0] + "\"\n  containerEdits:\n    deviceNodes:\n")
		for _, n := range strings.Fields(d[1]) {
			b.WriteString("    - path: /dev/" + n + "\n      hostPath: " + r.in("dev/"+n) + "\n")
		}
	}
	b.WriteString(`containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: ` + r.in("dev/nvidiactl") + `
  mounts:
  - hostPath: ` + r.in("usr/lib/nvidia/current/libcuda.so.550.54.14") + `
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14
    options: [ro, nosuid, nodev, bind]
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args: [nvidia-ctk, hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
`)
	p := filepath.Join(r.cdi, file)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// A card the supplier's CDI spec names (by index, as nvidia-ctk does by
// default) enters through it: the CDI library applies the spec's and the
// device's edits — the device's own node and the spec's control node, its
// library at the spec's path, its variable and hook — and nothing of the
// other card.
func TestCDIApplied(t *testing.T) {
	r := cdiRoot(t)
	file := r.spec("nvidia.yaml", [][2]string{{"0", "nvidia0"}, {"1", "nvidia1"}})
	e, err := r.editor().For([]device.Card{nv1}, []device.Card{nv0, nv1}, []string{"PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/nvidia1=" + r.in("dev/nvidia1"), "/dev/nvidiactl=" + r.in("dev/nvidiactl")}
	if got := devicesOf(e); !reflect.DeepEqual(got, want) {
		t.Errorf("devices %v, want %v", got, want)
	}
	if got := mountsOf(e); !reflect.DeepEqual(got, map[string]string{"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14": r.in("usr/lib/nvidia/current/libcuda.so.550.54.14")}) {
		t.Errorf("mounts %v", got)
	}
	if !reflect.DeepEqual(e.Env, []string{"NVIDIA_VISIBLE_DEVICES=void"}) {
		t.Errorf("env %v", e.Env)
	}
	if e.Hooks == nil || len(e.Hooks.CreateContainer) != 1 || e.Hooks.CreateContainer[0].Path != "/usr/bin/nvidia-ctk" ||
		!reflect.DeepEqual(e.Hooks.CreateContainer[0].Args[:4], []string{"nvidia-ctk", "hook", "update-ldcache", "--folder"}) {
		t.Errorf("hooks %+v", e.Hooks)
	}
	wantPath := []Path{{Vendor: device.VendorNVIDIA, Via: ViaCDI, Detail: "nvidia.com/gpu=1 from " + file}}
	if !reflect.DeepEqual(e.Paths, wantPath) {
		t.Errorf("paths %+v, want %+v", e.Paths, wantPath)
	}
}

// A spec that names its devices by UUID resolves them so too.
func TestCDIByUUID(t *testing.T) {
	r := cdiRoot(t)
	r.spec("nvidia.yaml", [][2]string{{"GPU-aaa", "nvidia0"}, {"GPU-bbb", "nvidia1"}})
	e, err := r.editor().For([]device.Card{nv0}, []device.Card{nv0, nv1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Paths) != 1 || e.Paths[0].Via != ViaCDI || !strings.HasPrefix(e.Paths[0].Detail, "nvidia.com/gpu=GPU-aaa from ") {
		t.Errorf("paths %+v", e.Paths)
	}
	if got := devicesOf(e); len(got) != 2 || !strings.HasPrefix(got[0], "/dev/nvidia0=") {
		t.Errorf("devices %v", got)
	}
}

// A spec that would show the job a card it was not given, or that does
// not name one of its cards, is passed over: the cards enter by the
// built-in rules, and the path says why.
func TestCDIPassedOver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		devices [][2]string
		why     string
	}{
		{"shows another card", [][2]string{{"0", "nvidia0"}, {"1", "nvidia1 nvidia0"}}, "would show /dev/nvidia0, a card this job was not given"},
		{"card missing", [][2]string{{"0", "nvidia0"}}, "card GPU-bbb (index 1) is in no CDI spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cdiRoot(t)
			r.spec("nvidia.yaml", tc.devices)
			e, err := r.editor().For([]device.Card{nv1}, []device.Card{nv0, nv1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Paths) != 1 || e.Paths[0].Via != ViaBuiltin || !strings.Contains(e.Paths[0].Detail, tc.why) {
				t.Errorf("paths %+v, want built-in because %q", e.Paths, tc.why)
			}
			want := []string{"/dev/nvidia1=" + r.in("dev/nvidia1"), "/dev/nvidiactl=" + r.in("dev/nvidiactl")}
			if got := devicesOf(e); !reflect.DeepEqual(got, want) {
				t.Errorf("devices %v, want %v", got, want)
			}
			if e.Hooks != nil || mountsOf(e)["/usr/local/nvidia/lib64/libcuda.so.550.54.14"] == "" {
				t.Errorf("not the built-in edits: hooks %v mounts %v", e.Hooks, e.Mounts)
			}
		})
	}
}

// A spec file that cannot be read is named in the reason its vendor's
// cards enter built in; with NoCDI the specs are not read at all.
func TestCDIBrokenOrOff(t *testing.T) {
	r := cdiRoot(t)
	if err := os.WriteFile(filepath.Join(r.cdi, "nvidia.yaml"), []byte("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{{\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := r.editor().For([]device.Card{nv0}, []device.Card{nv0, nv1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Paths[0].Via != ViaBuiltin || !strings.Contains(e.Paths[0].Detail, filepath.Join(r.cdi, "nvidia.yaml")+":") {
		t.Errorf("paths %+v", e.Paths)
	}
	r.spec("nvidia.yaml", [][2]string{{"0", "nvidia0"}, {"1", "nvidia1"}})
	r.opts.NoCDI = true
	e, err = r.editor().For([]device.Card{nv0}, []device.Card{nv0, nv1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Paths[0].Via != ViaBuiltin || e.Paths[0].Detail != "CDI is off on this node" {
		t.Errorf("paths with NoCDI %+v", e.Paths)
	}
}

// Paths says how each vendor of the node's cards enters containers: a
// spec written while the node runs counts from the next call on.
func TestPaths(t *testing.T) {
	r := cdiRoot(t)
	amd := device.Card{ID: "amd-0", Vendor: device.VendorAMD, Backend: "amd-smi"}
	sim := device.Card{ID: "sim-0", Vendor: device.VendorHuawei, Backend: "sim"}
	ed := r.editor()
	inv := []device.Card{nv0, nv1, amd, sim}
	got := ed.Paths(inv)
	if len(got) != 2 || got[0].Vendor != device.VendorAMD || got[0].Via != ViaBuiltin || got[1].Via != ViaBuiltin {
		t.Fatalf("paths before the spec %+v", got)
	}
	file := r.spec("nvidia.yaml", [][2]string{{"0", "nvidia0"}, {"1", "nvidia1"}})
	got = ed.Paths(inv)
	want := Path{Vendor: device.VendorNVIDIA, Via: ViaCDI, Detail: "nvidia.com/gpu=0, nvidia.com/gpu=1 from " + file}
	if len(got) != 2 || got[1] != want {
		t.Errorf("paths %+v, want %+v", got, want)
	}
}
