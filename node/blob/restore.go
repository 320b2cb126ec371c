package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Restore writes the tree a stored manifest describes into dir, which
// must be empty or absent (it is then created, 0700, in a parent that
// must exist). All the manifest's
// chunks must be in the store: otherwise Restore writes nothing and
// returns a *MissingError (matching ErrNotFound) saying what to fetch.
//
// Path safety, in three layers. The manifest decoder refuses absolute
// paths, ".." and "." elements, backslashes, and any entry whose parent is
// not a directory of the manifest, so a manifest cannot name a path
// through one of its own links. Restore then writes through an os.Root
// opened on dir (openat2 with RESOLVE_BENEATH on Linux, component-wise
// openat with O_NOFOLLOW on other Unix systems, handle-relative opens on
// Windows: the portable check), so no path leaves dir whatever anyone does
// to it meanwhile. And it creates every directory, file and link new
// (O_EXCL, mkdir), so nothing that was there is written through or over.
// Links are created as stored and never followed.
//
// Each chunk is checked against its digest once while the store is open:
// a chunk whose bytes the store hashed since it opened (as a fetch or Put
// wrote them, or as an earlier restore read them) is copied as it is,
// by the kernel where it can (copy_file_range on Linux); any other is
// hashed as it is copied, and one found corrupt is removed from the store
// and the restore fails with a *DigestError, so fetching the manifest
// again repairs it. Modes are the manifest's
// permission bits (never setuid, setgid or sticky); directories get theirs
// last, so a read-only directory is filled first. On any failure Restore
// removes what it wrote, leaving dir empty. It does not fsync what it
// writes: a tree lost to a crash is restored again. (On Windows, creating
// a symbolic link needs a privilege; without it a tree with links fails
// to restore, with an error naming the link.)
func (s *Store) Restore(ctx context.Context, m Digest, dir string) error {
	h := s.newHold()
	defer s.release(h)
	s.holdObject(h, KindManifest, m) // keeps its chunks too
	man, err := s.Manifest(m)
	if err != nil {
		return fmt.Errorf("blob: restore %s: %w", m, err)
	}
	if err := s.complete(m, man); err != nil {
		return err
	}
	if err := emptyDir(dir); err != nil {
		return fmt.Errorf("blob: restore %s: %w", m, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("blob: restore %s: %w", m, err)
	}
	defer root.Close()
	r := &restorer{s: s, ctx: ctx, root: root}
	if err := r.tree(man); err != nil {
		r.undo(man)
		return fmt.Errorf("blob: restore %s into %s: %w", m, dir, err)
	}
	return nil
}

// complete checks that every chunk of man is stored.
func (s *Store) complete(m Digest, man *Manifest) error {
	missing := &MissingError{Manifest: m}
	s.mu.Lock()
	for _, c := range man.Chunks() {
		if _, ok := s.objects[KindChunk][c.Digest]; !ok {
			if missing.Chunks == 0 {
				missing.First = c.Digest
			}
			missing.Chunks++
			missing.Bytes += c.Size
		}
	}
	s.mu.Unlock()
	if missing.Chunks > 0 {
		return missing
	}
	return nil
}

// emptyDir creates dir, or checks that it is an empty directory.
func emptyDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("%w: %s holds %q", ErrNotEmpty, dir, names[0])
	}
	if err != nil && err != io.EOF {
		return err
	}
	return nil
}

// restorer writes one tree for Restore.
type restorer struct {
	s    *Store
	ctx  context.Context
	root *os.Root
	buf  []byte
}

func (r *restorer) tree(man *Manifest) error {
	var dirs []Entry
	for _, e := range man.Entries {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		var err error
		switch e.Type {
		case TypeDir:
			err = r.root.Mkdir(e.Path, 0o700)
			dirs = append(dirs, e)
		case TypeFile:
			err = r.file(e)
		case TypeSymlink:
			err = r.root.Symlink(e.Target, e.Path)
		}
		if err != nil {
			return err
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children before parents
		if err := r.root.Chmod(dirs[i].Path, dirs[i].Mode); err != nil {
			return err
		}
	}
	return nil
}

// file writes one file, checking each chunk.
func (r *restorer) file(e Entry) error {
	f, err := r.root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, c := range e.Chunks {
		if err := r.chunk(f, c); err != nil {
			return fmt.Errorf("%q: %w", e.Path, err)
		}
	}
	if err := f.Chmod(e.Mode); err != nil {
		return err
	}
	return f.Close()
}

// chunk appends one stored chunk to f: copied as it is when the store
// checked it since it opened, else read and checked (readChunk).
func (r *restorer) chunk(f *os.File, c ChunkRef) error {
	if !r.s.checked(KindChunk, c.Digest) {
		data, err := r.s.readChunk(c, &r.buf)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		return err
	}
	rc, size, err := r.s.Reader(KindChunk, c.Digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size != c.Size {
		return fmt.Errorf("blob: chunk %s is %d bytes, the manifest says %d", c.Digest, size, c.Size)
	}
	// f's ReadFrom copies file to file in the kernel where it can.
	n, err := io.Copy(f, rc)
	if err == nil && n != size {
		err = fmt.Errorf("blob: chunk %s: copied %d of its %d bytes", c.Digest, n, size)
	}
	return err
}

// checked reports whether the store hashed an object's bytes since it
// opened.
func (s *Store) checked(k Kind, d Digest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[k][d].checked
}

// undo removes what a failed restore wrote: everything under its root
// (which was empty), read-only directories included.
func (r *restorer) undo(man *Manifest) {
	for _, e := range man.Entries {
		if e.Type == TypeDir {
			_ = r.root.Chmod(e.Path, 0o700)
		}
	}
	for _, e := range man.Entries {
		if !strings.Contains(e.Path, "/") {
			_ = r.root.RemoveAll(e.Path)
		}
	}
}

// readChunk reads a stored chunk into *buf (grown as needed) and checks
// it against its digest and size. A chunk that fails is removed from the
// store: it is worthless under its name, and its absence makes the next
// fetch bring it again.
func (s *Store) readChunk(c ChunkRef, buf *[]byte) ([]byte, error) {
	rc, size, err := s.Reader(KindChunk, c.Digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if cap(*buf) < MaxChunkSize {
		*buf = make([]byte, MaxChunkSize)
	}
	data := (*buf)[:min(size, MaxChunkSize)]
	if _, err := io.ReadFull(rc, data); err != nil {
		return nil, fmt.Errorf("blob: reading chunk %s: %w", c.Digest, err)
	}
	if got := Sum(data); got != c.Digest {
		s.discard(KindChunk, c.Digest)
		return nil, &DigestError{Kind: KindChunk, Want: c.Digest, Got: got, Size: size}
	}
	if size != c.Size {
		// The chunk is right; the manifest is wrong about its size.
		return nil, fmt.Errorf("blob: chunk %s is %d bytes, the manifest says %d", c.Digest, size, c.Size)
	}
	s.mu.Lock()
	if o, ok := s.objects[KindChunk][c.Digest]; ok {
		o.checked = true
		s.objects[KindChunk][c.Digest] = o
	}
	s.mu.Unlock()
	return data, nil
}

// discard removes a corrupt object.
func (s *Store) discard(k Kind, d Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[k][d]
	if !ok {
		return
	}
	if err := os.Remove(s.path(k, d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Error("blob: corrupt object not removed", "kind", k, "digest", d, "err", err)
		return
	}
	delete(s.objects[k], d)
	delete(s.chunksOf, d)
	s.used -= o.size
	s.log.Error("blob: removed a corrupt object", "kind", k, "digest", d, "size", o.size)
}
