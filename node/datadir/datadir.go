// Package datadir checks that a path can be a node's data directory
// before anything is written there.
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Error is a data directory the node cannot use. Check returns it; the
// node calls Check in Start, before it writes anything.
type Error struct {
	Dir string // as given
	Why string // "is a file, not a directory", ...
}

func (e *Error) Error() string { return "data directory " + e.Dir + ": " + e.Why }

// Check reports whether dir can be a node's data directory, writing
// nothing: it must be a directory this process may write in, or a path
// that does not exist yet whose nearest existing parent is such a
// directory (Start creates it, mode 0700). A file in its place or in place
// of a parent, or a directory that cannot be written, is a *Error
// naming the path. Where the system cannot say whether a directory is
// writable (Windows), a directory passes.
func Check(dir string) error {
	bad := func(format string, args ...any) error {
		return &Error{Dir: dir, Why: fmt.Sprintf(format, args...)}
	}
	if dir == "" {
		return bad("none given")
	}
	want := filepath.Clean(dir)
	for p := want; ; {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir() && p == want:
			return bad("is a file, not a directory")
		case err == nil && !fi.IsDir():
			return bad("%s is a file, not a directory", p)
		case err == nil:
			if err := writable(p); err != nil {
				if p == want {
					return bad("cannot write in it: %v", err)
				}
				return bad("cannot create it in %s: %v", p, err)
			}
			return nil
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			parent := filepath.Dir(p)
			if parent == p {
				return bad("%s does not exist", p)
			}
			p = parent
		default:
			return bad("%v", err)
		}
	}
}
