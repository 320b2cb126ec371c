//go:build linux || darwin || freebsd

package blob

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// DiskSpace returns the size of the file system holding dir and the bytes
// free on it for an unprivileged user.
func DiskSpace(dir string) (total, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("blob: disk space: %w", &os.PathError{Op: "statfs", Path: dir, Err: err})
	}
	bsize := int64(st.Bsize) // its type differs from system to system
	return int64(st.Blocks) * bsize, int64(st.Bavail) * bsize, nil
}
