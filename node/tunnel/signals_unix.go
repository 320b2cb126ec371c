//go:build unix

package tunnel

import "syscall"

const (
	usr1 = syscall.SIGUSR1
	usr2 = syscall.SIGUSR2
)
