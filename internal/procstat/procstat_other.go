//go:build !linux

package procstat

import (
	"errors"
	"fmt"
)

// Read returns errors.ErrUnsupported: only Linux has /proc/PID/stat.
func Read(pid int) (Usage, error) {
	return Usage{}, fmt.Errorf("procstat: reading process %d: %w (Linux only)", pid, errors.ErrUnsupported)
}
