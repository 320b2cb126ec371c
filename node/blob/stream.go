package blob

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
)

// PutFile stores the bytes of r as a tree of one file, named name (a
// manifest path: no slash needed, see Entry.Path) with mode 0644, and
// adds its manifest to the lease named lease (which must exist). It is Put
// for a stream that is not on disk (an image layer as a registry sends
// it): the same bytes under the same name always give the same manifest
// digest, on every node. It returns the manifest in PutStats.Manifest.
//
// Like Put, what it stores is kept by its own hold until the manifest is
// in the lease; a PutFile that fails (r's error, ctx's end, the quota)
// leaves what it stored to be collected.
func (s *Store) PutFile(ctx context.Context, name string, r io.Reader, lease string) (PutStats, error) {
	if _, err := s.Lease(lease); err != nil {
		return PutStats{}, fmt.Errorf("blob: put %s: %w", name, err)
	}
	if err := checkPath(name); err != nil {
		return PutStats{}, fmt.Errorf("blob: put %q: path %w", name, err)
	}
	h := s.newHold()
	defer s.release(h)
	in := newIngest(s, h, &s.pools)
	p := &putter{ctx: ctx, log: s.log, split: s.pools.splitter(), entries: []Entry{}, in: in}
	err := p.stream(name, 0o644, r)
	s.pools.putSplitter(p.split)
	if ierr := p.in.wait(); err == nil {
		err = ierr
	}
	if err != nil {
		return p.stats, fmt.Errorf("blob: put %s: %w", name, err)
	}
	p.stats.Files = 1
	p.stats.NewChunks, p.stats.NewBytes = p.in.newChunks, p.in.newBytes
	for _, c := range p.files[0].chunks {
		p.entries[0].Chunks = append(p.entries[0].Chunks, *c)
	}
	m := &Manifest{Version: ManifestVersion, Entries: p.entries}
	b, err := m.Encode()
	if err != nil {
		return p.stats, fmt.Errorf("blob: put %s: %w", name, err)
	}
	d := Sum(b)
	if _, err := s.put(KindManifest, d, b, h); err != nil {
		return p.stats, fmt.Errorf("blob: put %s: manifest: %w", name, err)
	}
	if err := s.AddToLease(lease, []Digest{d}, nil); err != nil {
		return p.stats, fmt.Errorf("blob: put %s: %w", name, err)
	}
	p.stats.Manifest = d
	return p.stats, nil
}

// OpenFile opens the file at path in the tree of stored manifest m for
// reading, and returns its size. Every chunk is checked against its
// digest as it is read (a corrupt one is removed from the store and the
// read fails with a *DigestError); all of them must be stored, or OpenFile
// fails with a *MissingError. The manifest and its chunks are kept from
// collection until the reader is closed.
func (s *Store) OpenFile(m Digest, path string) (io.ReadCloser, int64, error) {
	h := s.newHold()
	s.holdObject(h, KindManifest, m)
	man, err := s.Manifest(m)
	if err != nil {
		s.release(h)
		return nil, 0, fmt.Errorf("blob: open %s in %s: %w", path, m, err)
	}
	i := slices.IndexFunc(man.Entries, func(e Entry) bool { return e.Path == path })
	if i < 0 || man.Entries[i].Type != TypeFile {
		s.release(h)
		return nil, 0, fmt.Errorf("blob: open %s in %s: %w", path, m, fs.ErrNotExist)
	}
	if err := s.complete(m, man); err != nil {
		s.release(h)
		return nil, 0, err
	}
	e := man.Entries[i]
	return &heldReader{ReadCloser: s.FileReader(e), s: s, h: h}, e.Size, nil
}

// heldReader is a FileReader whose manifest a hold keeps until Close.
type heldReader struct {
	io.ReadCloser
	s    *Store
	h    *hold
	once bool
}

func (r *heldReader) Close() error {
	if !r.once {
		r.once = true
		r.s.release(r.h)
	}
	return r.ReadCloser.Close()
}
