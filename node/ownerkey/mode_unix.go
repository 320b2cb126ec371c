//go:build !windows

package ownerkey

import (
	"fmt"
	"io/fs"
)

func checkKeyMode(path string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("owner key %s is readable by others (mode %04o): chmod 600 it", path, perm)
	}
	return nil
}
