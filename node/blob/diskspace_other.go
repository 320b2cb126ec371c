//go:build !linux && !darwin && !freebsd && !windows

package blob

import (
	"errors"
	"fmt"
)

// DiskSpace is not implemented on this system: set Config.Limit.
func DiskSpace(dir string) (total, free int64, err error) {
	return 0, 0, fmt.Errorf("blob: disk space of %s: %w", dir, errors.ErrUnsupported)
}
