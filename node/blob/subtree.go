package blob

import (
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// Subtree returns the part of m that path names, as a manifest of its
// own: for a directory, its tree with paths relative to it; for a
// regular file, that file alone under its last element's name. "." (or
// "") is m itself. The type says which it was (TypeDir or TypeFile).
//
// The path is one a manifest may hold (no "..", not absolute: a
// *PathError otherwise). A manifest cannot name an entry under one of its
// own links, so no link is followed on the way; a path that names a link
// is refused (*PathError naming its target), as is one that names
// nothing (matching fs.ErrNotExist). The result holds no chunk that m
// does not.
func (m *Manifest) Subtree(path string) (*Manifest, EntryType, error) {
	if path == "." || path == "" {
		return m, TypeDir, nil
	}
	if err := checkPath(path); err != nil {
		return nil, "", &PathError{Path: path, Reason: "path " + err.Error()}
	}
	i := m.find(path)
	if i < 0 {
		return nil, "", &PathError{Path: path, Reason: "no such file or directory", Err: fs.ErrNotExist}
	}
	e := m.Entries[i]
	switch e.Type {
	case TypeFile:
		_, name, _ := cutLast(path)
		e.Path = name
		return &Manifest{Version: ManifestVersion, Entries: []Entry{e}}, TypeFile, nil
	case TypeSymlink:
		return nil, "", &PathError{Path: path, Reason: fmt.Sprintf("is a symbolic link (to %q): name what it points to", clip(e.Target))}
	}
	out := &Manifest{Version: ManifestVersion, Entries: []Entry{}}
	prefix := path + "/"
	for _, e := range m.Entries[i+1:] {
		if !strings.HasPrefix(e.Path, prefix) {
			if e.Path > prefix {
				break // sorted: nothing further is under it
			}
			continue
		}
		e.Path = e.Path[len(prefix):]
		out.Entries = append(out.Entries, e)
	}
	return out, TypeDir, nil
}

// find returns the index of the entry at path, -1 if none: entries are
// sorted by path.
func (m *Manifest) find(path string) int {
	lo, hi := 0, len(m.Entries)
	for lo < hi {
		mid := (lo + hi) / 2
		if m.Entries[mid].Path < path {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(m.Entries) && m.Entries[lo].Path == path {
		return lo
	}
	return -1
}

// PutManifest stores m (checked and canonically encoded) and adds it to
// the lease named lease, which must exist. The chunks it lists are not
// checked: a manifest made from a stored one (Subtree) lists chunks the
// store holds already.
func (s *Store) PutManifest(m *Manifest, lease string) (Digest, error) {
	if _, err := s.Lease(lease); err != nil {
		return Digest{}, err
	}
	b, err := m.Encode()
	if err != nil {
		return Digest{}, err
	}
	d := Sum(b)
	h := s.newHold()
	defer s.release(h)
	if _, err := s.put(KindManifest, d, b, h); err != nil {
		return Digest{}, err
	}
	if err := s.AddToLease(lease, []Digest{d}, nil); err != nil {
		return Digest{}, err
	}
	return d, nil
}

// FileReader returns a reader of a file entry's bytes, read from its
// stored chunks in order, each hashed and checked against its digest as
// it is read (a corrupt chunk is removed and the read fails with a
// *DigestError). The caller keeps the chunks from collection meanwhile
// (a lease on the manifest) and closes the reader.
func (s *Store) FileReader(e Entry) io.ReadCloser {
	return &fileReader{s: s, chunks: e.Chunks}
}

type fileReader struct {
	s      *Store
	chunks []ChunkRef
	buf    []byte
	left   []byte // of the chunk being read
	err    error
}

func (r *fileReader) Read(p []byte) (int, error) {
	for len(r.left) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if len(r.chunks) == 0 {
			r.err = io.EOF
			return 0, io.EOF
		}
		data, err := r.s.readChunk(r.chunks[0], &r.buf)
		if err != nil {
			r.err = err
			return 0, err
		}
		r.chunks, r.left = r.chunks[1:], data
	}
	n := copy(p, r.left)
	r.left = r.left[n:]
	return n, nil
}

func (r *fileReader) Close() error {
	r.chunks, r.left, r.buf = nil, nil, nil
	if r.err == nil {
		r.err = fmt.Errorf("blob: read of a closed file reader")
	}
	return nil
}
