//go:build !unix

package executor

import (
	"os"
	"os/exec"
	"syscall"
)

// supported tells whether jobs can run on this platform.
const supported = false

const (
	sigTerm = syscall.Signal(15)
	sigKill = syscall.Signal(9)
)

// On platforms without process groups jobs do not run (Start fails before it
// gets here); these keep the package building for owners' laptops.
func setProcessGroup(cmd *exec.Cmd) {}

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func exitSignal(ps *os.ProcessState) string { return "" }
