package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
)

// PutStats says what Put stored.
type PutStats struct {
	// Manifest names the tree stored.
	Manifest Digest
	// Files, Dirs and Symlinks count the tree's entries.
	Files, Dirs, Symlinks int
	// Bytes is the size of the tree's files.
	Bytes int64
	// NewBytes is the size of the chunks the store did not hold before:
	// what a transfer of the tree to a peer holding its previous version
	// has to move.
	NewBytes int64
	// Chunks counts the chunk references of the manifest; NewChunks those
	// written by this Put.
	Chunks, NewChunks int
	// Skipped lists the sockets, devices and named pipes left out.
	Skipped []string
}

// Put stores the tree under dir: every regular file cut into chunks,
// every directory and symbolic link, and the manifest that describes
// them, which it adds to the lease named lease (it must exist: SetLease).
// It returns the manifest's digest in PutStats.Manifest.
//
// Put reads the tree through an os.Root, so nothing outside dir is read
// whatever the tree holds or anyone does to it meanwhile; symbolic links
// are stored as links, never followed. Files are opened without blocking
// and must still be regular files when open, so a named pipe swapped in
// cannot stall it. A file that changes while Put reads it is stored as
// read. Names a manifest cannot hold (not UTF-8, with a backslash or a
// control character) fail the Put with an error naming them.
//
// What the Put stores is kept by its own hold until the manifest is in
// the lease; a Put that fails leaves what it stored to be collected. It
// fails with a *QuotaError (wrapped) when the store cannot make room.
func (s *Store) Put(ctx context.Context, dir, lease string) (PutStats, error) {
	return s.PutPath(ctx, dir, ".", lease)
}

// PutPath is Put of what path names inside dir: a directory's tree, or a
// regular file alone (a manifest of one entry, named path's last
// element). path is slash-separated and relative to dir ("." for dir
// itself); it is resolved through an os.Root opened on dir, so no link
// takes it out of dir, and a path whose last element is a symbolic link
// is refused (*PathError naming it), as is one that does not exist.
// PutStats.Dirs, Files and Symlinks say what it stored.
func (s *Store) PutPath(ctx context.Context, dir, path, lease string) (PutStats, error) {
	if _, err := s.Lease(lease); err != nil {
		return PutStats{}, fmt.Errorf("blob: put %s: %w", dir, err)
	}
	return s.putTree(ctx, dir, path, func(d Digest) error { return s.AddToLease(lease, []Digest{d}, nil) })
}

// PutUnder is Put into a lease it makes: l (replacing a lease of that ID),
// with the tree's manifest added, written once the tree is stored, in the
// one transaction (one fsync) that Put would spend adding the manifest to
// a lease made before. A PutUnder that fails makes no lease, and neither
// does one of an empty directory: its manifest is EmptyTree, which the
// store holds without a lease, so it writes nothing at all.
func (s *Store) PutUnder(ctx context.Context, dir string, l Lease) (PutStats, error) {
	if err := checkLeaseID(l.ID); err != nil {
		return PutStats{}, fmt.Errorf("blob: put %s: %w", dir, err)
	}
	return s.putTree(ctx, dir, ".", func(d Digest) error {
		if d == s.empty {
			return nil
		}
		l.Manifests = append(slices.Clone(l.Manifests), d)
		return s.SetLease(l)
	})
}

// putTree stores what path names under dir and its manifest, then keeps
// the manifest (its digest) as lease says, while its own hold keeps all
// of it from collection.
func (s *Store) putTree(ctx context.Context, dir, path string, lease func(Digest) error) (PutStats, error) {
	h := s.newHold()
	defer s.release(h)
	m, st, err := walkTree(ctx, dir, path, newIngest(s, h, &s.pools), s.log)
	if err != nil {
		return st, fmt.Errorf("blob: put %s: %w", dir, err)
	}
	b, err := m.Encode()
	if err != nil {
		return st, fmt.Errorf("blob: put %s: %w", dir, err)
	}
	d := Sum(b)
	if d != s.empty { // the empty tree is held without being stored
		if _, err := s.put(KindManifest, d, b, h); err != nil {
			return st, fmt.Errorf("blob: put %s: manifest: %w", dir, err)
		}
	}
	if err := lease(d); err != nil {
		return st, fmt.Errorf("blob: put %s: %w", dir, err)
	}
	st.Manifest = d
	return st, nil
}

// walkTree cuts and hashes what path names under dir, handing each chunk
// to in, and returns the manifest of it and what was found (without
// Manifest set). in is waited for before it returns.
func walkTree(ctx context.Context, dir, path string, in *ingest, log *slog.Logger) (*Manifest, PutStats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		in.wait()
		return nil, PutStats{}, err
	}
	defer root.Close()
	p := &putter{ctx: ctx, log: log, root: root, split: in.reuse.splitter(), entries: []Entry{}, in: in}
	err = p.top(path)
	in.reuse.putSplitter(p.split)
	if ierr := p.in.wait(); err == nil {
		err = ierr
	}
	if p.sub != nil {
		p.sub.Close()
	}
	if err != nil {
		return nil, p.stats, err
	}
	p.stats.NewChunks, p.stats.NewBytes = p.in.newChunks, p.in.newBytes
	for _, f := range p.files {
		e := &p.entries[f.entry]
		for _, c := range f.chunks {
			e.Chunks = append(e.Chunks, *c)
		}
	}
	slices.SortFunc(p.entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return &Manifest{Version: ManifestVersion, Entries: p.entries}, p.stats, nil
}

// top starts the walk at path: the root itself, a directory under it
// (walked as the root of its own tree) or a regular file.
func (p *putter) top(path string) error {
	if path == "." || path == "" {
		return p.walk(".")
	}
	if err := checkPath(path); err != nil {
		return &PathError{Path: path, Reason: "path " + err.Error()}
	}
	info, err := p.root.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &PathError{Path: path, Reason: "no such file or directory", Err: fs.ErrNotExist}
	}
	if err != nil {
		return &PathError{Path: path, Reason: err.Error(), Err: err}
	}
	switch mode := info.Mode(); {
	case mode.IsDir():
		sub, err := p.root.OpenRoot(path)
		if err != nil {
			return &PathError{Path: path, Reason: err.Error(), Err: err}
		}
		p.sub, p.root = sub, sub
		return p.walk(".")
	case mode.IsRegular():
		_, name, _ := cutLast(path)
		if err := p.file(path, name); err != nil {
			return fmt.Errorf("%q: %w", path, err)
		}
		p.stats.Files++
		return nil
	case mode&fs.ModeSymlink != 0:
		target, _ := p.root.Readlink(path)
		return &PathError{Path: path, Reason: fmt.Sprintf("is a symbolic link (to %q): name what it points to", clip(target))}
	}
	return &PathError{Path: path, Reason: "is a " + info.Mode().Type().String() + ", not a file or directory"}
}

// putter walks one tree for Put.
type putter struct {
	ctx     context.Context
	log     *slog.Logger
	root    *os.Root
	sub     *os.Root // the root opened on a directory PutPath names
	split   *splitter
	in      *ingest
	entries []Entry
	files   []putFile
	stats   PutStats
}

// putFile is a file entry whose chunks the ingest is storing.
type putFile struct {
	entry  int         // in entries
	chunks []*ChunkRef // filled once the ingest is done
}

// walk adds the members of the directory rel ("." for the root).
func (p *putter) walk(rel string) error {
	d, err := p.root.Open(rel)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		if err := p.ctx.Err(); err != nil {
			return err
		}
		path := name
		if rel != "." {
			path = rel + "/" + name
		}
		if err := checkPath(path); err != nil {
			return fmt.Errorf("%q: path %w (a manifest cannot hold it)", path, err)
		}
		info, err := p.root.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			p.entries = append(p.entries, Entry{Path: path, Type: TypeDir, Mode: mode.Perm()})
			p.stats.Dirs++
			if err := p.walk(path); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			target, err := p.root.Readlink(path)
			if err != nil {
				return err
			}
			if err := checkTarget(target); err != nil {
				return fmt.Errorf("%q: link target %w (a manifest cannot hold it)", path, err)
			}
			p.entries = append(p.entries, Entry{Path: path, Type: TypeSymlink, Target: target})
			p.stats.Symlinks++
		case mode.IsRegular():
			if err := p.file(path, path); err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
			p.stats.Files++
		default:
			p.log.Warn("blob: put leaves out what is not a file, directory or link", "path", path, "mode", mode.String())
			p.stats.Skipped = append(p.stats.Skipped, path)
		}
	}
	return nil
}

// file cuts the regular file at path into chunks, hands them to the
// ingest and adds it to the tree as name.
func (p *putter) file(path, name string) error {
	f, err := p.root.OpenFile(path, os.O_RDONLY|openNoBlock, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("is no longer a regular file but %s", info.Mode().Type())
	}
	if info.Size() < MinChunkSize {
		return p.small(name, info.Mode().Perm(), f, info.Size())
	}
	return p.stream(name, info.Mode().Perm(), f)
}

// small adds a file shorter than MinChunkSize, as stat found it, from f:
// it is one chunk (the chunker never cuts before MinChunkSize), read into
// a buffer of its size rather than one of MaxChunkSize. A file that grew
// meanwhile is cut as any other, from what was read on.
func (p *putter) small(path string, mode fs.FileMode, f io.Reader, size int64) error {
	buf := make([]byte, size+1) // one more byte tells that it grew
	n, err := io.ReadFull(f, buf)
	switch {
	case err == nil:
		return p.stream(path, mode, io.MultiReader(bytes.NewReader(buf), f))
	case err != io.EOF && err != io.ErrUnexpectedEOF:
		return err
	}
	pf, e := putFile{entry: len(p.entries)}, Entry{Path: path, Type: TypeFile, Mode: mode}
	if n > 0 {
		if err := p.in.failed(); err != nil {
			return err
		}
		p.in.take()
		p.chunk(&pf, &e, buf[:n])
	}
	p.addFile(pf, e)
	return nil
}

// stream cuts the bytes of r into chunks, hands them to the ingest and
// adds a file entry at path.
func (p *putter) stream(path string, mode fs.FileMode, r io.Reader) error {
	pf := putFile{entry: len(p.entries)}
	e := Entry{Path: path, Type: TypeFile, Mode: mode}
	p.split.reset(r)
	for {
		if err := p.ctx.Err(); err != nil {
			return err
		}
		if err := p.in.failed(); err != nil {
			return err
		}
		buf := p.in.buffer()
		data, err := p.split.next(buf)
		if err == io.EOF {
			p.in.recycle(buf)
			break
		}
		if err != nil {
			p.in.recycle(buf)
			return err
		}
		p.chunk(&pf, &e, data)
	}
	p.addFile(pf, e)
	return nil
}

// chunk hands data, the next chunk of file entry e, to the ingest, which
// fills in its reference in pf.
func (p *putter) chunk(pf *putFile, e *Entry, data []byte) {
	ref := new(ChunkRef)
	pf.chunks = append(pf.chunks, ref)
	p.in.store(data, ref)
	e.Size += int64(len(data))
	p.stats.Chunks++
	p.stats.Bytes += int64(len(data))
}

// addFile adds file entry e to the tree, its chunks to come in pf.
func (p *putter) addFile(pf putFile, e Entry) {
	p.entries = append(p.entries, e)
	p.files = append(p.files, pf)
}
