//go:build unix

package cardedit

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// The editor starts no goroutine: the CDI cache is refreshed on demand,
// never watched.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRoot is a node's file tree in a temporary directory: driver files,
// device nodes (plain files unless made with node), sysfs entries.
type fakeRoot struct {
	t    testing.TB
	dir  string
	cdi  string // an empty CDI spec directory
	ed   *Editor
	opts Config
}

func newFakeRoot(t testing.TB) *fakeRoot {
	t.Helper()
	return &fakeRoot{t: t, dir: t.TempDir(), cdi: t.TempDir()}
}

// file writes a file of the tree (mode 0755 for programs under a bin dir).
func (r *fakeRoot) file(p, content string) string {
	r.t.Helper()
	full := filepath.Join(r.dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatal(err)
	}
	mode := os.FileMode(0o644)
	if filepath.Base(filepath.Dir(p)) == "bin" || filepath.Base(filepath.Dir(p)) == "sbin" {
		mode = 0o755
	}
	if err := os.WriteFile(full, []byte(content), mode); err != nil {
		r.t.Fatal(err)
	}
	return full
}

// link makes p a symbolic link to target (relative, as drivers install).
func (r *fakeRoot) link(p, target string) {
	r.t.Helper()
	full := filepath.Join(r.dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		r.t.Fatal(err)
	}
}

// mkdir makes a directory of the tree.
func (r *fakeRoot) mkdir(p string) string {
	r.t.Helper()
	full := filepath.Join(r.dir, p)
	if err := os.MkdirAll(full, 0o755); err != nil {
		r.t.Fatal(err)
	}
	return full
}

// devs makes device nodes as plain files (enough for the built-in rules,
// which look for names).
func (r *fakeRoot) devs(names ...string) {
	r.t.Helper()
	for _, n := range names {
		r.file("dev/"+n, "")
	}
}

// node makes a real character device node (root only: skips otherwise).
func (r *fakeRoot) node(name string, major, minor uint32) string {
	r.t.Helper()
	full := filepath.Join(r.dir, "dev", name)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := unix.Mknod(full, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		r.t.Skipf("cannot make device nodes here: %v", err)
	}
	return full
}

// drm gives the PCI device busID the DRM nodes names in sysfs.
func (r *fakeRoot) drm(busID string, names ...string) {
	r.t.Helper()
	for _, n := range names {
		r.mkdir("sys/bus/pci/devices/" + busID + "/drm/" + n)
	}
}

// editor returns an Editor of the tree whose CDI directory is r.cdi.
func (r *fakeRoot) editor() *Editor {
	r.t.Helper()
	cfg := r.opts
	cfg.Root = r.dir
	if cfg.CDIDirs == nil {
		cfg.CDIDirs = []string{r.cdi}
	}
	ed, err := New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return ed
}

// in is where path p of the tree is on the node.
func (r *fakeRoot) in(p string) string { return filepath.Join(r.dir, p) }

// nvidiaDriver installs a fake NVIDIA driver 550.54.14: its libraries in
// a directory that ld.so.conf.d names (as Debian's packages do), the
// soname and development links, a library of an older driver left behind,
// a video library, its programs and two cards' nodes.
func (r *fakeRoot) nvidiaDriver() {
	r.file("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0\n")
	r.file("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
	r.file("etc/ld.so.conf.d/nvidia.conf", "# the driver\n/usr/lib/nvidia/current\n")
	for _, lib := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-encode.so"} {
		r.file("usr/lib/nvidia/current/"+lib+".550.54.14", "ELF "+lib)
		r.link("usr/lib/nvidia/current/"+lib+".1", lib+".550.54.14")
	}
	r.link("usr/lib/nvidia/current/libcuda.so", "libcuda.so.1")
	r.file("usr/lib/nvidia/current/libcuda.so.470.57.02", "an older driver's")
	r.file("usr/lib/nvidia/current/libcudart.so.12", "not the driver's")
	r.file("usr/bin/nvidia-smi", "#!")
	r.file("usr/bin/nvidia-debugdump", "#!")
	r.devs("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm")
}
