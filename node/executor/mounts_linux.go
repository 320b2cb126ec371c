package executor

import "path/filepath"

// mountUnder returns a mount point at dir or below it, "" when there is
// none, as the calling thread sees them (threadMounts): the caller locks
// its goroutine to the thread to act on the answer. (Not /proc/self: that
// is the main thread's namespace, which a goroutine that unshared its own
// on that thread may have left there.)
func mountUnder(dir string) (string, error) {
	dir = filepath.Clean(dir)
	mounts, err := threadMounts()
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if within(m.point, dir) {
			return m.point, nil
		}
	}
	return "", nil
}
