package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"
)

// Collection. The store stays under its limit by removing what nothing
// uses: objects that no live lease and no work in flight keeps (a kept
// manifest keeps the chunks it lists), oldest first. An object's age is
// the time it was last stored or reused by a Put (its file's mtime across
// restarts). A write that would cross the limit collects first, and fails
// with a *QuotaError only when what is kept leaves no room; it never
// removes anything kept.
//
// A collection started by a write frees a sixteenth of the limit beyond
// what the write needs, so that a full store does not collect once per
// chunk.

// hold is a lease in memory for work in flight: Put holds the chunks it
// stored or reused until its manifest is in its lease; Restore holds the
// manifest it reads. It dies with the process, as the work does.
type hold struct {
	manifests map[Digest]struct{}
	chunks    map[Digest]struct{}
}

// newHold registers an empty hold.
func (s *Store) newHold() *hold {
	h := &hold{manifests: make(map[Digest]struct{}), chunks: make(map[Digest]struct{})}
	s.mu.Lock()
	s.holds[h] = struct{}{}
	s.mu.Unlock()
	return h
}

// release forgets a hold.
func (s *Store) release(h *hold) {
	s.mu.Lock()
	delete(s.holds, h)
	s.mu.Unlock()
}

// add records an object in the hold; the caller holds s.mu.
func (h *hold) add(k Kind, d Digest) {
	if k == KindManifest {
		h.manifests[d] = struct{}{}
	} else {
		h.chunks[d] = struct{}{}
	}
}

// holdObject adds an object to a hold.
func (s *Store) holdObject(h *hold, k Kind, d Digest) {
	s.mu.Lock()
	h.add(k, d)
	s.mu.Unlock()
}

// reuse reports whether the store holds an object and, if so, adds it to
// h (when set) and makes it young again, in one step with respect to
// collection.
func (s *Store) reuse(k Kind, d Digest, h *hold) bool {
	s.mu.Lock()
	o, ok := s.objects[k][d]
	if ok {
		now := s.now()
		o.stamp = now.UnixNano()
		s.objects[k][d] = o
		if h != nil {
			h.add(k, d)
		}
	}
	s.mu.Unlock()
	if ok {
		now := time.Unix(0, o.stamp)
		_ = os.Chtimes(s.path(k, d), now, now) // the age across a restart; best effort
	}
	return ok
}

// reserve counts size bytes of a new object against the limit,
// collecting when needed.
func (s *Store) reserve(k Kind, d Digest, size int64, h *hold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.objects[k][d]; ok {
		if h != nil {
			h.add(k, d)
		}
		return fmt.Errorf("%w: %s %s", ErrExists, k, d)
	}
	if s.limit != NoLimit && s.used+s.reserved+size > s.limit {
		s.collectLocked(size, false)
		if s.used+s.reserved+size > s.limit {
			return &QuotaError{Need: size, Used: s.used, Reserved: s.reserved, Limit: s.limit}
		}
	}
	s.reserved += size
	return nil
}

func (s *Store) unreserve(size int64) {
	s.mu.Lock()
	s.reserved -= size
	s.mu.Unlock()
}

// Fits reports whether n more bytes could be stored now, after
// collecting everything that nothing keeps: nil, or a *QuotaError naming
// the sizes. It changes nothing; writes meanwhile may take the room. A
// fetch asks it before moving a byte, so that a tree that cannot fit
// fails at once rather than after evicting the cache to make room for
// part of it.
func (s *Store) Fits(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.limit == NoLimit {
		return nil
	}
	kept := s.keptLocked(s.now())
	var keptBytes int64
	for _, k := range []Kind{KindChunk, KindManifest} {
		for d := range kept[k] {
			keptBytes += s.objects[k][d].size
		}
	}
	if keptBytes+s.reserved+n > s.limit {
		return &QuotaError{Need: n, Used: keptBytes, Reserved: s.reserved, Limit: s.limit}
	}
	return nil
}

// GCStats says what a collection removed.
type GCStats struct {
	Objects       int   // chunks and manifests removed
	Bytes         int64 // their size
	ExpiredLeases int   // expired leases deleted
}

// GC deletes the expired leases and removes every object that nothing
// keeps. Writes need not call it: they collect as needed.
func (s *Store) GC(ctx context.Context) (GCStats, error) {
	if err := ctx.Err(); err != nil {
		return GCStats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return GCStats{}, ErrClosed
	}
	return s.collectLocked(0, true), nil
}

// candidate is an object collection may remove.
type candidate struct {
	kind Kind
	d    Digest
	o    object
}

// collectLocked removes unkept objects, oldest first: all of them, or
// until need more bytes fit with the slack to spare. The caller holds s.mu.
func (s *Store) collectLocked(need int64, all bool) GCStats {
	var st GCStats
	now := s.now()
	var expired []string
	for id, l := range s.leases {
		if l.expired(now) {
			expired = append(expired, id)
		}
	}
	// In one transaction: a sweep after a day of short jobs finds
	// thousands.
	if err := s.deleteLeasesLocked(expired); err != nil {
		s.log.Error("blob: expired leases not deleted", "leases", len(expired), "err", err)
	} else {
		st.ExpiredLeases = len(expired)
	}
	kept := s.keptLocked(now)
	var cands []candidate
	for _, k := range []Kind{KindChunk, KindManifest} {
		for d, o := range s.objects[k] {
			if _, ok := kept[k][d]; !ok {
				cands = append(cands, candidate{k, d, o})
			}
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.o.stamp != b.o.stamp {
			if a.o.stamp < b.o.stamp {
				return -1
			}
			return 1
		}
		if a.kind != b.kind {
			return int(a.kind) - int(b.kind)
		}
		return bytes.Compare(a.d[:], b.d[:])
	})
	if !all {
		var freeable int64
		for _, c := range cands {
			freeable += c.o.size
		}
		if s.used-freeable+s.reserved+need > s.limit {
			return st // even removing all would not make room: remove nothing
		}
	}
	target := s.limit - s.limit/16 - s.reserved - need
	for _, c := range cands {
		if !all && s.used <= target {
			break
		}
		err := os.Remove(s.path(c.kind, c.d))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Windows refuses to remove an open file: it stays, and is
			// tried again next time.
			s.log.Warn("blob: object not collected", "kind", c.kind, "digest", c.d, "err", err)
			continue
		}
		delete(s.objects[c.kind], c.d)
		delete(s.chunksOf, c.d)
		s.used -= c.o.size
		st.Objects++
		st.Bytes += c.o.size
	}
	if st.Objects > 0 || st.ExpiredLeases > 0 {
		s.log.Info("blob: collected", "objects", st.Objects, "bytes", st.Bytes, "expired_leases", st.ExpiredLeases,
			"used", s.used, "limit", s.limit)
	}
	return st
}

// keptLocked returns what live leases and holds keep, by kind.
func (s *Store) keptLocked(now time.Time) [3]map[Digest]struct{} {
	var kept [3]map[Digest]struct{}
	kept[KindChunk] = make(map[Digest]struct{})
	kept[KindManifest] = make(map[Digest]struct{})
	keep := func(manifests, chunks map[Digest]struct{}) {
		for m := range manifests {
			kept[KindManifest][m] = struct{}{}
			for _, c := range s.chunksOfLocked(m) {
				kept[KindChunk][c] = struct{}{}
			}
		}
		for c := range chunks {
			kept[KindChunk][c] = struct{}{}
		}
	}
	for _, l := range s.leases {
		if !l.expired(now) {
			keep(l.manifests, l.chunks)
		}
	}
	for h := range s.holds {
		keep(h.manifests, h.chunks)
	}
	return kept
}

// chunksOfLocked returns the chunks a stored manifest lists (none for a
// manifest the store does not hold), decoding it once per process: a
// manifest never changes.
func (s *Store) chunksOfLocked(m Digest) []Digest {
	if cs, ok := s.chunksOf[m]; ok {
		return cs
	}
	o, ok := s.objects[KindManifest][m]
	if !ok {
		return nil
	}
	b, err := os.ReadFile(s.path(KindManifest, m))
	if err == nil && int64(len(b)) != o.size {
		err = fmt.Errorf("%d bytes on disk, %d indexed", len(b), o.size)
	}
	var man *Manifest
	if err == nil {
		man, err = DecodeManifest(b)
	}
	if err != nil {
		// Not cached: a later collection tries again. Meanwhile its
		// chunks are kept only by what else names them.
		s.log.Error("blob: kept manifest unreadable", "manifest", m, "err", err)
		return nil
	}
	refs := man.Chunks()
	cs := make([]Digest, len(refs))
	for i, c := range refs {
		cs[i] = c.Digest
	}
	s.chunksOf[m] = cs
	return cs
}

// Usage is a snapshot of the store's size.
type Usage struct {
	Bytes     int64 // stored chunks and manifests
	Limit     int64 // NoLimit when none
	Reserved  int64 // announced by writes in flight
	Kept      int64 // bytes that leases and work in flight keep from collection
	Chunks    int
	Manifests int
	Leases    int
}

// Usage reports the store's size.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := Usage{
		Bytes:     s.used,
		Limit:     s.limit,
		Reserved:  s.reserved,
		Chunks:    len(s.objects[KindChunk]),
		Manifests: len(s.objects[KindManifest]),
		Leases:    len(s.leases),
	}
	kept := s.keptLocked(s.now())
	for _, k := range []Kind{KindChunk, KindManifest} {
		for d := range kept[k] {
			u.Kept += s.objects[k][d].size
		}
	}
	return u
}
