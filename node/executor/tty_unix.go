//go:build unix

package executor

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/creack/pty"
)

// startInGroup starts cmd as the node's user: in a process group of its
// own, or with tty in a session of its own on a new pseudo-terminal of the
// node's, whose master it returns, sized rows × cols (0 × 0: unset)
// before the process starts, so that it reads its size at once.
func startInGroup(cmd *exec.Cmd, tty bool, rows, cols uint16) (*os.File, error) {
	if !tty {
		setProcessGroup(cmd)
		return nil, cmd.Start()
	}
	master, slave, err := pty.Open()
	if err != nil {
		return nil, err
	}
	if rows > 0 || cols > 0 {
		if err := setTTYSize(master, rows, cols); err != nil {
			master.Close()
			slave.Close()
			return nil, err
		}
	}
	if err := startOnTTY(cmd, slave, nil); err != nil {
		master.Close()
		return nil, err
	}
	return master, nil
}

// startOnTTY starts cmd with slave as its stdin, stdout, stderr and
// controlling terminal, leading a new session; attr, when not nil, is the
// rest of its attributes. slave is closed either way.
func startOnTTY(cmd *exec.Cmd, slave *os.File, attr *syscall.SysProcAttr) error {
	defer slave.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setpgid = false
	attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0 // fd 0 of the child: the terminal
	cmd.SysProcAttr = attr
	return cmd.Start()
}

// setTTYSize sets a terminal's size through its master.
func setTTYSize(master *os.File, rows, cols uint16) error {
	return pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols})
}
