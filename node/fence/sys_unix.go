//go:build unix

package fence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// supported tells whether the keeper can run here: it needs process groups.
const supported = true

// errUnsupported is never returned where process groups exist.
var errUnsupported = errors.ErrUnsupported

// killTarget sends SIGKILL to the process group and, when the target names
// a cgroup, writes "1" to its cgroup.kill (cgroup v2, Linux 5.14 and
// later), which also reaches processes that left the group. A group or a
// cgroup that is already gone, or a cgroup without cgroup.kill (v1, an
// older kernel), is no error.
func killTarget(t target, protected func(pgid int) bool) error {
	if t.pgid == 0 {
		return killMarked(t.marker, protected)
	}
	var errs []error
	if err := syscall.Kill(-t.pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		errs = append(errs, fmt.Errorf("kill -%d: %w", t.pgid, err))
	}
	if t.cgroup != "" {
		if err := writeCgroupKill(t.cgroup); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func writeCgroupKill(dir string) error {
	name := filepath.Join(dir, "cgroup.kill")
	// No O_CREATE: a directory that is not a cgroup gets nothing written.
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte("1"))
	cerr := f.Close()
	if errors.Is(werr, syscall.ENODEV) {
		return nil // the cgroup was removed while we held it open
	}
	if werr != nil {
		return fmt.Errorf("write %s: %w", name, werr)
	}
	return cerr
}

// protectedGroups returns the test for process groups the keeper refuses to
// arm: its own and its parent's (the node's), read once at start.
func protectedGroups() func(pgid int) bool {
	own := syscall.Getpgrp()
	parent, err := syscall.Getpgid(os.Getppid())
	if err != nil {
		parent = own
	}
	return func(pgid int) bool { return pgid == own || pgid == parent }
}

// ignoreSignals ties the keeper's life to its stdin alone. SIGPIPE: a
// write to a node that died fails with EPIPE instead of ending the keeper
// (the Go runtime's default for fds 1 and 2) before it has fenced what it
// holds. SIGHUP, SIGINT, SIGTERM: `pkill gpumesh` or a stop that reaches a
// frozen node's keeper must not end the keeper while the node cannot stop
// its attempts; a node that can sends close.
func ignoreSignals() {
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
}

// setProcessGroup starts cmd in a process group of its own, out of reach of
// signals sent to the node's group (a terminal's ^C or ^Z, kill -STOP -PGID).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
