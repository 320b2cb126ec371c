//go:build unix

package doctor

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged user may still use on path's
// file system.
func freeBytes(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
