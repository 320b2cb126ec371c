//go:build unix

package datadir

import "golang.org/x/sys/unix"

// writable reports whether this process may create files in the
// directory dir.
func writable(dir string) error { return unix.Access(dir, unix.W_OK|unix.X_OK) }
