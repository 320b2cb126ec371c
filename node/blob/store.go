package blob

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpumesh/gpumesh/internal/groupcommit"
)

// Kind says whether an object is a chunk or a manifest. The two live in
// separate namespaces: the same bytes stored as both are two objects.
type Kind uint8

// The kinds of object.
const (
	KindChunk Kind = iota + 1
	KindManifest
)

func (k Kind) String() string {
	switch k {
	case KindChunk:
		return "chunk"
	case KindManifest:
		return "manifest"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k == KindChunk || k == KindManifest }

// maxSize is the largest object of a kind.
func (k Kind) maxSize() int64 {
	if k == KindManifest {
		return MaxManifestSize
	}
	return MaxChunkSize
}

// NoLimit as Config.Limit lets the store grow without bound.
const NoLimit = -1

// Config configures a Store. Dir is required.
type Config struct {
	// Dir holds the store (the node gives DATA/blobs). It is created
	// (0700) when missing.
	Dir string
	// Limit bounds the bytes of stored objects. 0 (the default) takes
	// DefaultLimit of the file system under Dir when the store opens;
	// NoLimit sets none.
	Limit int64
	// Logger gets what the store removes, finds corrupt or skips.
	// Default: discard.
	Logger *slog.Logger
	// Now is the clock of lease expiry and of the age of objects.
	// Default: time.Now.
	Now func() time.Time
}

// Store is a content-addressed store of chunks and manifests on disk, with
// leases that keep what is in use and a byte limit kept by collecting what
// is not. Its methods are safe for concurrent use.
//
// The store keeps an index of its objects (digest, size, age) in memory,
// built from the directory when it opens: about 100 bytes an object, some
// 10 MB for 100 GB of 1 MiB chunks.
type Store struct {
	empty Digest // EmptyTree, held without being stored
	dir   string
	log   *slog.Logger
	now   func() time.Time
	db    *bolt.DB
	limit int64 // NoLimit or > 0

	mu       sync.Mutex
	closed   bool
	objects  [3]map[Digest]object // by Kind
	used     int64                // bytes of the objects
	reserved int64                // bytes of writes in flight
	leases   map[string]*lease
	holds    map[*hold]struct{}
	chunksOf map[Digest][]Digest // decoded manifests' chunks, for collection

	// lw queues the lease changes to commit together (leasewrite.go).
	lw *groupcommit.Queue[*leaseWrite]

	// fanned[k][b] says the directory of objects of kind k whose digest
	// starts with byte b exists.
	fanned [3][256]atomic.Bool

	// pools keeps the buffers and splitters of Puts for the next.
	pools reuse

	// afterChunk, when set (tests), runs after Put stored each chunk.
	afterChunk func()
	// beforeLeaseCommit, when set (tests), runs before each group of
	// lease changes is committed, without any lock held: a slow disk.
	beforeLeaseCommit func()
}

// object is the index's record of a stored object.
type object struct {
	size  int64
	stamp int64 // unix nanoseconds of its last store or reuse: its age for collection
	// checked says this store hashed the object's bytes since it opened
	// (as they were written, or as a restore read them): a restore
	// copies it without hashing it again.
	checked bool
}

// The store's directory.
const (
	chunksDir     = "chunks"    // chunks/ab/abcdef…: one file per chunk
	manifestsDir  = "manifests" // manifests/ab/abcdef…: one file per manifest
	ingestDir     = "ingest"    // writers' temporary files
	leasesFile    = "leases.db" // bbolt: leases, and the layout version
	layoutVersion = "1"
)

func kindDir(k Kind) string {
	if k == KindManifest {
		return manifestsDir
	}
	return chunksDir
}

// path is where an object lives: a fan-out by the first two hex digits
// keeps directories small.
func (s *Store) path(k Kind, d Digest) string {
	h := d.Hex()
	return filepath.Join(s.dir, kindDir(k), h[:2], h)
}

// Open opens or creates the store in cfg.Dir. It fails with ErrLocked
// within a second when another process has it open. Writes that a crash
// interrupted are discarded; every object under its name was checked
// when it was written.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("blob: Config.Dir is required")
	}
	if cfg.Limit < NoLimit {
		return nil, fmt.Errorf("blob: Config.Limit %d: want > 0, 0 for the default or NoLimit", cfg.Limit)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, d := range []string{"", chunksDir, manifestsDir, ingestDir} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("blob: %w", err)
		}
	}
	s := &Store{
		empty:    EmptyTree(),
		dir:      cfg.Dir,
		log:      cfg.Logger,
		now:      cfg.Now,
		leases:   make(map[string]*lease),
		holds:    make(map[*hold]struct{}),
		chunksOf: make(map[Digest][]Digest),
	}
	s.lw = groupcommit.New(s.commitLeases)
	db, err := openLeases(filepath.Join(cfg.Dir, leasesFile))
	if err != nil {
		return nil, err
	}
	s.db = db
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	switch {
	case cfg.Limit > 0 || cfg.Limit == NoLimit:
		s.limit = cfg.Limit
	default:
		total, free, err := DiskSpace(cfg.Dir)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("blob: no Config.Limit and no default: %w", err)
		}
		s.limit = DefaultLimit(total, free, s.used)
	}
	s.log.Debug("blob store open", "dir", s.dir, "bytes", s.used, "limit", s.limit,
		"chunks", len(s.objects[KindChunk]), "manifests", len(s.objects[KindManifest]), "leases", len(s.leases))
	return s, nil
}

// load empties the ingest directory, indexes the objects and reads the
// leases.
func (s *Store) load() error {
	ingest := filepath.Join(s.dir, ingestDir)
	left, err := os.ReadDir(ingest)
	if err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	for _, e := range left {
		if err := os.RemoveAll(filepath.Join(ingest, e.Name())); err != nil {
			return fmt.Errorf("blob: clearing interrupted writes: %w", err)
		}
	}
	for _, k := range []Kind{KindChunk, KindManifest} {
		s.objects[k] = make(map[Digest]object)
		if err := s.index(k); err != nil {
			return err
		}
	}
	leases, err := readLeases(s.db)
	if err != nil {
		return err
	}
	s.leases = leases
	return nil
}

// index adds the objects of a kind found on disk.
func (s *Store) index(k Kind) error {
	top := filepath.Join(s.dir, kindDir(k))
	fans, err := os.ReadDir(top)
	if err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	for _, fan := range fans {
		if !fan.IsDir() {
			s.log.Warn("blob: stray file in the store left alone", "path", filepath.Join(top, fan.Name()))
			continue
		}
		files, err := os.ReadDir(filepath.Join(top, fan.Name()))
		if err != nil {
			return fmt.Errorf("blob: %w", err)
		}
		for _, f := range files {
			p := filepath.Join(top, fan.Name(), f.Name())
			d, err := ParseDigest(digestPrefix + f.Name())
			if err != nil || f.Name()[:2] != fan.Name() || !f.Type().IsRegular() {
				s.log.Warn("blob: stray file in the store left alone", "path", p)
				continue
			}
			info, err := f.Info()
			if err != nil {
				return fmt.Errorf("blob: %w", err)
			}
			s.objects[k][d] = object{size: info.Size(), stamp: info.ModTime().UnixNano()}
			s.used += info.Size()
		}
	}
	return nil
}

// Close closes the store's lease file. Writers still open fail to commit;
// calls after Close return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	return nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Has reports whether the store holds an object.
func (s *Store) Has(k Kind, d Digest) bool {
	_, ok := s.Stat(k, d)
	return ok
}

// Stat returns an object's size, and whether the store holds it.
func (s *Store) Stat(k Kind, d Digest) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !k.valid() {
		return 0, false
	}
	if k == KindManifest && d == s.empty {
		return int64(len(emptyTreeEncoding)), true
	}
	o, ok := s.objects[k][d]
	return o.size, ok
}

// Reader opens a stored object for reading and returns its size. The
// bytes are those that were checked against the digest when they were
// written; a reader that needs them checked again hashes them (Restore
// does, for the chunks the store did not hash since it opened). Reader fails with ErrNotFound for an object the store does not
// hold. An object that no lease or hold keeps may be collected while it
// is open: where the system allows, the open reader still reads it whole.
func (s *Store) Reader(k Kind, d Digest) (io.ReadCloser, int64, error) {
	if _, ok := s.Stat(k, d); !ok {
		return nil, 0, fmt.Errorf("%w: %s %s", ErrNotFound, k, d)
	}
	if k == KindManifest && d == s.empty {
		return io.NopCloser(strings.NewReader(emptyTreeEncoding)), int64(len(emptyTreeEncoding)), nil
	}
	f, err := os.Open(s.path(k, d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: %s %s", ErrNotFound, k, d)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("blob: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("blob: %w", err)
	}
	return f, info.Size(), nil
}

// Manifest reads and decodes a stored manifest. The result is the
// caller's to keep.
func (s *Store) Manifest(d Digest) (*Manifest, error) {
	b, err := s.readManifest(d)
	if err != nil {
		return nil, err
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("blob: stored manifest %s: %w", d, err)
	}
	return m, nil
}

func (s *Store) readManifest(d Digest) ([]byte, error) {
	r, size, err := s.Reader(KindManifest, d)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if size > MaxManifestSize {
		return nil, &ManifestError{Entry: -1, Reason: fmt.Sprintf("stored manifest %s is %d bytes, over the limit", d, size)}
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("blob: reading manifest %s: %w", d, err)
	}
	return b, nil
}

// Missing returns the chunks of a stored manifest that the store does not
// hold, each once, in the order they first appear in it.
func (s *Store) Missing(m Digest) ([]ChunkRef, error) {
	man, err := s.Manifest(m)
	if err != nil {
		return nil, err
	}
	chunks := man.Chunks()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ChunkRef
	for _, c := range chunks {
		if _, ok := s.objects[KindChunk][c.Digest]; !ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// Lacks returns those of ds that the store does not hold as chunks.
func (s *Store) Lacks(ds []Digest) []Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Digest
	for _, d := range ds {
		if _, ok := s.objects[KindChunk][d]; !ok {
			out = append(out, d)
		}
	}
	return out
}
