//go:build unix

package market_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used, all threads, user and
// system: a measure of work that a busy shared machine inflates far less
// than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
