package fence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// killMarked sends SIGKILL to every process whose environment holds
// AttemptEnv=marker, and to the process group of each (but the keeper's and
// the node's own: protected). It reads /proc/PID/environ of every process
// it may read, so it runs only for a prearmed attempt whose group the node
// never told (the node froze or died within its start); processes that
// exit while it reads, or that it may not read, are skipped.
func killMarked(marker string, protected func(pgid int) bool) error {
	first := []byte(AttemptEnv + "=" + marker + "\x00") // the first variable
	later := append([]byte{0}, first...)                // any other
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("finding the processes of %s: %w", marker, err)
	}
	self := os.Getpid()
	var errs []error
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !(bytes.HasPrefix(env, first) || bytes.Contains(env, later)) {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 && !protected(pgid) {
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill -%d: %w", pgid, err))
			}
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}
