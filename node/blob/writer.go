package blob

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
)

// Writer writes one object into the store, and makes it visible under its
// digest only when the bytes written hash to it (containerd's
// content.Writer). Until Commit the bytes sit in a temporary file under
// ingest/, which a crash leaves to be removed at the next Open; a commit
// writes them to disk (fsync) and renames them into place, so an object is
// either whole under its name or absent.
//
// A Writer is used by one goroutine. The size announced when it was opened
// counts against the store's limit until Commit or Close.
type Writer struct {
	s    *Store
	kind Kind
	want Digest
	size int64
	f    *os.File
	h    hash.Hash
	n    int64
	hold *hold // keeps the object once committed, when set
	// summed says the caller named the object by hashing the very bytes
	// it writes from memory (put): they are not hashed again.
	summed bool
	// nosync leaves the bytes and the rename to the kernel's write-back
	// (SkipSync).
	nosync  bool
	renamed bool // its file is in place: nothing to remove
	done    bool
	err     error // the first write error
}

// Writer opens a writer for the object k named d, of size bytes (1 to
// MaxChunkSize for a chunk, up to MaxManifestSize for a manifest).
//
// It fails with an error matching ErrExists when the store already holds
// the object, and with a *QuotaError when the store cannot make room for
// size more bytes even after collecting all it may.
//
// Nothing keeps a committed object from collection but a lease or hold:
// callers name the object, or a manifest listing it, in a lease before
// they commit (Fetch adds the manifest to its lease first).
func (s *Store) Writer(k Kind, d Digest, size int64) (*Writer, error) {
	return s.writer(k, d, size, nil)
}

func (s *Store) writer(k Kind, d Digest, size int64, h *hold) (*Writer, error) {
	if !k.valid() {
		return nil, fmt.Errorf("blob: writer for %v", k)
	}
	if d.IsZero() {
		return nil, fmt.Errorf("blob: writer for the zero digest")
	}
	if size < 1 || size > k.maxSize() {
		return nil, fmt.Errorf("blob: %s %s of %d bytes: want 1 to %d", k, d, size, k.maxSize())
	}
	if err := s.reserve(k, d, size, h); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, ingestDir), k.String()+"-"+d.Short()+"-*")
	if err != nil {
		s.unreserve(size)
		return nil, fmt.Errorf("blob: %w", err)
	}
	return &Writer{s: s, kind: k, want: d, size: size, f: f, h: sha256.New(), hold: h}, nil
}

// Size is the size announced when the writer was opened.
func (w *Writer) Size() int64 { return w.size }

// Write appends p. Writing more than the announced size fails.
func (w *Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("blob: write to a closed writer")
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.n+int64(len(p)) > w.size {
		w.err = &SizeError{Kind: w.kind, Digest: w.want, Want: w.size, Got: w.n + int64(len(p))}
		return 0, w.err
	}
	k, err := w.f.Write(p)
	if !w.summed {
		w.h.Write(p[:k])
	}
	w.n += int64(k)
	if err != nil {
		w.err = fmt.Errorf("blob: %w", err)
		return k, w.err
	}
	return k, nil
}

// SkipSync has Commit leave the object's bytes and its name to the
// kernel's write-back instead of syncing them, for a copy that can be
// fetched again (a restore's, a cache's): a fetch of gigabytes then moves
// at the speed of memory, not of the disk's syncs. A crash may leave such
// an object torn under its name. It is found out when read: the store
// hashes every object it did not write since it opened before a Restore
// copies it (and removes one that fails, so that the next fetch brings it
// again), and a peer it is served to checks it against its digest.
func (w *Writer) SkipSync() { w.nosync = true }

// Commit checks the bytes written and, when they are the announced size
// and hash to the digest, makes the object visible. Otherwise it discards
// them and returns a *SizeError or *DigestError (a manifest must also
// decode: DecodeManifest). Either way the writer is done. Committing an
// object another writer committed meanwhile succeeds.
func (w *Writer) Commit() error {
	if w.done {
		return errors.New("blob: commit of a closed writer")
	}
	defer w.Close()
	if w.err != nil {
		return w.err
	}
	if w.n != w.size {
		return &SizeError{Kind: w.kind, Digest: w.want, Want: w.size, Got: w.n}
	}
	if !w.summed {
		var got Digest
		w.h.Sum(got[:0])
		if got != w.want {
			return &DigestError{Kind: w.kind, Want: w.want, Got: got, Size: w.n}
		}
	}
	if w.kind == KindManifest {
		if err := w.checkManifest(); err != nil {
			return err
		}
	}
	if !w.nosync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("blob: %w", err)
		}
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	return w.s.commit(w)
}

// checkManifest decodes the manifest written.
func (w *Writer) checkManifest() error {
	b := make([]byte, w.n)
	if _, err := w.f.ReadAt(b, 0); err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	_, err := DecodeManifest(b)
	return err
}

// Close discards what was written, unless Commit succeeded, and releases
// the writer's share of the limit. It is safe to call more than once.
func (w *Writer) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	w.f.Close()
	if !w.renamed {
		os.Remove(w.f.Name())
	}
	w.s.unreserve(w.size)
	return nil
}

// commit renames a checked object into place and indexes it. The
// reservation is released by the caller's Close.
func (s *Store) commit(w *Writer) error {
	dst := s.path(w.kind, w.want)
	if err := s.fanOut(w.kind, w.want); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	objs := s.objects[w.kind]
	if _, ok := objs[w.want]; !ok {
		if err := os.Rename(w.f.Name(), dst); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("blob: %w", err)
		}
		w.renamed = true
		objs[w.want] = object{size: w.size, stamp: s.now().UnixNano(), checked: true}
		s.used += w.size
	}
	if w.hold != nil {
		w.hold.add(w.kind, w.want)
	}
	s.mu.Unlock()
	if w.nosync {
		return nil
	}
	// The rename is durable once the directory is: a crash before this
	// loses the object whole, never half of it.
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	return nil
}

// fanOut makes the directory an object of kind k named d goes in, unless
// this store made it already (they are never removed).
func (s *Store) fanOut(k Kind, d Digest) error {
	made := &s.fanned[k][d[0]]
	if made.Load() {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.path(k, d)), 0o700); err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	made.Store(true)
	return nil
}

// put writes b as the object k named d, holding it in h once stored. It
// reports whether the store did not hold it before. The caller computed d
// as Sum(b): b is not hashed again.
func (s *Store) put(k Kind, d Digest, b []byte, h *hold) (bool, error) {
	if s.reuse(k, d, h) {
		return false, nil
	}
	w, err := s.writer(k, d, int64(len(b)), h)
	if errors.Is(err, ErrExists) {
		return false, nil // stored meanwhile; the hold has it
	}
	if err != nil {
		return false, err
	}
	defer w.Close()
	w.summed = true // d is the hash of b: the caller's Sum
	if _, err := w.Write(b); err != nil {
		return false, err
	}
	if err := w.Commit(); err != nil {
		return false, err
	}
	return true, nil
}
