package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// UnpackOptions configure Unpack.
type UnpackOptions struct {
	// UIDShift, when not 0, makes every entry owned by UIDShift + its uid
	// and gid (above 65535: 65534, nobody), as a user namespace mapping
	// container ids 0-65535 to host ids from UIDShift sees them. 0: the
	// entries are owned by the caller (ownership in the archive is
	// ignored).
	UIDShift uint32
	// Room is told of the bytes each file is about to take (its size as
	// the archive says, before a byte is written): an error stops the
	// unpack. Nil: no bound.
	Room func(n int64) error
}

// UnpackStats says what Unpack wrote.
type UnpackStats struct {
	Files, Dirs, Symlinks, Hardlinks int
	// Bytes is the size of the regular files written.
	Bytes int64
	// Skipped counts the device nodes and named pipes left out.
	Skipped int
}

// ErrUnsafeLayer is matched by Unpack's error for an entry that would
// write outside the root or is otherwise refused.
var ErrUnsafeLayer = errors.New("unsafe layer entry")

// Unpack writes the tar archive r (a flattened image: whiteouts already
// applied, as go-containerregistry's mutate.Extract writes it) into dir,
// which must exist. Every write goes through an os.Root on dir, so no
// path leaves it — not through "..", an absolute path or a symbolic link
// (absolute or relative) that points outside; such an entry fails the
// unpack with an error matching ErrUnsafeLayer that names it. Hard links
// to absolute paths are refused too. Device nodes and named pipes are left
// out (counted in Skipped), setuid and setgid bits dropped, times not
// kept. Directories get their modes last, so a read-only one is filled
// first. Symbolic links are created as they are and never followed.
//
// On error, what was written stays: the caller removes dir.
func Unpack(ctx context.Context, r io.Reader, dir string, opts UnpackOptions) (UnpackStats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return UnpackStats{}, err
	}
	defer root.Close()
	u := &unpacker{root: root, opts: opts}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return u.stats, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u.stats, fmt.Errorf("reading the layers: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return u.stats, fmt.Errorf("layer entry %q: %w", hdr.Name, explainRootErr(err))
		}
	}
	for _, l := range u.links {
		if err := u.link(l); err != nil {
			return u.stats, fmt.Errorf("layer entry %q: %w", l.name, explainRootErr(err))
		}
	}
	for i := len(u.dirs) - 1; i >= 0; i-- { // children before parents
		d := u.dirs[i]
		if err := root.Chmod(d.name, d.mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return u.stats, fmt.Errorf("layer entry %q: %w", d.name, explainRootErr(err))
		}
	}
	return u.stats, nil
}

type unpacker struct {
	root  *os.Root
	opts  UnpackOptions
	stats UnpackStats
	links []pending
	dirs  []pending
	made  map[string]bool // directories made (for their parents' sake) or declared
}

type pending struct {
	name, target string
	mode         fs.FileMode
}

// cleanName turns an archive path into one relative to the root, or
// refuses it.
func cleanName(name string) (string, error) {
	if strings.ContainsRune(name, 0) || strings.Contains(name, "\\") && strings.HasPrefix(name, "\\") {
		return "", fmt.Errorf("%w: a NUL or a leading backslash", ErrUnsafeLayer)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: the path climbs out with ..", ErrUnsafeLayer)
		}
	}
	p := path.Clean("/" + name)[1:]
	if p == "" {
		p = "."
	}
	return p, nil
}

// mode is an entry's mode on disk: permission bits and sticky, never
// setuid or setgid.
func mode(hdr *tar.Header) fs.FileMode {
	m := fs.FileMode(hdr.Mode) & fs.ModePerm
	if hdr.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if name != "." {
			if err := u.mkdirAll(name); err != nil {
				return err
			}
		}
		u.dirs = append(u.dirs, pending{name: name, mode: mode(hdr)})
		u.stats.Dirs++
		return u.chown(name, hdr)
	case tar.TypeReg, tar.TypeRegA:
		if name == "." {
			return fmt.Errorf("%w: a file at the root", ErrUnsafeLayer)
		}
		if hdr.Size < 0 {
			return fmt.Errorf("%w: negative size", ErrUnsafeLayer)
		}
		if u.opts.Room != nil {
			if err := u.opts.Room(hdr.Size); err != nil {
				return err
			}
		}
		if err := u.prepare(name); err != nil {
			return err
		}
		f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("the archive ends %d bytes into a file of %d", n, hdr.Size)
		}
		if err == nil {
			err = f.Chmod(mode(hdr))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		u.stats.Files++
		u.stats.Bytes += hdr.Size
		return u.chown(name, hdr)
	case tar.TypeSymlink:
		if name == "." {
			return fmt.Errorf("%w: a link at the root", ErrUnsafeLayer)
		}
		if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) {
			return fmt.Errorf("%w: an empty link target", ErrUnsafeLayer)
		}
		if err := u.prepare(name); err != nil {
			return err
		}
		if err := u.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		u.stats.Symlinks++
		return u.chown(name, hdr)
	case tar.TypeLink:
		if name == "." {
			return fmt.Errorf("%w: a link at the root", ErrUnsafeLayer)
		}
		if path.IsAbs(hdr.Linkname) {
			return fmt.Errorf("%w: a hard link to the absolute path %q", ErrUnsafeLayer, hdr.Linkname)
		}
		target, err := cleanName(hdr.Linkname)
		if err != nil || target == "." {
			return fmt.Errorf("%w: a hard link to %q, outside the image", ErrUnsafeLayer, hdr.Linkname)
		}
		// The target may come later in a flattened archive.
		u.links = append(u.links, pending{name: name, target: target})
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		u.stats.Skipped++
		return nil
	case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil // archive/tar folds these into the next header
	}
	return fmt.Errorf("%w: entry type %q is not supported", ErrUnsafeLayer, hdr.Typeflag)
}

// prepare makes name's parent and clears what is at name (an entry of a
// lower layer the flattened archive also lists never comes after an
// upper one, but a crafted archive may repeat a name).
func (u *unpacker) prepare(name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := u.mkdirAll(dir); err != nil {
			return err
		}
	}
	if fi, err := u.root.Lstat(name); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%w: it would replace a directory another layer holds", ErrUnsafeLayer)
		}
		return u.root.Remove(name)
	}
	return nil
}

// mkdirAll makes name and its parents (0755 until their own entries
// give their modes). A directory is never made through a link that
// leaves the root: os.Root refuses it.
func (u *unpacker) mkdirAll(name string) error {
	if u.made == nil {
		u.made = map[string]bool{}
	}
	if u.made[name] {
		return nil
	}
	if err := u.root.MkdirAll(name, 0o755); err != nil {
		return err
	}
	fi, err := u.root.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %q is a link, and an entry is written through it", ErrUnsafeLayer, name)
	}
	u.made[name] = true
	return nil
}

func (u *unpacker) link(l pending) error {
	fi, err := u.root.Lstat(l.target)
	if err != nil {
		return fmt.Errorf("%w: a hard link to %q, which the image does not hold", ErrUnsafeLayer, l.target)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: a hard link to the directory %q", ErrUnsafeLayer, l.target)
	}
	if err := u.prepare(l.name); err != nil {
		return err
	}
	if err := u.root.Link(l.target, l.name); err != nil {
		return err
	}
	u.stats.Hardlinks++
	return nil
}

// chown gives name its owner under the shift.
func (u *unpacker) chown(name string, hdr *tar.Header) error {
	if u.opts.UIDShift == 0 {
		return nil
	}
	id := func(v int) int {
		if v < 0 || v > 65535 {
			v = 65534
		}
		return int(u.opts.UIDShift) + v
	}
	return u.root.Lchown(name, id(hdr.Uid), id(hdr.Gid))
}

// explainRootErr says in words what os.Root refused.
func explainRootErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w: it leads outside the image's root through a link (%v)", ErrUnsafeLayer, err)
	}
	return err
}
