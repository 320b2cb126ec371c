package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	runc "github.com/containerd/go-runc"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// An image attempt runs under the OCI runtime (crun or runc) with every
// guarantee of the sandbox — the uid, cgroup (memory, pids, CPU weight,
// devices), network (none, egress through the sandbox's namespace and
// nftables rules, or the node's) and device nodes the sandbox gives the
// attempt — and what a container runtime adds: pivot_root into the
// image, a user namespace (container ids 0-65535 are host ids from
// Config.ContainerIDBase: container root is nobody on the node), new PID,
// IPC, UTS and mount namespaces, Docker's default capabilities and
// seccomp profile, no_new_privs, masked /proc paths. The image's root
// file system is shared read-only; the attempt writes in an overlay layer
// of its own (DIR/upper), removed with the attempt. The job's work and
// checkpoint directories are bound at /gpumesh/work and
// /gpumesh/checkpoint.
type containerJail struct {
	*sandboxJail
	id     string // the runtime's container id
	dir    string // Config.ContainerDir/<id>: the bundle and the mount points
	rootfs string // dir/rootfs: the overlay's mount point
	upper  string // the attempt's writable layer and the overlay's work dir
	work   string
	binds  [][2]string // attempt directory → its mount point under dir
	mounts []string    // what is mounted under dir, to unmount at the end
	rt     *runc.Runc
	nodes  []devNode
	nums   []devNum
	img    *Container
}

// containerJail makes an image attempt's jail: the sandbox's (uid,
// cgroup, network), then its bundle and writable layer.
func (s *sandbox) containerJail(r *Run) (_ jail, err error) {
	if s.runtimeWhy != "" {
		return nil, fmt.Errorf("%w: %s", ErrNoRuntime, s.runtimeWhy)
	}
	l := r.attempt.Limits.withDefaults()
	nodes, nums, err := s.devices(l.Devices)
	if err != nil {
		return nil, err
	}
	base, err := s.hostJail(r)
	if err != nil {
		return nil, err
	}
	sj := base.(*sandboxJail)
	id := "gpumesh-" + r.attempt.Name()
	dir := filepath.Join(s.cfg.ContainerDir, id)
	j := &containerJail{sandboxJail: sj, id: id, dir: dir, rootfs: filepath.Join(dir, "rootfs"),
		upper: filepath.Join(r.Dir(), "upper"), work: filepath.Join(r.Dir(), "ovlwork"),
		binds: [][2]string{{r.WorkDir(), filepath.Join(dir, "work")}, {r.CheckpointDir(), filepath.Join(dir, "checkpoint")}, {r.tmpDir(), filepath.Join(dir, "tmp")}},
		rt:    s.runc(), nodes: nodes, nums: nums, img: r.attempt.Image}
	defer func() {
		if err != nil {
			j.finish()
		}
	}()
	// The job's directories belong to its user as the namespace maps it.
	hostUID, hostGID := int(s.cfg.ContainerIDBase+j.img.UID), int(s.cfg.ContainerIDBase+j.img.GID)
	for _, d := range []string{r.WorkDir(), r.CheckpointDir(), r.tmpDir()} {
		if err := chownTree(d, hostUID, hostGID); err != nil {
			return nil, fmt.Errorf("executor: handing %s to the image's user: %w", d, err)
		}
	}
	// The runtime mounts inside the container's user namespace, as its
	// root: every path it mounts from must be searchable by that user.
	// The attempt's own directories are not (Config.Root is the node's),
	// so they are bound under dir first, whose parents are.
	if err := os.MkdirAll(s.cfg.ContainerDir, 0o711); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if err := os.Chmod(s.cfg.ContainerDir, 0o711); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	for _, d := range []string{j.rootfs, j.upper, j.work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	for _, b := range j.binds {
		if err := os.Mkdir(b[1], 0o700); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		if err := unix.Mount(b[0], b[1], "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("executor: binding %s for the container: %w", b[0], err)
		}
		j.mounts = append(j.mounts, b[1])
	}
	for _, n := range j.nodes {
		// Device nodes too, as files under dir (Config.DevDir may be private).
		p := j.devPath(n.name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		if err := unix.Mount(filepath.Join(s.cfg.DevDir, n.name), p, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("executor: binding device %s for the container: %w", n.name, err)
		}
		j.mounts = append(j.mounts, p)
	}
	if j.fs.resolv != "" {
		b, err := os.ReadFile(j.fs.resolv)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "resolv.conf"), b, 0o644)
		}
		if err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	// The writable layer's root is the container root's, as the image's is.
	if err := os.Chown(j.upper, int(s.cfg.ContainerIDBase), int(s.cfg.ContainerIDBase)); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if err := os.Chmod(j.upper, 0o755); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	opts := "lowerdir=" + j.img.Rootfs + ",upperdir=" + j.upper + ",workdir=" + j.work
	if err := unix.Mount("overlay", j.rootfs, "overlay", unix.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("executor: the image's writable layer (overlay): %w", err)
	}
	j.mounts = append(j.mounts, j.rootfs)
	return j, nil
}

// devPath is where device node name is bound under the container's dir.
func (j *containerJail) devPath(name string) string {
	return filepath.Join(j.dir, "dev-"+strings.ReplaceAll(name, "/", "_"))
}

func (s *sandbox) runc() *runc.Runc {
	return &runc.Runc{Command: s.runtime, Root: filepath.Join(s.cfg.LockDir, "oci"), Setpgid: true}
}

// hiddenBy: nothing of the node is in the image.
func (j *containerJail) hiddenBy(string) string { return "" }

// start writes the bundle's config.json and runs the runtime in the
// foreground: it exits with the container's status.
func (j *containerJail) start(cmd *exec.Cmd) error {
	spec, err := j.spec(cmd)
	if err != nil {
		return err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(j.dir, "config.json"), b, 0o600); err != nil {
		return err
	}
	cmd.Path = j.rt.Command
	cmd.Args = []string{j.rt.Command, "--root", j.rt.Root, "run", "--bundle", j.dir, j.id}
	cmd.Dir = j.dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	return cmd.Start()
}

// spec is the attempt's OCI runtime spec.
func (j *containerJail) spec(cmd *exec.Cmd) (*specs.Spec, error) {
	base := j.s.cfg.ContainerIDBase
	caps := defaultCaps()
	// As many open files as the node may have, at most 2^20 (a user
	// namespace cannot raise a hard limit).
	nofile := uint64(1 << 20)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Max < nofile {
		nofile = rl.Max
	}
	l := j.limits
	p := &specs.Process{
		Args:            cmd.Args,
		Env:             cmd.Env,
		Cwd:             cmd.Dir,
		User:            specs.User{UID: j.img.UID, GID: j.img.GID, AdditionalGids: j.img.Groups},
		Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
		NoNewPrivileges: true,
		OOMScoreAdj:     ptr(1000),
		Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
	}
	if j.img.UID != 0 {
		// Docker's way: a user other than root keeps no capabilities in effect.
		p.Capabilities.Effective, p.Capabilities.Permitted = nil, nil
	}
	tmpSize := "size=65536k"
	if l.MemoryBytes > 0 {
		tmpSize = "size=" + strconv.FormatInt(l.MemoryBytes/1024, 10) + "k"
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", tmpSize}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		// The node's /sys, read-only (a sysfs of the job's own needs a
		// network namespace its user namespace owns, which egress and host
		// are not).
		{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
		{Destination: containerTmpDir, Type: "bind", Source: j.binds[2][1], Options: []string{"bind", "nosuid", "nodev"}},
		{Destination: containerWorkDir, Type: "bind", Source: j.binds[0][1], Options: []string{"bind", "nosuid", "nodev"}},
		{Destination: containerCheckpointDir, Type: "bind", Source: j.binds[1][1], Options: []string{"bind", "nosuid", "nodev"}},
	}
	if j.fs.resolv != "" {
		mounts = append(mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(j.dir, "resolv.conf"), Options: []string{"bind", "ro"}})
	}
	ns := []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.UserNamespace}}
	switch {
	case j.named: // egress, or a private network
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: j.s.net.nsPath(j.uidv)})
	case l.Network == NetworkNone:
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	res := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	if l.MemoryBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: ptr(l.MemoryBytes), Swap: ptr(l.MemoryBytes)}
	}
	if l.Pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: ptr(int64(l.Pids))}
	}
	if l.CPUWeight > 0 {
		// runc and crun map shares to cgroup v2's weight.
		res.CPU = &specs.LinuxCPU{Shares: ptr(uint64(l.CPUWeight) * 1024 / 100)}
	}
	for _, d := range standardDevices {
		res.Devices = append(res.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(int64(d.major)), Minor: ptr(int64(d.minor)), Access: "rwm"})
	}
	// The container's own pts and ptmx.
	res.Devices = append(res.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(int64(136)), Access: "rwm"},
		specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(int64(5)), Minor: ptr(int64(2)), Access: "rwm"})
	for i, n := range j.nodes {
		typ := "c"
		if j.nums[i].block {
			typ = "b"
		}
		major, minor := int64(j.nums[i].major), int64(j.nums[i].minor)
		res.Devices = append(res.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: typ, Major: ptr(major), Minor: ptr(minor), Access: "rwm"})
		// Bound, not made: a user namespace may not make device nodes.
		mounts = append(mounts, specs.Mount{Destination: "/dev/" + n.name, Type: "bind", Source: j.devPath(n.name), Options: []string{"bind", "nosuid", "noexec"}})
	}
	hostname := j.r.attempt.JobID
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	spec := &specs.Spec{
		Version:  specs.Version,
		Process:  p,
		Root:     &specs.Root{Path: j.rootfs},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: 65536}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: 65536}},
			Namespaces:  ns,
			Resources:   res,
			// The sandbox's cgroup: its limits, and its kill at the end.
			CgroupsPath: "/" + filepath.Join(j.s.cfg.CgroupParent, cgroupName(j.uidv)),
			MaskedPaths: []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	sc, err := seccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("the default seccomp profile: %w", err)
	}
	spec.Linux.Seccomp = sc
	return spec, nil
}

// defaultCaps are Docker's default capabilities.
func defaultCaps() []string {
	return []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
		"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
}

func ptr[T any](v T) *T { return &v }

// enter runs cmd in the container through the runtime's exec, as the
// image's user. A terminal is not supported yet.
func (j *containerJail) enter(cmd *exec.Cmd, tty bool) (*os.File, error) {
	if tty {
		return nil, errors.New("a terminal into a job in an image is not supported yet: run gpumesh exec without -t")
	}
	j.mu.Lock()
	finished := j.finished
	j.mu.Unlock()
	if finished {
		return nil, ErrAttemptEnded
	}
	caps := defaultCaps()
	proc := specs.Process{Args: cmd.Args, Env: cmd.Env, Cwd: cmd.Dir, NoNewPrivileges: true,
		User:         specs.User{UID: j.img.UID, GID: j.img.GID, AdditionalGids: j.img.Groups},
		Capabilities: &specs.LinuxCapabilities{Bounding: caps}}
	if j.img.UID == 0 {
		proc.Capabilities.Effective, proc.Capabilities.Permitted = caps, caps
	}
	b, err := json.Marshal(proc)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(j.dir, "exec-*.json")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	cmd.Path = j.rt.Command
	cmd.Args = []string{j.rt.Command, "--root", j.rt.Root, "exec", "--process", f.Name(), j.id}
	cmd.Dir = j.dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	return nil, cmd.Start()
}

// dial connects to addr in the container's network.
func (j *containerJail) dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if j.limits.Network == NetworkHost {
		return dialAddr(ctx, addr)
	}
	st, err := j.rt.State(ctx, j.id)
	if err != nil || st.Pid <= 0 {
		return nil, fmt.Errorf("%w: the container is not running (%v)", ErrAttemptEnded, err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(st.Pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the job's network namespace: %w", err)
	}
	defer unix.Close(fd)
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the job's namespace
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{nil, fmt.Errorf("entering the job's network namespace: %w", err)}
			return
		}
		c, err := dialAddr(ctx, addr)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// finish kills what is left (the sandbox's cgroup), removes the
// container's state and writable layer, then releases the sandbox's.
func (j *containerJail) finish() bool {
	j.mu.Lock()
	j.finished = true
	j.mu.Unlock()
	log := j.s.log.With("job", j.r.attempt.JobID, "share", j.r.attempt.Share, "epoch", j.r.attempt.Epoch)
	if j.cg != nil {
		_ = j.cg.killAll(time.Now().Add(cgroupTimeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), cgroupTimeout)
	if err := j.rt.Delete(ctx, j.id, &runc.DeleteOpts{Force: true}); err != nil && !strings.Contains(err.Error(), "does not exist") && !strings.Contains(err.Error(), "not exist") {
		log.Debug("executor: deleting the container", "err", err)
	}
	cancel()
	// Unmounted first; a mount point that will not go keeps its files
	// (os.Remove, never RemoveAll, where the job's directories were bound).
	clean := true
	for i := len(j.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(j.mounts[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			log.Warn("executor: unmounting", "dir", j.mounts[i], "err", err)
			clean = false
		}
	}
	if clean {
		for _, d := range []string{j.rootfs, j.binds[0][1], j.binds[1][1], j.binds[2][1]} {
			_ = os.Remove(d)
		}
		for _, d := range []string{filepath.Join(j.dir, "config.json"), filepath.Join(j.dir, "resolv.conf")} {
			_ = os.Remove(d)
		}
		for _, n := range j.nodes {
			_ = os.Remove(j.devPath(n.name))
		}
		if m, _ := filepath.Glob(filepath.Join(j.dir, "exec-*.json")); len(m) > 0 {
			for _, f := range m {
				_ = os.Remove(f)
			}
		}
		if err := os.Remove(j.dir); err != nil && !os.IsNotExist(err) {
			log.Warn("executor: removing the container's directory", "dir", j.dir, "err", err)
		}
		for _, d := range []string{j.upper, j.work} {
			if err := os.RemoveAll(d); err != nil {
				log.Warn("executor: removing the container's writable layer", "dir", d, "err", err)
			}
		}
	}
	return j.sandboxJail.finish()
}
