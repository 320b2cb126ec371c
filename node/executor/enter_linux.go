package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// namespaces are a sandboxed job's mount, network and IPC namespaces, held
// open from its start to its end so that Exec and DialTCP can enter them
// whether or not the job's first process still runs.
type namespaces struct {
	mnt, net, ipc int // -1 (or 0 before openThread) when not held
}

// openThread opens the calling thread's mount and network namespaces:
// startLocked calls it once the thread is in the job's.
func (n *namespaces) openThread() error {
	n.mnt, n.net, n.ipc = -1, -1, -1
	var err error
	if n.mnt, err = unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("holding the mount namespace: %w", err)
	}
	if n.net, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("holding the network namespace: %w", err)
	}
	return nil
}

// openIPC opens the IPC namespace the job's first process was cloned into.
// Without it enter refuses: an exec never shares the node's.
func (n *namespaces) openIPC(pid int) {
	n.ipc, _ = unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/ipc", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if n.ipc < 0 {
		n.ipc = -1
	}
}

func (n *namespaces) close() {
	for _, fd := range []*int{&n.mnt, &n.net, &n.ipc} {
		if *fd > 0 {
			unix.Close(*fd)
		}
		*fd = -1
	}
}

// dup returns copies of the namespaces' descriptors, or an error when the
// jail has finished (or never held them).
func (j *sandboxJail) dupNamespaces() (namespaces, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	d := namespaces{mnt: -1, net: -1, ipc: -1}
	if j.finished || j.ns.mnt <= 0 || j.ns.net <= 0 {
		return d, ErrAttemptEnded
	}
	for _, f := range []struct{ from, to *int }{{&j.ns.mnt, &d.mnt}, {&j.ns.net, &d.net}, {&j.ns.ipc, &d.ipc}} {
		if *f.from <= 0 {
			continue
		}
		fd, err := unix.FcntlInt(uintptr(*f.from), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			d.close()
			return d, fmt.Errorf("holding the job's namespaces: %w", err)
		}
		*f.to = fd
	}
	return d, nil
}

// enter starts cmd in the job's namespaces, chrooted into its tree, in
// its cgroup, as its uid, with no_new_privs. With tty, the terminal is
// made on the job's own devpts instance (its /dev/pts), given to its uid.
// The work runs on a thread locked for it and never unlocked: the thread
// ends with its goroutine and takes the namespaces along.
func (j *sandboxJail) enter(cmd *exec.Cmd, tty bool, rows, cols uint16) (*os.File, error) {
	ns, err := j.dupNamespaces()
	if err != nil {
		return nil, err
	}
	defer ns.close()
	if ns.ipc < 0 {
		return nil, errors.New("the job's IPC namespace is not held")
	}
	type result struct {
		master *os.File
		err    error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		m, err := j.enterLocked(cmd, tty, rows, cols, ns)
		done <- result{m, err}
	}()
	r := <-done
	return r.master, r.err
}

func (j *sandboxJail) enterLocked(cmd *exec.Cmd, tty bool, rows, cols uint16, ns namespaces) (master *os.File, err error) {
	// A thread sharing its file system attributes with others (every Go
	// thread does) may not change its mount namespace.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, fmt.Errorf("unsharing the thread's fs: %w", err)
	}
	for _, s := range []struct {
		fd   int
		kind int
		name string
	}{{ns.mnt, unix.CLONE_NEWNS, "mount"}, {ns.net, unix.CLONE_NEWNET, "network"}, {ns.ipc, unix.CLONE_NEWIPC, "IPC"}} {
		if err := unix.Setns(s.fd, s.kind); err != nil {
			return nil, fmt.Errorf("entering the job's %s namespace: %w", s.name, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("no_new_privs: %w", err)
	}
	attr := &syscall.SysProcAttr{
		Setpgid:    true,
		Chroot:     j.fs.dir,
		Credential: &syscall.Credential{Uid: j.uidv, Gid: j.uidv, Groups: []uint32{}},
	}
	var slave *os.File
	if tty {
		if master, slave, err = j.openTTY(); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				master.Close()
				master = nil
			}
		}()
		defer slave.Close()
		// Sized before the process starts, so that it reads its size at
		// once (a shell or an editor lays out its first screen by it).
		if rows > 0 || cols > 0 {
			if err = setTTYSize(master, rows, cols); err != nil {
				return nil, err
			}
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		attr.Setpgid = false
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	}
	cmd.SysProcAttr = attr
	after, err := j.cg.attach(cmd.SysProcAttr)
	if err != nil {
		return nil, err
	}
	err = cmd.Start()
	after()
	if err != nil {
		return nil, err
	}
	_ = os.WriteFile("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/oom_score_adj", []byte("1000"), 0)
	return master, nil
}

// openTTY makes a pseudo-terminal on the job's devpts instance; the thread
// is in the job's mount namespace, where its tree is assembled at
// j.fs.dir.
func (j *sandboxJail) openTTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile(j.fs.dir+"/dev/pts/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the job's /dev/pts/ptmx: %w", err)
	}
	fail := func(e error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, e
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return fail(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ierr != nil {
		return fail(fmt.Errorf("unlocking the terminal: %w", errors.Join(err, ierr)))
	}
	name := j.fs.dir + "/dev/pts/" + strconv.Itoa(n)
	slave, err = os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return fail(fmt.Errorf("opening the job's terminal: %w", err))
	}
	if err := slave.Chown(int(j.uidv), int(j.uidv)); err != nil {
		slave.Close()
		return fail(fmt.Errorf("giving the terminal to uid %d: %w", j.uidv, err))
	}
	return master, slave, nil
}

// dial connects to addr in the job's network namespace (the node's own
// with network host), from a thread locked into it and thrown away after:
// the socket stays in the namespace it was made in.
func (j *sandboxJail) dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if j.limits.Network == NetworkHost {
		return dialAddr(ctx, addr)
	}
	ns, err := j.dupNamespaces()
	if err != nil {
		return nil, err
	}
	defer ns.close()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := unix.Setns(ns.net, unix.CLONE_NEWNET); err != nil {
			done <- result{nil, fmt.Errorf("entering the job's network namespace: %w", err)}
			return
		}
		c, err := dialAddr(ctx, addr)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

func (j *sandboxJail) private() net.Listener { return j.priv }
