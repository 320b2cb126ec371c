package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootfs is the file system a sandboxed job sees: the node's, read-only
// and without set-uid, with the sensitive places covered, plus its own
// directories read-write at the same paths as on the node. build assembles
// it under dir in the calling thread's private mount namespace; the job is
// then chrooted into dir.
type rootfs struct {
	dir      string   // where the tree is assembled (empty dir on the node)
	hide     []string // covered by an empty read-only tmpfs
	scratch  []string // covered by a private writable tmpfs, mode 1777
	binds    []string // the job's own directories, bound read-write
	devices  []devNode
	resolv   string // a file bound over /etc/resolv.conf, "" for none
	tmpBytes int64  // size of each scratch tmpfs and /dev/shm; 0: half of RAM
	uid, gid int
}

// devNode is a card's device node to recreate in the sandbox's /dev.
type devNode struct {
	name string // path under /dev
	mode uint32 // S_IFCHR or S_IFBLK
	rdev uint64
}

// Mount flags of the pieces of the tree.
const (
	roFlags   = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	hideFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// build assembles the tree. The calling thread must be locked and already
// in a mount namespace of its own (unshare(CLONE_NEWNS)); nothing it does
// is seen outside that namespace.
func (fs *rootfs) build() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("/", fs.dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding / to %s: %w", fs.dir, err)
	}
	mounts, err := threadMounts() // read once: the two steps below change only what is covered
	if err != nil {
		return err
	}
	if err := fs.detachCovered(mounts); err != nil {
		return err
	}
	if err := fs.readOnly(mounts); err != nil {
		return err
	}
	if err := fs.proc(); err != nil {
		return err
	}
	if err := fs.dev(); err != nil {
		return err
	}
	covered, err := fs.cover()
	if err != nil {
		return err
	}
	for _, b := range fs.binds {
		target := fs.dir + b
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mount point for %s: %w", b, err)
		}
		if err := unix.Mount(b, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", b, err)
		}
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("remounting %s nosuid: %w", b, err)
		}
	}
	if fs.resolv != "" {
		target, err := fs.fileIn("/etc/resolv.conf")
		if err != nil {
			return err
		}
		if err := unix.Mount(fs.resolv, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding resolv.conf: %w", err)
		}
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|roFlags, ""); err != nil {
			return fmt.Errorf("remounting resolv.conf read-only: %w", err)
		}
	}
	// Read-only once their mount points are made. Only the covers mounted:
	// a hidden directory inside another (the attempts under the node's
	// data dir) is a plain directory of the outer cover by now.
	for _, h := range covered {
		if err := unix.Mount("", fs.dir+h, "", unix.MS_REMOUNT|unix.MS_RDONLY|hideFlags, ""); err != nil {
			return fmt.Errorf("remounting %s read-only: %w", h, err)
		}
	}
	return nil
}

// detachCovered unmounts the node's mounts at and under the places build
// covers (/proc, /dev, hidden and scratch directories), so that none of
// them stays in the job's namespace, not even shadowed. mounts is the
// thread's mount table once the tree is bound at fs.dir.
func (fs *rootfs) detachCovered(mounts []mountEntry) error {
	mounts = slices.Clone(mounts)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].point) > len(mounts[j].point) })
	for _, m := range mounts {
		if m.point == fs.dir || !within(m.point, fs.dir) || !fs.covered(strings.TrimPrefix(m.point, fs.dir)) {
			continue
		}
		err := unix.Unmount(m.point, unix.MNT_DETACH)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", strings.TrimPrefix(m.point, fs.dir), err)
		}
	}
	return nil
}

// readOnly remounts every mount of the bound tree read-only, nosuid and
// nodev, from mounts, the table detachCovered was given: those it
// detached (everything covered) are passed over.
func (fs *rootfs) readOnly(mounts []mountEntry) error {
	for _, m := range mounts {
		if !within(m.point, fs.dir) || m.point != fs.dir && fs.covered(strings.TrimPrefix(m.point, fs.dir)) {
			continue
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | roFlags)
		for _, o := range strings.Split(m.opts, ",") {
			switch o {
			case "noexec":
				flags |= unix.MS_NOEXEC
			case "noatime":
				flags |= unix.MS_NOATIME
			case "nodiratime":
				flags |= unix.MS_NODIRATIME
			case "relatime":
				flags |= unix.MS_RELATIME
			}
		}
		if err := unix.Mount("", m.point, "", flags, ""); err != nil {
			return fmt.Errorf("remounting %s read-only: %w", strings.TrimPrefix(m.point, fs.dir), err)
		}
	}
	return nil
}

// covered tells whether a path of the job's tree is hidden under something
// build mounts over it.
func (fs *rootfs) covered(p string) bool {
	for _, c := range append(append([]string{"/proc", "/dev"}, fs.hide...), fs.scratch...) {
		if within(p, c) {
			return true
		}
	}
	return false
}

// proc mounts a /proc that shows only the job's own processes: with
// hidepid, processes of other uids (the node, other jobs) are invisible.
func (fs *rootfs) proc() error {
	target := fs.dir + "/proc"
	err := unix.Mount("proc", target, "proc", hideFlags, "hidepid=invisible")
	if errors.Is(err, unix.EINVAL) { // before Linux 5.8
		err = unix.Mount("proc", target, "proc", hideFlags, "hidepid=2")
	}
	if err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	return nil
}

// dev mounts a fresh /dev with the standard nodes, a private devpts and
// shm, and the attempt's own device nodes, owned by its uid.
func (fs *rootfs) dev() error {
	dev := fs.dir + "/dev"
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, d := range standardDevices {
		p := filepath.Join(dev, d.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("making /dev/%s: %w", d.name, err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // past the umask
			return err
		}
	}
	for _, d := range fs.devices {
		p := filepath.Join(dev, d.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := unix.Mknod(p, d.mode|0o600, int(d.rdev)); err != nil {
			return fmt.Errorf("making /dev/%s: %w", d.name, err)
		}
		if err := os.Lchown(p, fs.uid, fs.gid); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %w", err)
	}
	if err := os.Mkdir(dev+"/shm", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fs.tmpfsOpts("1777")); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

func (fs *rootfs) tmpfsOpts(mode string) string {
	opts := "mode=" + mode
	if fs.tmpBytes > 0 {
		opts += ",size=" + strconv.FormatInt(fs.tmpBytes, 10)
	}
	return opts
}

// cover mounts the hiding and scratch tmpfs, outermost first, and returns
// the hiding ones it mounted. A directory inside one already hidden needs
// no cover of its own.
func (fs *rootfs) cover() ([]string, error) {
	type cov struct {
		path    string
		scratch bool
	}
	var all []cov
	for _, h := range fs.hide {
		all = append(all, cov{h, false})
	}
	for _, s := range fs.scratch {
		all = append(all, cov{s, true})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].path < all[j].path })
	var hidden []string
	for _, c := range all {
		if slicesContainsWithin(hidden, c.path) {
			continue
		}
		target := fs.dir + c.path
		if err := os.MkdirAll(target, 0o755); err != nil {
			return nil, fmt.Errorf("mount point for %s: %w", c.path, err)
		}
		var err error
		if c.scratch {
			err = unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fs.tmpfsOpts("1777"))
		} else {
			err = unix.Mount("tmpfs", target, "tmpfs", hideFlags, "mode=755,size=64k")
			hidden = append(hidden, c.path)
		}
		if err != nil {
			return nil, fmt.Errorf("covering %s: %w", c.path, err)
		}
	}
	return hidden, nil
}

func slicesContainsWithin(dirs []string, p string) bool {
	for _, d := range dirs {
		if within(p, d) {
			return true
		}
	}
	return false
}

// fileIn returns where path (absolute in the job's tree) is in the
// assembled tree, following symbolic links inside the tree, and makes an
// empty file there when it is missing in a covered directory.
func (fs *rootfs) fileIn(path string) (string, error) {
	p := path
	for range 16 {
		fi, err := os.Lstat(fs.dir + p)
		if err != nil {
			break
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return fs.dir + p, nil
		}
		target, err := os.Readlink(fs.dir + p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
	}
	if err := os.MkdirAll(filepath.Dir(fs.dir+p), 0o755); err != nil {
		return "", fmt.Errorf("making %s: %w", p, err)
	}
	f, err := os.OpenFile(fs.dir+p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", fmt.Errorf("making %s: %w", p, err)
	}
	f.Close()
	return fs.dir + p, nil
}

// mountEntry is one line of a mountinfo file.
type mountEntry struct {
	point  string // mount point
	opts   string // per-mount options
	fstype string
	super  string // super block options
}

// parseMountInfo reads one line of /proc/*/mountinfo (proc(5)). Fields are
// separated by single spaces; the kernel escapes space, tab, newline and
// backslash in paths, so any other byte may be part of one.
func parseMountInfo(line string) (mountEntry, bool) {
	fields := strings.Split(line, " ")
	sep := -1
	for i, f := range fields {
		if f == "-" && i >= 6 {
			sep = i
			break
		}
	}
	if sep < 0 || len(fields) < sep+4 {
		return mountEntry{}, false
	}
	return mountEntry{
		point:  unescapeMount(fields[4]),
		opts:   fields[5],
		fstype: fields[sep+1],
		super:  fields[sep+3],
	}, true
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// threadMounts reads the calling thread's mount table (its mount namespace
// may differ from the process's).
func threadMounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4<<10), 1<<20) // a line grows it; Tidy reads the table as each attempt ends
	for sc.Scan() {
		if m, ok := parseMountInfo(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// within tells whether path p is dir or inside it (both clean, absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
