package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sandbox is IsolationSandbox on Linux.
//
// How a job is started: a goroutine locks itself to a fresh OS thread and
// never unlocks, so the thread ends with it and takes its namespaces along
// (the Go runtime does not reuse a thread left locked). On that thread the
// executor unshares a mount namespace and assembles the job's tree (rootfs),
// enters the job's network namespace, sets no_new_privs, arranges for the
// child to start inside the attempt's cgroup, and starts the job with
// exec.Cmd: the child inherits the thread's namespaces, is chrooted into the
// tree, gets a new IPC namespace, and drops to the attempt's uid and gid
// with no supplementary groups before exec. No helper binary and no re-exec
// of the node are needed, so the sandbox works from any program that embeds
// the executor, tests included.
type sandbox struct {
	cfg         Config
	log         *slog.Logger
	uids        *uidPool
	cg          cgroupDriver
	net         *egress // nil when egress is unavailable
	netWhy      string  // why it is
	hide        []string
	scratch     []string
	nameservers []netip.Addr
	runtime     string // the OCI runtime that runs images ("": none)
	runtimeWhy  string // why no image runs ("" when runtime runs them)
	// mountPoint is where each host-command attempt's tree is assembled
	// and chrooted into: one empty directory under Root for them all.
	// Each attempt mounts its tree there in a mount namespace of its own,
	// so attempts never see each other's; and a start saves making and
	// removing a directory on the node's disk (on a slow one, 0.3 ms and
	// 0.2 ms).
	mountPoint string
}

func newSandbox(cfg Config) (isolator, error) {
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("the sandbox needs root (running as uid %d)", euid)
	}
	cg, err := detectCgroups(cfg.CgroupRoot, cfg.CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("no usable cgroups: %w", err)
	}
	if err := probeNamespaces(); err != nil {
		return nil, fmt.Errorf("cannot make mount and network namespaces: %w", err)
	}
	uids, err := newUIDPool(cfg.LockDir, cfg.UIDMin, cfg.UIDMax)
	if err != nil {
		return nil, err
	}
	s := &sandbox{cfg: cfg, log: cfg.Logger, uids: uids, cg: cg, nameservers: nameservers(cfg), mountPoint: filepath.Join(cfg.Root, ".root")}
	if err := os.Mkdir(s.mountPoint, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sandbox mount point: %w", err)
	}
	if s.net, err = newEgress(cfg); err != nil {
		s.netWhy = err.Error()
		s.log.Warn("executor: sandbox without egress: jobs can have no network or the node's", "reason", s.netWhy)
	}
	if s.hide, err = existingDirs(append([]string{"/root", "/home", "/run", cfg.Root}, cfg.HideDirs...)); err != nil {
		return nil, err
	}
	if s.scratch, err = existingDirs([]string{"/tmp", "/var/tmp"}); err != nil {
		return nil, err
	}
	if n := uids.skipped(); n > 0 {
		s.log.Info("executor: sandbox uids used by accounts or subordinate ranges are skipped", "count", n)
	}
	s.runtime, s.runtimeWhy = pickRuntime(cfg.Runtime, filepath.Join(cfg.Root, ".probe"))
	if s.runtimeWhy != "" && cfg.Runtime != "" {
		s.log.Warn("executor: images are not run", "reason", s.runtimeWhy)
	}
	s.reapOrphans()
	s.log.Info("executor: isolation is sandbox", "cgroup", cg.version(), "devices_cgroup", cg.enforcesDevices(),
		"egress", s.net != nil, "uids", fmt.Sprintf("%d-%d", cfg.UIDMin, cfg.UIDMax), "hidden", s.hide)
	return s, nil
}

func (s *sandbox) close() { s.uids.close() }

func (s *sandbox) capabilities() Capabilities {
	c := Capabilities{Isolation: IsolationSandbox, Limits: true, Cgroup: s.cg.version(),
		Networks: []NetworkMode{NetworkNone, NetworkHost}, ImagesReason: s.runtimeWhy}
	c.Runtime = s.runtime
	if s.net != nil {
		c.Networks = []NetworkMode{NetworkNone, NetworkEgress, NetworkHost}
		c.PrivateNet = true
	} else {
		c.PrivateNetReason = "the node " + strings.TrimPrefix(s.netWhy, "egress ")
	}
	return c
}

// cgroupName is the attempt's cgroup under Config.CgroupParent.
func cgroupName(uid uint32) string { return "u" + strconv.FormatUint(uint64(uid), 10) }

// cleanStale removes what a dead node left for uid: its processes, cgroup
// and network. The caller holds uid's lock.
func (s *sandbox) cleanStale(uid uint32) {
	if j := s.cg.existing(cgroupName(uid)); j != nil {
		deadline := time.Now().Add(cgroupTimeout)
		if err := j.killAll(deadline); err != nil {
			s.log.Error("executor: orphaned attempt", "uid", uid, "err", err)
		}
		if err := j.remove(deadline); err != nil {
			s.log.Warn("executor: orphaned attempt", "uid", uid, "err", err)
		}
		s.log.Warn("executor: cleaned up an attempt a previous node left running", "uid", uid)
	}
	if s.net != nil && s.net.present(uid) {
		s.net.teardown(uid)
	}
}

// reapOrphans cleans the uids of the range that a dead node left behind.
func (s *sandbox) reapOrphans() {
	seen := map[uint32]bool{}
	var dirs []string
	for _, d := range []string{filepath.Join(s.cfg.CgroupRoot, "*", s.cfg.CgroupParent, "u*"),
		filepath.Join(s.cfg.CgroupRoot, s.cfg.CgroupParent, "u*"), filepath.Join(netnsDir, "gpumesh-u*")} {
		m, _ := filepath.Glob(d)
		dirs = append(dirs, m...)
	}
	for _, d := range dirs {
		base := filepath.Base(d)
		n, err := strconv.ParseUint(base[strings.LastIndexByte(base, 'u')+1:], 10, 32)
		uid := uint32(n)
		if err != nil || uid < s.cfg.UIDMin || uid > s.cfg.UIDMax || seen[uid] {
			continue
		}
		seen[uid] = true
		if s.uids.tryAcquire(uid) {
			s.cleanStale(uid)
			s.uids.release(uid)
		}
	}
}

// jail allocates the attempt's uid, hands it its directories, and makes
// its cgroup and network.
func (s *sandbox) jail(r *Run) (_ jail, err error) {
	if r.attempt.Image != nil {
		return s.containerJail(r)
	}
	return s.hostJail(r)
}

// hostJail makes a host-command attempt's jail.
func (s *sandbox) hostJail(r *Run) (_ jail, err error) {
	l := r.attempt.Limits.withDefaults()
	if l.Network == NetworkEgress && s.net == nil {
		return nil, fmt.Errorf("%w: %s", ErrNetworkUnavailable, s.netWhy)
	}
	if r.attempt.Private != nil && s.net == nil {
		return nil, fmt.Errorf("%w: a private network %s", ErrNetworkUnavailable, strings.TrimPrefix(s.netWhy, "egress "))
	}
	nodes, nums, err := s.devices(l.Devices)
	if err != nil {
		return nil, err
	}
	uid, err := s.uids.acquire(s.cleanStale)
	if err != nil {
		return nil, err
	}
	j := &sandboxJail{s: s, r: r, uidv: uid, limits: l}
	defer func() {
		if err != nil {
			j.finish()
		}
	}()
	for _, d := range []string{r.WorkDir(), r.CheckpointDir(), r.tmpDir()} {
		if err := chownTree(d, int(uid), int(uid)); err != nil {
			return nil, fmt.Errorf("executor: handing %s to uid %d: %w", d, uid, err)
		}
	}
	if j.cg, err = s.cg.create(cgroupName(uid), l, nums); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	j.fs = &rootfs{
		dir:      s.mountPoint,
		hide:     s.hide,
		scratch:  s.scratch,
		binds:    []string{r.WorkDir(), r.CheckpointDir(), r.tmpDir()},
		devices:  nodes,
		tmpBytes: l.MemoryBytes,
		uid:      int(uid),
		gid:      int(uid),
	}
	if l.Network == NetworkEgress {
		j.fs.resolv = filepath.Join(r.Dir(), "resolv.conf")
		if err := os.WriteFile(j.fs.resolv, resolvConf(s.nameservers), 0o644); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		if err := s.net.setup(uid); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		j.named = true
	}
	if p := r.attempt.Private; p != nil {
		if !j.named {
			if err := s.net.isolated(uid); err != nil {
				return nil, fmt.Errorf("executor: %w", err)
			}
			j.named = true
		}
		if j.priv, err = s.net.private(uid, p); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	return j, nil
}

// devices checks the attempt's device nodes under Config.DevDir.
func (s *sandbox) devices(names []string) ([]devNode, []devNum, error) {
	var nodes []devNode
	var nums []devNum
	for _, n := range names {
		name, err := deviceName(n)
		if err != nil {
			return nil, nil, err
		}
		p := filepath.Join(s.cfg.DevDir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("executor: limits: device %q: %w", n, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || fi.Mode()&os.ModeDevice == 0 {
			return nil, nil, fmt.Errorf("executor: limits: device %q: %s is not a device node", n, p)
		}
		mode, block := uint32(unix.S_IFCHR), false
		if fi.Mode()&os.ModeCharDevice == 0 {
			mode, block = unix.S_IFBLK, true
		}
		nodes = append(nodes, devNode{name: name, mode: mode, rdev: st.Rdev})
		nums = append(nums, devNum{block: block, major: unix.Major(st.Rdev), minor: unix.Minor(st.Rdev)})
	}
	return nodes, nums, nil
}

// sandboxJail is one sandboxed attempt.
type sandboxJail struct {
	s      *sandbox
	r      *Run
	uidv   uint32
	limits Limits
	cg     cgroupJob
	fs     *rootfs
	// named tells that the job's network namespace is uid's named one
	// (egress, or a private network), which finish removes.
	named bool
	priv  net.Listener // the private network's (PrivateNet), or nil

	// ns holds the job's namespaces (enter.go): opened when it starts,
	// closed by finish.
	ns namespaces

	mu       sync.Mutex
	finished bool // after finish, the uid and cgroup may belong to another attempt
}

func (j *sandboxJail) uid() int { return int(j.uidv) }

func (j *sandboxJail) cgroupDir() string {
	if v2, ok := j.cg.(*cgroupV2Job); ok {
		return v2.dir
	}
	return ""
}

// hiddenBy names the hidden (Config.HideDirs, /root, /home, /run, the
// attempts' root) or private (/tmp, /var/tmp) directory that covers path
// in the job's tree; the job's own directories, bound over them, are seen.
func (j *sandboxJail) hiddenBy(path string) string {
	for _, b := range j.fs.binds {
		if within(filepath.Clean(path), b) {
			return ""
		}
	}
	path = filepath.Clean(path)
	for _, dirs := range [][]string{j.fs.hide, j.fs.scratch} {
		for _, h := range dirs {
			if within(path, h) {
				return h
			}
		}
	}
	return ""
}

func (j *sandboxJail) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: this thread's namespaces die with it.
		runtime.LockOSThread()
		errc <- j.startLocked(cmd)
	}()
	return <-errc
}

// startLocked runs on a locked thread that no other goroutine will use.
func (j *sandboxJail) startLocked(cmd *exec.Cmd) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	if err := j.fs.build(); err != nil {
		return fmt.Errorf("sandbox file system: %w", err)
	}
	switch {
	case j.named:
		fd, err := unix.Open(j.s.net.nsPath(j.uidv), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("network namespace: %w", err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("network namespace: %w", err)
		}
	case j.limits.Network == NetworkNone:
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace: %w", err)
		}
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	if err := j.ns.openThread(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Chroot:     j.fs.dir,
		Credential: &syscall.Credential{Uid: j.uidv, Gid: j.uidv, Groups: []uint32{}},
		Cloneflags: unix.CLONE_NEWIPC,
	}
	after, err := j.cg.attach(cmd.SysProcAttr)
	if err != nil {
		return err
	}
	err = cmd.Start()
	after()
	if err != nil {
		return err
	}
	j.ns.openIPC(cmd.Process.Pid)
	// The job dies first when the node runs out of memory. (A child it
	// forked before this write keeps the node's score; the memory limit
	// bounds it regardless.)
	for _, pid := range append([]int{cmd.Process.Pid}, j.cg.procs()...) {
		_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
	}
	return nil
}

func (j *sandboxJail) signal(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.finished && j.cg != nil {
		j.cg.signal(sig)
	}
}

// finish kills what is left in the cgroup, then removes the cgroup, the
// network and the tmp directory, gives the work directory to root (the
// node tidies it once it has kept the outputs there), and gives the uid
// back; if some process of the attempt cannot be killed, the uid stays
// taken.
func (j *sandboxJail) finish() bool {
	j.mu.Lock()
	j.finished = true
	j.ns.close()
	j.mu.Unlock()
	log := j.s.log.With("job", j.r.attempt.JobID, "share", j.r.attempt.Share, "epoch", j.r.attempt.Epoch, "uid", j.uidv)
	deadline := time.Now().Add(cgroupTimeout)
	oom, clean := false, true
	if j.cg != nil {
		if err := j.cg.killAll(deadline); err != nil {
			log.Error("executor: attempt processes survive; its uid stays taken", "err", err)
			clean = false
		}
		oom = j.cg.oomKills() > 0
		if err := j.cg.remove(deadline); err != nil {
			log.Warn("executor: removing cgroup", "err", err)
		}
	}
	if j.priv != nil {
		j.priv.Close()
	}
	if j.named {
		j.s.net.teardown(j.uidv)
	}
	if j.fs != nil && j.fs.resolv != "" {
		_ = os.Remove(j.fs.resolv)
	}
	// The work directory stays, out of the uid's hands, until the node has
	// kept the outputs there and tidies it (Executor.Tidy).
	for _, d := range []string{j.r.WorkDir(), j.r.tmpDir()} {
		var err error
		if j.s.cfg.KeepAttemptDirs || d == j.r.WorkDir() {
			err = chownTree(d, 0, 0)
		} else {
			err = os.RemoveAll(d)
		}
		if err != nil {
			log.Warn("executor: attempt dir", "err", err)
		}
	}
	if err := chownTree(j.r.CheckpointDir(), 0, 0); err != nil {
		log.Warn("executor: checkpoint dir", "err", err)
	}
	if clean {
		j.s.uids.release(j.uidv)
	}
	return oom
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	return nil
}

// probeNamespaces checks, on a thread thrown away afterwards, that this
// process may make mount, network and IPC namespaces.
func probeNamespaces() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	}()
	return <-errc
}

// chownTree gives a directory tree to uid:gid without following links.
func chownTree(dir string, uid, gid int) error {
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// existingDirs resolves links in dirs and keeps those that exist, without
// duplicates.
func existingDirs(dirs []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		real, err := filepath.EvalSymlinks(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		if real, err = filepath.Abs(real); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		if !seen[real] && real != "/" {
			seen[real] = true
			out = append(out, real)
		}
	}
	return out, nil
}
