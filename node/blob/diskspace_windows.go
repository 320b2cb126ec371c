package blob

import (
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// DiskSpace returns the size of the volume holding dir and the bytes free
// on it for the calling user.
func DiskSpace(dir string) (total, free int64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("blob: disk space of %s: %w", dir, err)
	}
	var avail, size, all uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &size, &all); err != nil {
		return 0, 0, fmt.Errorf("blob: disk space: %w", &os.PathError{Op: "GetDiskFreeSpaceEx", Path: dir, Err: err})
	}
	return int64(size), int64(avail), nil
}
