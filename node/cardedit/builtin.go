package cardedit

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpumesh/gpumesh/device"
)

// builtin is gpumesh's own rule for a vendor's cards in a container:
// besides their device nodes (nodesOf), the driver's user-space files.
type builtin struct {
	// libs and programs return the driver's libraries (base names, as
	// "libcuda.so") and programs the container gets, given its
	// environment (the image's and the job's).
	libs, programs func(env map[string]string) []string
	// libDirs are directories of the node searched for libs before the
	// usual ones.
	libDirs []string
	// dir is where libs and programs go in the container: dir/lib (or
	// libName) and dir/bin; it is put first in LD_LIBRARY_PATH and PATH.
	dir, libName string
	// same are files and directories bound at their own path when the
	// node has them; libPath those of them to put in LD_LIBRARY_PATH.
	same, libPath []string
	// version returns the loaded driver's version, to take only its own
	// libraries ("" takes every one).
	version func(f *finder) string
}

// DefaultPath is the PATH of a container whose image sets none (Docker's).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func fixed(names ...string) func(map[string]string) []string {
	return func(map[string]string) []string { return names }
}

// The driver files of NVIDIA's capabilities, as nvidia-container-toolkit
// lists them (libnvidia-container's nvc_info.c): what the image's
// NVIDIA_DRIVER_CAPABILITIES names is bound. Graphics and display are not
// offered.
var (
	nvidiaLibs = map[string][]string{
		"utility": {"libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"},
		"compute": {"libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
			"libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
			"libnvidia-compiler.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so", "libnvidia-nvvm.so",
			"libnvidia-tileiras.so"},
		"video": {"libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"},
	}
	nvidiaPrograms = map[string][]string{
		"utility": {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"},
		"compute": {"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"},
	}
)

// nvidiaCapabilities reads NVIDIA_DRIVER_CAPABILITIES ("compute,utility",
// "all"); unset or empty is compute and utility, the toolkit's default.
func nvidiaCapabilities(env map[string]string) []string {
	v := strings.TrimSpace(env["NVIDIA_DRIVER_CAPABILITIES"])
	if v == "" {
		return []string{"compute", "utility"}
	}
	var caps []string
	for _, c := range strings.Split(v, ",") {
		switch c = strings.TrimSpace(c); c {
		case "all":
			return []string{"compute", "utility", "video"}
		case "compute", "utility", "video":
			caps = append(caps, c)
		}
	}
	return caps
}

func nvidiaFiles(table map[string][]string) func(map[string]string) []string {
	return func(env map[string]string) []string {
		var out []string
		for _, c := range nvidiaCapabilities(env) {
			out = append(out, table[c]...)
		}
		return out
	}
}

// nvidiaVersionPattern finds the version in /proc/driver/nvidia/version:
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 …".
var nvidiaVersionPattern = regexp.MustCompile(`Module\s.*?\s(\d+\.\d+(?:\.\d+)?)\s`)

// nvidiaVersion is the loaded NVIDIA driver's version, "" when unknown.
func nvidiaVersion(f *finder) string {
	b, err := os.ReadFile(f.inTree("/proc/driver/nvidia/version"))
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if m := nvidiaVersionPattern.FindStringSubmatch(line + " "); m != nil {
		return m[1]
	}
	return ""
}

// builtins are the rules per vendor. NVIDIA's go where its CUDA images
// look (LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 and
// PATH=/usr/local/nvidia/bin:…, nvidia-docker 1.0's layout); Ascend's,
// Hygon's at the paths their vendors' instructions bind them; the others
// under /usr/local/gpumesh/<vendor>. AMD's user space (ROCm) is the
// image's: its cards need only their device nodes.
var builtins = map[device.Vendor]builtin{
	device.VendorNVIDIA: {
		libs: nvidiaFiles(nvidiaLibs), programs: nvidiaFiles(nvidiaPrograms),
		dir: "/usr/local/nvidia", libName: "lib64", version: nvidiaVersion,
	},
	device.VendorAMD: {},
	device.VendorHygon: {
		same: []string{"/opt/hyhal"},
	},
	device.VendorHuawei: {
		same: []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/dcmi",
			"/usr/local/bin/npu-smi", "/usr/local/sbin/npu-smi", "/etc/ascend_install.info"},
		libPath: []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/common", "/usr/local/Ascend/driver/lib64/driver"},
	},
	device.VendorMThreads: {
		libs: fixed("libmusa.so", "libmtml.so"), programs: fixed("mthreads-gmi"),
		libDirs: []string{"/usr/lib/" + multiarch() + "/musa", "/usr/local/musa/lib"},
		dir:     "/usr/local/gpumesh/mthreads",
	},
	device.VendorKunlunxin: {
		libs: fixed("libxpuml.so"), programs: fixed("xpu-smi", "xpu_smi"),
		dir: "/usr/local/gpumesh/kunlunxin",
	},
}

// builtinEdits are the built-in edits of cards (all of vendor v) for a
// container whose environment is env (updated with what the edits set).
func (e *Editor) builtinEdits(v device.Vendor, cards []device.Card, env map[string]string) *Edits {
	out := &Edits{}
	seen := map[string]bool{}
	for _, c := range cards {
		n := nodesOf(e.cfg.DevDir, e.cfg.SysDir, c)
		for _, name := range append(n.own, n.shared...) {
			if !seen[name] {
				seen[name] = true
				out.Devices = append(out.Devices, Device{Path: "/dev/" + name, Host: filepath.Join(e.cfg.DevDir, name)})
			}
		}
	}
	r, ok := builtins[v]
	if !ok {
		return out
	}
	f := newFinder(e.cfg.Root)
	var set []string
	if r.dir != "" {
		libDir := path.Join(r.dir, "lib")
		if r.libName != "" {
			libDir = path.Join(r.dir, r.libName)
		}
		version := ""
		if r.version != nil {
			version = r.version(f)
		}
		var libs, progs int
		for _, base := range r.libs(env) {
			for _, l := range f.libraries(base, r.libDirs, version) {
				out.Mounts = append(out.Mounts, Mount{Host: l.host, Path: path.Join(libDir, l.name)})
				libs++
			}
		}
		for _, name := range r.programs(env) {
			if p, ok := f.program(name); ok {
				out.Mounts = append(out.Mounts, Mount{Host: p.host, Path: path.Join(r.dir, "bin", p.name)})
				progs++
			}
		}
		if libs > 0 {
			env["LD_LIBRARY_PATH"] = prependDir(env["LD_LIBRARY_PATH"], libDir)
			set = append(set, "LD_LIBRARY_PATH")
		}
		if progs > 0 {
			if _, ok := env["PATH"]; !ok {
				env["PATH"] = DefaultPath
			}
			env["PATH"] = prependDir(env["PATH"], path.Join(r.dir, "bin"))
			set = append(set, "PATH")
		}
	}
	for _, p := range r.same {
		if host, ok := f.exists(p); ok {
			out.Mounts = append(out.Mounts, Mount{Host: host, Path: p})
		}
	}
	var libPath []string
	for _, p := range r.libPath {
		if _, ok := f.exists(p); ok {
			libPath = append(libPath, p)
		}
	}
	for i := len(libPath) - 1; i >= 0; i-- {
		env["LD_LIBRARY_PATH"] = prependDir(env["LD_LIBRARY_PATH"], libPath[i])
	}
	if len(libPath) > 0 {
		set = append(set, "LD_LIBRARY_PATH")
	}
	for _, k := range set {
		out.Env = mergeEnv(out.Env, []string{k + "=" + env[k]})
	}
	return out
}
