package client

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"
)

// ErrBadArchive is wrapped by every refusal of ReadTree: the archive the
// node sent is not a tree it may write.
var ErrBadArchive = errors.New("bad archive")

// TreeStats says what ReadTree wrote.
type TreeStats struct {
	// Dir says the archive held a directory (its entry "./" first); else it
	// held one regular file, named Name.
	Dir  bool
	Name string
	// Files, Dirs and Symlinks count what was written (the directory
	// itself not among Dirs); Bytes is the size of the files.
	Files, Dirs, Symlinks int
	Bytes                 int64
}

// ReadTree writes the tar archive r, as the node sends a job's files
// (api.FileCopier), into dir, an existing empty directory: an archive of
// a directory ("./" first) into dir itself, whose mode it takes; an
// archive of one regular file as dir/NAME.
//
// It writes directories (their permission bits, and always the owner's
// rwx, so the copy can be changed and removed), regular files (permission
// bits only) and symbolic links (as they are, never followed: every write goes through
// an os.Root on dir, so nothing lands outside it whatever the links say).
// It refuses, wrapping ErrBadArchive, an entry of any other type, a name
// that is absolute, has a ".." element, a backslash or NUL, or is not
// UTF-8, an entry named twice, a second entry after a file, and an empty
// or cut archive. On an error what it wrote stays under dir for the
// caller to remove.
func ReadTree(r io.Reader, dir string) (TreeStats, error) {
	var st TreeStats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var modes []dirMode // applied last, deepest first, so a read-only directory is filled first
	for i := 0; ; i++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if i == 0 {
				return st, fmt.Errorf("%w: it is empty", ErrBadArchive)
			}
			break
		}
		if err != nil {
			return st, fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		if i > 0 && !st.Dir {
			return st, fmt.Errorf("%w: %q after the one file it holds", ErrBadArchive, clipName(h.Name))
		}
		if i == 0 && h.Typeflag == tar.TypeDir && (h.Name == "./" || h.Name == ".") {
			st.Dir = true
			modes = append(modes, dirMode{".", fs.FileMode(h.Mode) & fs.ModePerm})
			continue
		}
		name, err := entryName(h.Name)
		if err != nil {
			return st, err
		}
		if i == 0 {
			if h.Typeflag != tar.TypeReg || strings.Contains(name, "/") {
				return st, fmt.Errorf("%w: it starts with %q, neither \"./\" nor a file's name", ErrBadArchive, clipName(h.Name))
			}
			st.Name = name
		}
		if _, err := root.Lstat(name); err == nil {
			return st, fmt.Errorf("%w: %q named twice", ErrBadArchive, name)
		}
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil {
				return st, fmt.Errorf("%w: %q: %v", ErrBadArchive, name, err)
			}
			modes = append(modes, dirMode{name, mode})
			st.Dirs++
		case tar.TypeReg:
			if h.Size < 0 {
				return st, fmt.Errorf("%w: %q has a negative size", ErrBadArchive, name)
			}
			if err := writeEntry(root, name, mode, tr, h.Size); err != nil {
				return st, err
			}
			st.Files++
			st.Bytes += h.Size
		case tar.TypeSymlink:
			if h.Linkname == "" || strings.ContainsRune(h.Linkname, 0) {
				return st, fmt.Errorf("%w: link %q has no target", ErrBadArchive, name)
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return st, fmt.Errorf("%w: link %q: %v", ErrBadArchive, name, err)
			}
			st.Symlinks++
		default:
			return st, fmt.Errorf("%w: %q is of tar type %q; a job's files are directories, files and links", ErrBadArchive, name, h.Typeflag)
		}
	}
	for i := len(modes) - 1; i >= 0; i-- {
		if err := root.Chmod(modes[i].name, modes[i].mode|0o700); err != nil {
			return st, err
		}
	}
	return st, nil
}

// writeEntry writes size bytes of r as the new file name.
func writeEntry(root *os.Root, name string, mode fs.FileMode, r io.Reader, size int64) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadArchive, name, err)
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: %q cut after %d of its %d bytes", ErrBadArchive, name, n, size)
		}
		return fmt.Errorf("%q: %w", name, err)
	}
	return root.Chmod(name, mode)
}

// entryName checks a tar entry's name and returns it clean: relative,
// slash-separated, no "." or ".." element.
func entryName(raw string) (string, error) {
	name := strings.TrimSuffix(strings.TrimPrefix(raw, "./"), "/")
	switch {
	case name == "" || name == ".":
		return "", fmt.Errorf("%w: an entry without a name", ErrBadArchive)
	case !utf8.ValidString(name) || strings.ContainsAny(name, "\\\x00"):
		return "", fmt.Errorf("%w: %q: a backslash, NUL or bytes that are not UTF-8 in a name", ErrBadArchive, clipName(raw))
	case path.IsAbs(name) || (len(name) > 1 && name[1] == ':'):
		return "", fmt.Errorf("%w: %q is absolute", ErrBadArchive, clipName(raw))
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return "", fmt.Errorf("%w: %q has an empty, \".\" or \"..\" element", ErrBadArchive, clipName(raw))
		}
	}
	return name, nil
}

func clipName(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
