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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"
	"github.com/creack/pty"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/node/cardedit"
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
// /gpumesh/checkpoint. Its cards enter through Container.Cards (their
// CDI or built-in edits) and Limits.Devices: device nodes made for it,
// the driver's files bound read-only, variables and CDI's hooks.
type containerJail struct {
	*sandboxJail
	id         string // the runtime's container id
	dir        string // Config.ContainerDir/<id>: the bundle and the mount points
	rootfs     string // dir/rootfs: the overlay's mount point
	upper      string // the attempt's writable layer and the overlay's work dir
	work       string
	binds      [][2]string // attempt directory → its mount point under dir
	mounts     []string    // what is mounted under dir, to unmount at the end
	rt         *runc.Runc
	devs       []ctrDevice
	img        *Container
	cardMounts []cardedit.Mount // the cards' mounts
	dirs       []bool           // which of cardMounts are directories
}

// ctrDevice is a device node of an image attempt.
type ctrDevice struct {
	path string // in the container
	host string // the node's node it is made after
	mode uint32 // S_IFCHR or S_IFBLK
	perm uint32
	rdev uint64
}

// containerDevices are an image attempt's device nodes: its cards'
// edits', then those of Limits.Devices that the edits do not place
// already.
func (s *sandbox) containerDevices(l Limits, img *Container) ([]ctrDevice, error) {
	var list []cardedit.Device
	if img.Cards != nil {
		list = append(list, img.Cards.Devices...)
	}
	for _, n := range l.Devices {
		name, err := deviceName(n)
		if err != nil {
			return nil, err
		}
		p := "/dev/" + name
		if !slices.ContainsFunc(list, func(d cardedit.Device) bool { return d.Path == p }) {
			list = append(list, cardedit.Device{Path: p, Host: filepath.Join(s.cfg.DevDir, name)})
		}
	}
	out := make([]ctrDevice, 0, len(list))
	for _, d := range list {
		fi, err := os.Stat(d.Host)
		if err != nil {
			return nil, fmt.Errorf("executor: container device %s: %w", d.Path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || fi.Mode()&os.ModeDevice == 0 {
			return nil, fmt.Errorf("executor: container device %s: %s is not a device node", d.Path, d.Host)
		}
		mode := uint32(unix.S_IFCHR)
		if fi.Mode()&os.ModeCharDevice == 0 {
			mode = unix.S_IFBLK
		}
		out = append(out, ctrDevice{path: d.Path, host: d.Host, mode: mode, perm: uint32(fi.Mode().Perm()) | 0o660, rdev: st.Rdev})
	}
	slices.SortFunc(out, func(a, b ctrDevice) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// containerJail makes an image attempt's jail: the sandbox's (uid,
// cgroup, network), then its bundle and writable layer.
func (s *sandbox) containerJail(r *Run) (_ jail, err error) {
	if s.runtimeWhy != "" {
		return nil, fmt.Errorf("%w: %s", ErrNoRuntime, s.runtimeWhy)
	}
	l := r.attempt.Limits.withDefaults()
	devs, err := s.containerDevices(l, r.attempt.Image)
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
		rt:    s.runc(), devs: devs, img: r.attempt.Image}
	if c := j.img.Cards; c != nil {
		j.cardMounts = c.Mounts
	}
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
	if err := j.makeDevices(hostUID, hostGID); err != nil {
		return nil, err
	}
	if err := j.bindDriverFiles(); err != nil {
		return nil, err
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

// makeDevices makes the attempt's device nodes, owned by the image's
// user (host ids uid and gid), on a tmpfs of their own under dir, for the
// runtime to bind into the container: the runtime cannot make them (a
// user namespace may not), nor bind the node's own (owned by the node's
// groups, as render nodes are, they would not open), and the node's /run
// may be mounted nodev.
func (j *containerJail) makeDevices(uid, gid int) error {
	if len(j.devs) == 0 {
		return nil
	}
	dir := filepath.Join(j.dir, "dev")
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0711,size=64k"); err != nil {
		return fmt.Errorf("executor: mounting the container's device directory: %w", err)
	}
	j.mounts = append(j.mounts, dir)
	for i, d := range j.devs {
		p := j.devPath(i)
		if err := unix.Mknod(p, d.mode|d.perm, int(d.rdev)); err != nil {
			return fmt.Errorf("executor: making %s for the container: %w", d.path, err)
		}
		if err := os.Chmod(p, os.FileMode(d.perm)); err != nil { // past the umask
			return fmt.Errorf("executor: %w", err)
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	return nil
}

// devPath is where the attempt's i-th device node is made under dir.
func (j *containerJail) devPath(i int) string {
	return filepath.Join(j.dir, "dev", strconv.Itoa(i))
}

// bindDriverFiles binds the cards' mounts (their driver's files)
// under dir, read-only, nosuid and nodev: the runtime, in the container's
// user namespace, then binds them from there whatever the permissions of
// their directories on the node, and cannot make them writable (the
// flags are locked to its namespace).
func (j *containerJail) bindDriverFiles() error {
	if len(j.cardMounts) == 0 {
		return nil
	}
	if err := os.Mkdir(filepath.Join(j.dir, "drv"), 0o711); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	j.dirs = make([]bool, len(j.cardMounts))
	for i, m := range j.cardMounts {
		fi, err := os.Stat(m.Host)
		if err != nil {
			return fmt.Errorf("executor: the cards' driver file for %s: %w", m.Path, err)
		}
		p, flags := j.drvPath(i), uintptr(unix.MS_BIND)
		if j.dirs[i] = fi.IsDir(); j.dirs[i] {
			flags |= unix.MS_REC
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err != nil {
			return fmt.Errorf("executor: %w", err)
		}
		if err := unix.Mount(m.Host, p, "", flags, ""); err != nil {
			return fmt.Errorf("executor: binding %s for the container: %w", m.Host, err)
		}
		j.mounts = append(j.mounts, p)
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("executor: making %s read-only for the container: %w", m.Host, err)
		}
	}
	return nil
}

// drvPath is where the cards' i-th mount is bound under dir.
func (j *containerJail) drvPath(i int) string {
	return filepath.Join(j.dir, "drv", strconv.Itoa(i))
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
	config := filepath.Join(j.dir, "config.json")
	if err := os.WriteFile(config, b, 0o600); err != nil {
		return err
	}
	if spec.Hooks != nil {
		// A createContainer hook runs as the container's root and reads
		// the bundle (nvidia-ctk's hooks find the root file system there).
		base := int(j.s.cfg.ContainerIDBase)
		if err := os.Chown(config, base, base); err != nil {
			return err
		}
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
		User:            specs.User{UID: j.img.UID, GID: j.img.GID, AdditionalGids: j.groups()},
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
	for i, d := range j.devs {
		typ := "c"
		if d.mode == unix.S_IFBLK {
			typ = "b"
		}
		major, minor := int64(unix.Major(d.rdev)), int64(unix.Minor(d.rdev))
		res.Devices = append(res.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: typ, Major: ptr(major), Minor: ptr(minor), Access: "rwm"})
		// Bound, not made: a user namespace may not make device nodes.
		mounts = append(mounts, specs.Mount{Destination: d.path, Type: "bind", Source: j.devPath(i), Options: []string{"bind", "nosuid", "noexec"}})
	}
	for i, m := range j.cardMounts {
		bind := "bind"
		if j.dirs[i] {
			bind = "rbind"
		}
		mounts = append(mounts, specs.Mount{Destination: m.Path, Type: "bind", Source: j.drvPath(i), Options: []string{bind, "ro", "nosuid", "nodev"}})
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
	if c := j.img.Cards; c != nil {
		spec.Hooks = c.Hooks
	}
	sc, err := seccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("the default seccomp profile: %w", err)
	}
	spec.Linux.Seccomp = sc
	return spec, nil
}

// groups are the supplementary groups of the container's processes: the
// image user's, then those the cards' edits ask for.
func (j *containerJail) groups() []uint32 {
	g := slices.Clone(j.img.Groups)
	if c := j.img.Cards; c != nil {
		for _, x := range c.Groups {
			if !slices.Contains(g, x) {
				g = append(g, x)
			}
		}
	}
	return g
}

// defaultCaps are Docker's default capabilities.
func defaultCaps() []string {
	return []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
		"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
}

func ptr[T any](v T) *T { return &v }

// enter runs cmd in the container through the runtime's exec, as the
// image's user. With tty the process gets a terminal of the container's
// (on its devpts, of the size asked for before it starts), which the
// runtime, run in the foreground on a terminal of the node's, relays to
// and from that terminal, whose master is returned; a new size of it
// reaches the container's (the runtime forwards SIGWINCH), and so do
// signals to the runtime.
func (j *containerJail) enter(cmd *exec.Cmd, tty bool, rows, cols uint16) (_ *os.File, err error) {
	j.mu.Lock()
	finished := j.finished
	j.mu.Unlock()
	if finished {
		return nil, ErrAttemptEnded
	}
	caps := defaultCaps()
	proc := specs.Process{Args: cmd.Args, Env: cmd.Env, Cwd: cmd.Dir, NoNewPrivileges: true,
		User:         specs.User{UID: j.img.UID, GID: j.img.GID, AdditionalGids: j.groups()},
		Capabilities: &specs.LinuxCapabilities{Bounding: caps}}
	if j.img.UID == 0 {
		proc.Capabilities.Effective, proc.Capabilities.Permitted = caps, caps
	}
	var master, slave *os.File
	if tty {
		proc.Terminal = true
		if rows > 0 && cols > 0 {
			proc.ConsoleSize = &specs.Box{Height: uint(rows), Width: uint(cols)}
		}
		if master, slave, err = pty.Open(); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				master.Close()
			}
		}()
		if rows > 0 || cols > 0 {
			if err := setTTYSize(master, rows, cols); err != nil {
				slave.Close()
				return nil, err
			}
		}
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
		if slave != nil {
			slave.Close()
		}
		return nil, err
	}
	cmd.Path = j.rt.Command
	cmd.Args = []string{j.rt.Command, "--root", j.rt.Root, "exec", "--process", f.Name(), j.id}
	cmd.Dir = j.dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if tty {
		if err := startOnTTY(cmd, slave, &unix.SysProcAttr{}); err != nil {
			return nil, err
		}
		return master, nil
	}
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
		for i := range j.cardMounts {
			_ = os.Remove(j.drvPath(i))
		}
		for _, d := range []string{filepath.Join(j.dir, "drv"), filepath.Join(j.dir, "dev")} {
			_ = os.Remove(d)
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
