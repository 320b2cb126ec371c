//go:build !unix

package tunnel

import "syscall"

// Jobs do not run here; the values keep the package building.
const (
	usr1 = syscall.Signal(10)
	usr2 = syscall.Signal(12)
)
