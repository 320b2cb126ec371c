package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/cardedit"
)

// checkPrivileges: the job sandbox (cgroups, namespaces, nftables) needs
// root on Linux; without it jobs run as plain processes.
func checkPrivileges(cfg Config) Result {
	r := Result{Check: "privileges"}
	switch {
	case cfg.System.GOOS() != "linux":
		r.Status, r.Found = Warn, "not Linux ("+cfg.System.GOOS()+"): jobs cannot be sandboxed"
		r.Fix = "run the node on Linux, or under WSL2 on Windows (see the README's install section)"
	case cfg.System.Geteuid() == 0:
		r.Status, r.Found = OK, "root: jobs run in the sandbox (own uid, cgroups, namespaces, egress rules)"
	default:
		r.Status, r.Found = Warn, fmt.Sprintf("not root (uid %d): jobs would run as plain processes, not sandboxed", cfg.System.Geteuid())
		r.Fix = "run the node as root: install the package (systemd unit gpumesh.service) or use sudo"
	}
	return r
}

// neededControllers are the cgroup v2 controllers the sandbox limits jobs
// with.
var neededControllers = []string{"cpu", "memory", "pids"}

// checkCgroups: cgroup v2 with the cpu, memory and pids controllers.
func checkCgroups(cfg Config) Result {
	r := Result{Check: "cgroup v2"}
	if cfg.System.GOOS() != "linux" {
		r.Status, r.Found = Skip, "not Linux"
		return r
	}
	b, err := cfg.System.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		if _, v1 := cfg.System.ReadDir("/sys/fs/cgroup/memory"); v1 == nil {
			r.Status, r.Found = Warn, "cgroup v1 (no cgroup v2 controllers at /sys/fs/cgroup): jobs are limited through v1"
			r.Fix = "boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2"
			return r
		}
		r.Status, r.Found = Fail, "no cgroup file system at /sys/fs/cgroup: jobs' memory and processes cannot be limited"
		r.Fix = "mount cgroup2 on /sys/fs/cgroup (in a container: run it with --cgroupns=host or privileged)"
		return r
	}
	have := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		have[c] = true
	}
	var missing []string
	for _, c := range neededControllers {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		r.Status = Fail
		r.Found = "cgroup v2 without the " + strings.Join(missing, ", ") + " controller" + plural(len(missing))
		r.Fix = "enable them for the node's cgroup (systemd: Delegate=yes in the unit, which the package's unit sets)"
		return r
	}
	r.Status, r.Found = OK, "cgroup v2 with "+strings.Join(neededControllers, ", ")
	return r
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// checkTool: a program the sandbox needs for jobs with egress network
// (the default --job-network). Missing as root on Linux fails: such jobs
// would not start.
func checkTool(cfg Config, name, program, pkg string) Result {
	r := Result{Check: name}
	if cfg.System.GOOS() != "linux" {
		r.Status, r.Found = Skip, "not Linux"
		return r
	}
	path, err := cfg.System.LookPath(program)
	if err == nil {
		r.Status, r.Found = OK, path
		return r
	}
	r.Found = program + " not found on $PATH: jobs with network egress (the default) cannot be given their rules"
	r.Fix = "install it: apt install " + pkg + " (Debian, Ubuntu), dnf install " + pkg + " (RHEL-likes)"
	r.Status = Warn
	if cfg.System.Geteuid() == 0 {
		r.Status = Fail
	}
	return r
}

// checkOCIRuntime: crun or runc, for jobs that name a container image.
func checkOCIRuntime(cfg Config) Result {
	r := Result{Check: "OCI runtime"}
	for _, rt := range []string{"crun", "runc"} {
		if path, err := cfg.System.LookPath(rt); err == nil {
			r.Status, r.Found = OK, rt+" at "+path
			return r
		}
	}
	r.Status, r.Found = Warn, "neither crun nor runc on $PATH: jobs run as sandboxed processes, and a job that runs an OCI image needs one"
	r.Fix = "install one: apt install crun (Debian, Ubuntu), dnf install crun (RHEL-likes)"
	return r
}

// found is what card discovery said.
type found struct {
	cards    []device.Card
	statuses []device.BackendStatus
	err      error
}

func discover(ctx context.Context, cfg Config) found {
	cards, st, err := cfg.Cards(ctx)
	return found{cards, st, err}
}

// vendorTools are the programs of the vendors without NVML, by backend.
var vendorTools = []string{"amd-smi", "rocm-smi", "hy-smi", "mthreads-gmi", "npu-smi", "xpu-smi"}

// checkDriver: a GPU driver is loaded and its library or tool answers.
func checkDriver(cfg Config, f found) Result {
	r := Result{Check: "GPU driver"}
	var have []string
	if b, err := cfg.System.ReadFile("/proc/driver/nvidia/version"); err == nil {
		have = append(have, "NVIDIA "+nvidiaVersion(string(b)))
		for _, st := range f.statuses {
			if st.Backend == "nvml" && st.State != device.StatePresent {
				r.Status = Fail
				r.Found = fmt.Sprintf("NVIDIA driver %s loaded, but NVML is %s: %s", nvidiaVersion(string(b)), st.State, st.Reason)
				r.Fix = "install the driver's NVML library (libnvidia-ml.so.1, e.g. apt install libnvidia-ml1 or the driver's utils package), and use a gpumesh built with cgo (the packages are)"
				return r
			}
		}
	}
	if len(have) == 0 {
		for _, st := range f.statuses {
			if st.Backend == "nvml" && st.State == device.StatePresent {
				have = append(have, "NVIDIA (NVML answers)") // WSL2: no /proc/driver/nvidia
			}
		}
	}
	for _, t := range vendorTools {
		if _, err := cfg.System.LookPath(t); err == nil {
			have = append(have, t)
		}
	}
	if len(have) == 0 {
		r.Status, r.Found = Warn, "no GPU driver loaded and no vendor tool on $PATH"
		r.Fix = "install your cards' driver (NVIDIA: the distribution's nvidia-driver; AMD: ROCm; others: the vendor's SMI tool), or use --sim to try the mesh without cards"
		return r
	}
	r.Status, r.Found = OK, strings.Join(have, ", ")
	return r
}

// nvidiaVersion picks the version out of /proc/driver/nvidia/version
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ...").
func nvidiaVersion(s string) string {
	fields := strings.Fields(strings.SplitN(s, "\n", 2)[0])
	for i, f := range fields {
		if f == "Module" && i+1 < len(fields) {
			return fields[i+1]
		}
	}
	return "(unknown version)"
}

// checkCards: the cards the node would offer, and any backend that failed.
func checkCards(f found) Result {
	r := Result{Check: "cards"}
	if f.err != nil {
		r.Status, r.Found, r.Fix = Fail, "card discovery failed: "+f.err.Error(), "see `gpumesh cards -v`"
		return r
	}
	var failed []string
	for _, st := range f.statuses {
		if st.State == device.StateFailed {
			failed = append(failed, st.Backend+": "+st.Reason)
		}
	}
	counts := map[string]int{}
	unhealthy := 0
	for _, c := range f.cards {
		counts[c.Model]++
		if !c.Health.Healthy {
			unhealthy++
		}
	}
	models := make([]string, 0, len(counts))
	for m, n := range counts {
		models = append(models, fmt.Sprintf("%d × %s", n, m))
	}
	sort.Strings(models)
	switch {
	case len(failed) > 0:
		r.Status = Fail
		r.Found = "a card backend failed: " + strings.Join(failed, "; ")
		r.Fix = "check the vendor's tool or driver by hand (see `gpumesh cards -v`)"
	case len(f.cards) == 0:
		r.Status = Warn
		r.Found = "no cards found: the node would offer nothing (it can still coordinate jobs)"
		r.Fix = "install the driver (see GPU driver), or offer simulated cards with --sim to try the mesh"
	case unhealthy > 0:
		r.Status = Warn
		r.Found = fmt.Sprintf("%s (%s), %d unhealthy and withdrawn", text.Count(len(f.cards), "card"), strings.Join(models, ", "), unhealthy)
		r.Fix = "see `gpumesh cards` for the reason (Xid, ECC errors)"
	default:
		r.Status, r.Found = OK, text.Count(len(f.cards), "card")+": "+strings.Join(models, ", ")
	}
	return r
}

// cdiDirs are where CDI specs live.
var cdiDirs = []string{"/etc/cdi", "/var/run/cdi"}

// checkCDI: container device interface specs, which a container job needs
// to see its cards.
func checkCDI(cfg Config, f found) Result {
	r := Result{Check: "CDI specs"}
	var specs []string
	for _, d := range cdiDirs {
		entries, err := cfg.System.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".json" || ext == ".yaml" || ext == ".yml") {
				specs = append(specs, filepath.Join(d, e.Name()))
			}
		}
	}
	switch {
	case len(specs) > 0:
		r.Status, r.Found = OK, strings.Join(specs, ", ")
	case len(f.cards) == 0:
		r.Status, r.Found = OK, "none, and no cards that need them"
	default:
		r.Status = Warn
		r.Found = "no CDI spec in " + strings.Join(cdiDirs, " or ") + ": container jobs get their cards by per-vendor device rules instead"
		r.Fix = "generate one: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (NVIDIA Container Toolkit), or your vendor's CDI generator"
	}
	if cfg.CardPaths != nil && len(f.cards) > 0 && len(specs) > 0 {
		for _, p := range cfg.CardPaths(f.cards) {
			if p.Via == cardedit.ViaCDI {
				r.Found += fmt.Sprintf("; %s cards enter containers through CDI: %s", p.Vendor, p.Detail)
			} else {
				r.Found += fmt.Sprintf("; %s cards enter containers by gpumesh's built-in rules: %s", p.Vendor, p.Detail)
			}
		}
	}
	return r
}

// checkDataDir: the data dir can be made and written, and its file system
// has room for payloads, checkpoints and job directories.
func checkDataDir(cfg Config) []Result {
	if cfg.DataDir == "" {
		return []Result{{Check: "data dir", Status: Skip, Found: "no data dir given"}}
	}
	// The nearest directory that exists: the node makes the rest.
	dir := cfg.DataDir
	for {
		if _, err := cfg.System.ReadDir(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	var out []Result
	if cfg.CheckDataDir != nil {
		d := Result{Check: "data dir", Status: OK, Found: cfg.DataDir}
		if err := cfg.CheckDataDir(cfg.DataDir); err != nil {
			d.Status, d.Found = Fail, err.Error()
			d.Fix = "give a directory this user can write in, or a path where one can be made (--data)"
		}
		out = append(out, d)
	}
	r := Result{Check: "free disk"}
	free, err := cfg.System.FreeBytes(dir)
	switch {
	case err != nil:
		r.Status, r.Found = Warn, fmt.Sprintf("cannot tell the free space of %s: %v", dir, err)
	case free < cfg.MinFreeBytes:
		r.Status, r.Found = Fail, fmt.Sprintf("%s free under %s, below the %s a node needs", gib(free), dir, gib(cfg.MinFreeBytes))
		r.Fix = "free some space, or give a data dir on a larger disk (--data)"
	case free < cfg.WarnFreeBytes:
		r.Status, r.Found = Warn, fmt.Sprintf("%s free under %s: few checkpoints and payloads fit", gib(free), dir)
		r.Fix = fmt.Sprintf("keep at least %s free for the data dir", gib(cfg.WarnFreeBytes))
	default:
		r.Status, r.Found = OK, fmt.Sprintf("%s free under %s", gib(free), dir)
	}
	return append(out, r)
}

// gib is a size in GiB with one decimal.
func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
