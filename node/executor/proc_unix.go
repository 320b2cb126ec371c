//go:build unix

package executor

import (
	"os"
	"os/exec"
	"syscall"
)

// supported tells whether jobs can run on this platform.
const supported = true

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// setProcessGroup starts the command in a process group of its own, so that
// Stop reaches every process the job starts.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup signals the command's whole process group. Errors (the group
// is already gone) are ignored: the outcome is the same.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

func exitSignal(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal().String()
	}
	return ""
}
