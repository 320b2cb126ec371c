package executor

import "path/filepath"

// mountsUnder returns, for each of dirs, a mount point at it or below it,
// "" when there is none, as the calling thread sees them (threadMounts),
// from one read of its mount table: the caller locks its goroutine to the
// thread to act on the answer. (Not /proc/self: that is the main thread's
// namespace, which a goroutine that unshared its own on that thread may
// have left there.)
func mountsUnder(dirs []string) ([]string, error) {
	mounts, err := threadMounts()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(dirs))
	for i, dir := range dirs {
		dir = filepath.Clean(dir)
		for _, m := range mounts {
			if within(m.point, dir) {
				out[i] = m.point
				break
			}
		}
	}
	return out, nil
}
