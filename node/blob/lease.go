package blob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// A Lease keeps objects from collection: the manifests it names, with
// every chunk they list, and the chunks it names. Leases have names chosen
// by their user ("ckpt/JOB/0", "payload/JOB", "fetch/…"), persist across
// restarts (in leases.db, written with fsync before a call returns) and
// may expire. An expired lease keeps nothing and is deleted at the next
// collection.
//
// A lease may name objects the store does not hold (yet): that is how a
// fetch keeps what it brings in from the first byte on. A leased manifest
// keeps those of its chunks that are present.
type Lease struct {
	// ID names the lease: 1 to 256 bytes of UTF-8 without control
	// characters.
	ID string
	// Expires is when the lease stops keeping anything; zero: never.
	Expires time.Time
	// Manifests and Chunks are what the lease names, sorted by digest.
	Manifests []Digest
	Chunks    []Digest
}

// lease is the in-memory form of a Lease.
type lease struct {
	expires   int64 // unix nanoseconds; 0: never
	manifests map[Digest]struct{}
	chunks    map[Digest]struct{}
}

func (l *lease) expired(now time.Time) bool {
	return l.expires != 0 && now.UnixNano() >= l.expires
}

func (l *lease) export(id string) Lease {
	out := Lease{ID: id, Manifests: sortedDigests(l.manifests), Chunks: sortedDigests(l.chunks)}
	if l.expires != 0 {
		out.Expires = time.Unix(0, l.expires)
	}
	return out
}

func sortedDigests(set map[Digest]struct{}) []Digest {
	out := slices.Collect(maps.Keys(set))
	slices.SortFunc(out, func(a, b Digest) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// The lease file: bucket "meta" holds the layout version; bucket "leases"
// one bucket per lease, named by its ID, holding "expires" (8 bytes, big
// endian unix nanoseconds; absent: never) and buckets "manifests" and
// "chunks" keyed by raw 32-byte digests.
var (
	bucketMeta      = []byte("meta")
	bucketLeases    = []byte("leases")
	bucketManifests = []byte("manifests")
	bucketChunks    = []byte("chunks")
	keyLayout       = []byte("layout")
	keyExpires      = []byte("expires")
)

func openLeases(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w (%s)", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketLeases); err != nil {
			return err
		}
		switch v := meta.Get(keyLayout); {
		case v == nil:
			return meta.Put(keyLayout, []byte(layoutVersion))
		case string(v) != layoutVersion:
			return fmt.Errorf("store has layout %q, this gpumesh reads %q", v, layoutVersion)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("blob: %s: %w", path, err)
	}
	return db, nil
}

func readLeases(db *bolt.DB) (map[string]*lease, error) {
	out := make(map[string]*lease)
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLeases).ForEachBucket(func(id []byte) error {
			b := tx.Bucket(bucketLeases).Bucket(id)
			l := &lease{manifests: make(map[Digest]struct{}), chunks: make(map[Digest]struct{})}
			if v := b.Get(keyExpires); v != nil {
				if len(v) != 8 {
					return fmt.Errorf("lease %q: expiry of %d bytes", id, len(v))
				}
				l.expires = int64(binary.BigEndian.Uint64(v))
			}
			for name, set := range map[string]map[Digest]struct{}{string(bucketManifests): l.manifests, string(bucketChunks): l.chunks} {
				sub := b.Bucket([]byte(name))
				if sub == nil {
					continue
				}
				err := sub.ForEach(func(k, _ []byte) error {
					var d Digest
					if len(k) != len(d) {
						return fmt.Errorf("lease %q: a digest of %d bytes", id, len(k))
					}
					copy(d[:], k)
					set[d] = struct{}{}
					return nil
				})
				if err != nil {
					return err
				}
			}
			out[string(id)] = l
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("blob: reading leases: %w", err)
	}
	return out, nil
}

func checkLeaseID(id string) error {
	if id == "" || len(id) > 256 || !utf8.ValidString(id) {
		return fmt.Errorf("blob: lease ID %q: want 1 to 256 bytes of UTF-8", clip(id))
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("blob: lease ID %q holds the control character %U", clip(id), r)
		}
	}
	return nil
}

// SetLease creates the lease l.ID, or replaces what it holds and its
// expiry, in one step: swapping a checkpoint's lease from the old
// manifest to the new leaves no moment where neither is kept.
func (s *Store) SetLease(l Lease) error {
	if err := checkLeaseID(l.ID); err != nil {
		return err
	}
	mem := &lease{manifests: make(map[Digest]struct{}), chunks: make(map[Digest]struct{})}
	if !l.Expires.IsZero() {
		mem.expires = l.Expires.UnixNano()
	}
	if err := addDigests(mem.manifests, l.Manifests); err != nil {
		return err
	}
	if err := addDigests(mem.chunks, l.Chunks); err != nil {
		return err
	}
	err := s.lw.Do(&leaseWrite{
		apply: func(tx *bolt.Tx) error {
			all := tx.Bucket(bucketLeases)
			if all.Bucket([]byte(l.ID)) != nil {
				if err := all.DeleteBucket([]byte(l.ID)); err != nil {
					return err
				}
			}
			b, err := all.CreateBucket([]byte(l.ID))
			if err != nil {
				return err
			}
			if mem.expires != 0 {
				if err := b.Put(keyExpires, binary.BigEndian.AppendUint64(nil, uint64(mem.expires))); err != nil {
					return err
				}
			}
			return putDigests(b, l.Manifests, l.Chunks)
		},
		after: func() { s.leases[l.ID] = mem },
	})
	if err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("blob: lease %q: %w", l.ID, err)
	}
	return err
}

// AddToLease adds manifests and chunks to an existing lease; it fails
// with ErrNotFound for a lease that does not exist.
func (s *Store) AddToLease(id string, manifests, chunks []Digest) error {
	probe := make(map[Digest]struct{})
	if err := addDigests(probe, manifests); err != nil {
		return err
	}
	if err := addDigests(probe, chunks); err != nil {
		return err
	}
	var l *lease
	err := s.lw.Do(&leaseWrite{
		check: func() error {
			var ok bool
			if l, ok = s.leases[id]; !ok {
				return fmt.Errorf("%w: lease %q", ErrNotFound, clip(id))
			}
			return nil
		},
		apply: func(tx *bolt.Tx) error {
			return putDigests(tx.Bucket(bucketLeases).Bucket([]byte(id)), manifests, chunks)
		},
		after: func() {
			for _, d := range manifests {
				l.manifests[d] = struct{}{}
			}
			for _, d := range chunks {
				l.chunks[d] = struct{}{}
			}
		},
	})
	if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("blob: lease %q: %w", id, err)
	}
	return err
}

func addDigests(set map[Digest]struct{}, ds []Digest) error {
	for _, d := range ds {
		if d.IsZero() {
			return fmt.Errorf("%w: a lease cannot name the zero digest", ErrBadDigest)
		}
		set[d] = struct{}{}
	}
	return nil
}

func putDigests(b *bolt.Bucket, manifests, chunks []Digest) error {
	for name, ds := range map[string][]Digest{string(bucketManifests): manifests, string(bucketChunks): chunks} {
		if len(ds) == 0 {
			continue
		}
		sub, err := b.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := sub.Put(d[:], nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeleteLease deletes a lease: what only it kept may be collected from
// now on. It fails with ErrNotFound for a lease that does not exist.
func (s *Store) DeleteLease(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.leases[id]; !ok {
		return fmt.Errorf("%w: lease %q", ErrNotFound, clip(id))
	}
	return s.deleteLeasesLocked([]string{id})
}

// deleteLeasesLocked deletes leases that exist, in one transaction. The
// caller holds s.mu.
func (s *Store) deleteLeasesLocked(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, id := range ids {
			if err := tx.Bucket(bucketLeases).DeleteBucket([]byte(id)); err != nil {
				return fmt.Errorf("lease %q: %w", clip(id), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("blob: deleting %d leases: %w", len(ids), err)
	}
	for _, id := range ids {
		delete(s.leases, id)
	}
	return nil
}

// Lease returns a lease, expired or not, or ErrNotFound.
func (s *Store) Lease(id string) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return Lease{}, fmt.Errorf("%w: lease %q", ErrNotFound, clip(id))
	}
	return l.export(id), nil
}

// Leases returns every lease, by ID.
func (s *Store) Leases() []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.leases))
	out := make([]Lease, len(ids))
	for i, id := range ids {
		out[i] = s.leases[id].export(id)
	}
	return out
}
