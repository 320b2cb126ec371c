//go:build unix

package bench

import (
	"syscall"
	"time"
)

// CPU returns the CPU time (user and system) the process used so far:
// the difference over a stretch of work is its cost, which a loaded
// machine changes far less than its wall-clock time.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
