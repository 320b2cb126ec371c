package executor

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupDriver makes one cgroup per attempt in cgroup v2 or in the v1
// hierarchies.
type cgroupDriver interface {
	version() string
	// create makes the attempt's cgroup called name, with its limits.
	create(name string, l Limits, devs []devNum) (cgroupJob, error)
	// existing returns the cgroup called name if it exists, for cleaning
	// what a dead node left behind.
	existing(name string) cgroupJob
	// enforcesDevices tells whether device access is limited by the
	// cgroup as well as by the mount namespace.
	enforcesDevices() bool
}

// cgroupJob is one attempt's cgroup.
type cgroupJob interface {
	// attach arranges for the next process the calling, locked OS thread
	// starts to begin inside the cgroup. after undoes what attach did to
	// the thread; call it once the process has started (or failed to).
	attach(attr *syscall.SysProcAttr) (after func(), err error)
	// procs lists the processes in the cgroup (never the node's own).
	procs() []int
	// signal sends sig to every process in the cgroup.
	signal(sig syscall.Signal)
	// killAll kills every process in the cgroup, even one forking as fast
	// as it can, and returns once the cgroup is empty or the deadline
	// passed.
	killAll(deadline time.Time) error
	// oomKills is how many processes the kernel killed for the memory
	// limit.
	oomKills() int
	// remove deletes the (empty) cgroup.
	remove(deadline time.Time) error
}

// devNum is a device node the attempt may use, for the devices cgroup.
type devNum struct {
	block        bool
	major, minor uint32
}

// cgroupTimeout bounds killing and removing a cgroup.
const cgroupTimeout = 10 * time.Second

// detectCgroups finds the cgroup hierarchies mounted under root and picks
// v2 when its memory and pids controllers are available, else v1 when the
// memory and pids hierarchies are mounted. The error says what is missing.
func detectCgroups(root, parent string) (cgroupDriver, error) {
	mounts, err := cgroupMounts(root)
	if err != nil {
		return nil, err
	}
	var why []string
	if mounts.v2 != "" {
		b, err := os.ReadFile(filepath.Join(mounts.v2, "cgroup.controllers"))
		ctrls := strings.Fields(string(b))
		if err == nil && slices.Contains(ctrls, "memory") && slices.Contains(ctrls, "pids") {
			return &cgroupV2{root: mounts.v2, parent: parent, cpu: slices.Contains(ctrls, "cpu")}, nil
		}
		why = append(why, fmt.Sprintf("cgroup v2 at %s has controllers %v (need memory and pids)", mounts.v2, ctrls))
	}
	if mounts.v1["memory"] != "" && mounts.v1["pids"] != "" {
		return &cgroupV1{mounts: mounts.v1, parent: parent}, nil
	}
	why = append(why, fmt.Sprintf("no cgroup v1 memory and pids hierarchies under %s", root))
	return nil, errors.New(strings.Join(why, "; "))
}

type cgroupMountSet struct {
	v2 string            // mount point of cgroup2, "" if none
	v1 map[string]string // controller -> mount point
}

// cgroupMounts reads the mount table for cgroup file systems mounted
// under root, as the calling thread sees it (threadMounts): /proc/self is
// the main thread's, which a goroutine that unshared its mount namespace
// on that thread may have left in a sandbox's.
func cgroupMounts(root string) (cgroupMountSet, error) {
	set := cgroupMountSet{v1: map[string]string{}}
	mounts, err := threadMounts()
	if err != nil {
		return set, err
	}
	for _, m := range mounts {
		if !within(m.point, root) {
			continue
		}
		switch m.fstype {
		case "cgroup2":
			if set.v2 == "" {
				set.v2 = m.point
			}
		case "cgroup":
			for _, opt := range strings.Split(m.super, ",") {
				switch opt {
				case "memory", "pids", "cpu", "devices", "freezer":
					if set.v1[opt] == "" {
						set.v1[opt] = m.point
					}
				}
			}
		}
	}
	return set, nil
}

// cgroupV1 keeps an attempt's cgroup in each v1 hierarchy it uses.
type cgroupV1 struct {
	mounts map[string]string
	parent string
}

func (c *cgroupV1) version() string { return "v1" }

func (c *cgroupV1) enforcesDevices() bool { return c.mounts["devices"] != "" }

func (c *cgroupV1) dirs(name string) map[string]string {
	out := map[string]string{}
	for ctrl, mnt := range c.mounts {
		out[ctrl] = filepath.Join(mnt, c.parent, name)
	}
	return out
}

func (c *cgroupV1) existing(name string) cgroupJob {
	j := &cgroupV1Job{dirs: map[string]string{}, mounts: c.mounts}
	for ctrl, d := range c.dirs(name) {
		if _, err := os.Stat(d); err == nil {
			j.dirs[ctrl] = d
		}
	}
	if len(j.dirs) == 0 {
		return nil
	}
	return j
}

func (c *cgroupV1) create(name string, l Limits, devs []devNum) (cgroupJob, error) {
	j := &cgroupV1Job{dirs: map[string]string{}, mounts: c.mounts}
	for ctrl, d := range c.dirs(name) {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			j.remove(time.Now().Add(cgroupTimeout))
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		j.dirs[ctrl] = d
	}
	fail := func(err error) (cgroupJob, error) {
		j.remove(time.Now().Add(cgroupTimeout))
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	mem := j.dirs["memory"]
	if l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if err := writeFile(mem, "memory.limit_in_bytes", v); err != nil {
			return fail(err)
		}
		if exists(mem, "memory.memsw.limit_in_bytes") { // no swapping past the limit
			if err := writeFile(mem, "memory.memsw.limit_in_bytes", v); err != nil {
				return fail(err)
			}
		}
	}
	if err := writeFile(j.dirs["pids"], "pids.max", strconv.Itoa(l.Pids)); err != nil {
		return fail(err)
	}
	if d := j.dirs["cpu"]; d != "" && exists(d, "cpu.shares") {
		// cpu.weight 100 is cpu.shares 1024.
		if err := writeFile(d, "cpu.shares", strconv.Itoa(max(2, l.CPUWeight*1024/100))); err != nil {
			return fail(err)
		}
	}
	if d := j.dirs["devices"]; d != "" {
		if err := writeFile(d, "devices.deny", "a"); err != nil {
			return fail(err)
		}
		rules := []string{"c 136:* rwm", "c 5:2 rwm"} // the sandbox's pts and ptmx
		for _, s := range standardDevices {
			rules = append(rules, fmt.Sprintf("c %d:%d rwm", s.major, s.minor))
		}
		for _, dv := range devs {
			kind := "c"
			if dv.block {
				kind = "b"
			}
			rules = append(rules, fmt.Sprintf("%s %d:%d rwm", kind, dv.major, dv.minor))
		}
		for _, r := range rules {
			if err := writeFile(d, "devices.allow", r); err != nil {
				return fail(err)
			}
		}
	}
	return j, nil
}

type cgroupV1Job struct {
	dirs   map[string]string // controller -> this cgroup's directory
	mounts map[string]string // controller -> hierarchy mount point
}

// attach moves the calling thread into the cgroup in every hierarchy (v1
// places threads, not processes), so that the process it forks starts
// there; after moves it back to where it was.
func (j *cgroupV1Job) attach(*syscall.SysProcAttr) (func(), error) {
	tid := strconv.Itoa(unix.Gettid())
	orig, err := threadCgroups()
	if err != nil {
		return nil, err
	}
	back := func() {
		for ctrl := range j.dirs {
			if p, ok := orig[ctrl]; ok {
				_ = writeFile(filepath.Join(j.mounts[ctrl], p), "tasks", tid)
			}
		}
	}
	for ctrl, d := range j.dirs {
		if _, ok := orig[ctrl]; !ok {
			back()
			return nil, fmt.Errorf("cgroup v1: this thread is in no %s cgroup", ctrl)
		}
		if err := writeFile(d, "tasks", tid); err != nil {
			back()
			return nil, fmt.Errorf("cgroup v1: %w", err)
		}
	}
	return back, nil
}

func (j *cgroupV1Job) procs() []int { return readPids(filepath.Join(j.anyDir(), "cgroup.procs")) }

func (j *cgroupV1Job) anyDir() string {
	if d, ok := j.dirs["pids"]; ok {
		return d
	}
	for _, d := range j.dirs {
		return d
	}
	return ""
}

func (j *cgroupV1Job) signal(sig syscall.Signal) {
	for _, pid := range j.procs() {
		_ = syscall.Kill(pid, sig)
	}
}

func (j *cgroupV1Job) killAll(deadline time.Time) error {
	if len(j.procs()) == 0 {
		// Nothing can join an empty cgroup but by a write of the node's:
		// the common end of an attempt whose processes all exited. The
		// freeze and thaw cost more than the attempt's start.
		return nil
	}
	fr := j.dirs["freezer"]
	frozen := false
	if fr != "" && writeFile(fr, "freezer.state", "FROZEN") == nil {
		// A frozen cgroup cannot fork, so one pass finds every process.
		frozen = pollUntil(deadline, func() bool {
			b, err := os.ReadFile(filepath.Join(fr, "freezer.state"))
			return err != nil || strings.TrimSpace(string(b)) == "FROZEN"
		})
	}
	j.signal(syscall.SIGKILL)
	if fr != "" {
		_ = writeFile(fr, "freezer.state", "THAWED") // killed tasks die once thawed
	}
	if pollUntil(deadline, func() bool {
		if len(j.procs()) == 0 {
			return true
		}
		j.signal(syscall.SIGKILL)
		return false
	}) {
		return nil
	}
	return fmt.Errorf("cgroup %s still has processes %v (frozen first: %v)", j.anyDir(), j.procs(), frozen)
}

func (j *cgroupV1Job) oomKills() int {
	return counter(filepath.Join(j.dirs["memory"], "memory.oom_control"), "oom_kill")
}

func (j *cgroupV1Job) remove(deadline time.Time) error {
	return removeCgroupDirs(deadline, slices.Collect(maps.Values(j.dirs)))
}

// cgroupV2 keeps an attempt's cgroup in the unified hierarchy.
type cgroupV2 struct {
	root   string // mount point
	parent string
	cpu    bool // the cpu controller is available
}

func (c *cgroupV2) version() string { return "v2" }

// enforcesDevices is false: cgroup v2 limits devices only with an eBPF
// program; the sandbox's own /dev is the boundary there.
func (c *cgroupV2) enforcesDevices() bool { return false }

func (c *cgroupV2) existing(name string) cgroupJob {
	d := filepath.Join(c.root, c.parent, name)
	if _, err := os.Stat(d); err != nil {
		return nil
	}
	return &cgroupV2Job{dir: d}
}

func (c *cgroupV2) create(name string, l Limits, _ []devNum) (cgroupJob, error) {
	ctrls := "+memory +pids"
	if c.cpu {
		ctrls += " +cpu"
	}
	// Enable the controllers down the path to the attempt's cgroup.
	dir := c.root
	for _, part := range strings.Split(filepath.Clean(c.parent), string(filepath.Separator)) {
		if err := writeFile(dir, "cgroup.subtree_control", ctrls); err != nil {
			return nil, fmt.Errorf("cgroup v2: enabling %s in %s: %w", ctrls, dir, err)
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
	}
	if err := writeFile(dir, "cgroup.subtree_control", ctrls); err != nil {
		return nil, fmt.Errorf("cgroup v2: enabling %s in %s: %w", ctrls, dir, err)
	}
	j := &cgroupV2Job{dir: filepath.Join(dir, name)}
	if err := os.Mkdir(j.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	fail := func(err error) (cgroupJob, error) {
		j.remove(time.Now().Add(cgroupTimeout))
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if l.MemoryBytes > 0 {
		if err := writeFile(j.dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return fail(err)
		}
		if exists(j.dir, "memory.swap.max") {
			if err := writeFile(j.dir, "memory.swap.max", "0"); err != nil {
				return fail(err)
			}
		}
	}
	if exists(j.dir, "memory.oom.group") { // an OOM kills the whole job, not one worker
		if err := writeFile(j.dir, "memory.oom.group", "1"); err != nil {
			return fail(err)
		}
	}
	if err := writeFile(j.dir, "pids.max", strconv.Itoa(l.Pids)); err != nil {
		return fail(err)
	}
	if c.cpu {
		if err := writeFile(j.dir, "cpu.weight", strconv.Itoa(l.CPUWeight)); err != nil {
			return fail(err)
		}
	}
	return j, nil
}

type cgroupV2Job struct {
	dir string
}

// attach has the process cloned straight into the cgroup (clone3
// CLONE_INTO_CGROUP, Linux 5.7).
func (j *cgroupV2Job) attach(attr *syscall.SysProcAttr) (func(), error) {
	fd, err := unix.Open(j.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	attr.UseCgroupFD = true
	attr.CgroupFD = fd
	return func() { unix.Close(fd) }, nil
}

func (j *cgroupV2Job) procs() []int { return readPids(filepath.Join(j.dir, "cgroup.procs")) }

func (j *cgroupV2Job) signal(sig syscall.Signal) {
	for _, pid := range j.procs() {
		_ = syscall.Kill(pid, sig)
	}
}

func (j *cgroupV2Job) killAll(deadline time.Time) error {
	if len(j.procs()) == 0 {
		return nil // as for v1: nothing can join an empty cgroup
	}
	if writeFile(j.dir, "cgroup.kill", "1") != nil { // before Linux 5.14
		if writeFile(j.dir, "cgroup.freeze", "1") == nil {
			pollUntil(deadline, func() bool { return counter(filepath.Join(j.dir, "cgroup.events"), "frozen") == 1 })
		}
		j.signal(syscall.SIGKILL)
		_ = writeFile(j.dir, "cgroup.freeze", "0")
	}
	if pollUntil(deadline, func() bool {
		if len(j.procs()) == 0 {
			return true
		}
		j.signal(syscall.SIGKILL)
		return false
	}) {
		return nil
	}
	return fmt.Errorf("cgroup %s still has processes %v", j.dir, j.procs())
}

func (j *cgroupV2Job) oomKills() int {
	return counter(filepath.Join(j.dir, "memory.events"), "oom_kill")
}

func (j *cgroupV2Job) remove(deadline time.Time) error {
	return removeCgroupDirs(deadline, []string{j.dir})
}

// removeCgroupDirs removes cgroup directories, retrying while the kernel
// still counts exiting processes in them.
func removeCgroupDirs(deadline time.Time, dirs []string) error {
	var last error
	ok := pollUntil(deadline, func() bool {
		last = nil
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				last = fmt.Errorf("removing cgroup %s: %w", d, err)
			}
		}
		return last == nil
	})
	if ok {
		return nil
	}
	return last
}

// threadCgroups returns the calling thread's cgroup path per v1
// controller.
func threadCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			if ctrl != "" {
				out[ctrl] = parts[2]
			}
		}
	}
	return out, nil
}

// readPids reads a cgroup.procs file, leaving out the node itself.
func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != self {
			out = append(out, pid)
		}
	}
	return out
}

// counter reads "name N" from a flat keyed file such as memory.events.
func counter(path, name string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func writeFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, filepath.Join(dir, name), err)
	}
	return nil
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// pollUntil calls cond every few milliseconds until it holds or the
// deadline passes; it tells whether it held.
func pollUntil(deadline time.Time, cond func() bool) bool {
	wait := time.Millisecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}
