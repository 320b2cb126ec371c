// Package store keeps a node's durable state in one bbolt file under the data
// dir: the job records it coordinates or replicates, the attempts it runs,
// their usage, its suppliers' track records, the claims it granted and what
// its cards earned. The node groups the writes of its driver's turns into one
// transaction, committed with fsync before it sends anything that depends on
// them, so what a node acknowledged survives its restart. Applies that come at
// once from several goroutines (the node's persister, replicas arriving)
// share one transaction and one fsync: group commit.
//
//	st, err := store.Open(filepath.Join(dataDir, "state.db"))
//	err = st.Apply([]store.Op{store.Put(store.Jobs, id, record)})
//	err = st.Get(store.Jobs, id, &record)
//	st.Close()
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpumesh/gpumesh/internal/groupcommit"
)

// Bucket names a kind of record.
type Bucket string

// The buckets of a node's state.
const (
	Jobs     Bucket = "jobs"     // job records this node coordinates or replicates
	Attempts Bucket = "attempts" // attempts this node runs or ran
	Meta     Bucket = "meta"     // node facts: schema version, first start
	// TrackRecords maps a supplier's peer ID to the track record this
	// node keeps of it as a coordinator (market.TrackRecord).
	TrackRecords Bucket = "track_records"
	// Claims maps a job ID to the claim this node granted a would-be
	// coordinator of the job (its term and peer ID) and has not yet seen
	// replaced by that coordinator's record.
	Claims Bucket = "claims"
	// Earnings holds what this node's cards earned: per local day and
	// model, per model in all, and the card-seconds counted of each
	// attempt not yet closed (node/earnings.go).
	Earnings Bucket = "earnings"
	// Receipts holds signed usage receipts (node/receipts): those this
	// node's attempts issued and those it accepted as a coordinator, by
	// job, share, epoch and sequence number.
	Receipts Bucket = "receipts"
	// Tombstones maps the ID of a job whose record this node dropped,
	// KeepJobs after the job ended, to what it keeps of its end
	// (jobstate.Tombstone): a stale copy of the job never runs it again.
	Tombstones Bucket = "tombstones"
)

// Buckets lists every bucket, created on Open.
var buckets = []Bucket{Jobs, Attempts, Meta, TrackRecords, Claims, Earnings, Receipts, Tombstones}

const schemaVersion = "1"

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("store: not found")

// ErrLocked is returned by Open when another process holds the file.
var ErrLocked = errors.New("store: the data dir is in use by another gpumesh process")

// Store is a node's state file. Its methods are safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string

	// queue holds the Applies waiting for the next transaction
	// (internal/groupcommit).
	queue *groupcommit.Queue[*commit]

	mu      sync.Mutex
	commits int   // transactions written by Apply (tests)
	lastErr error // the outcome of the last transaction
	// beforeCommit, when set, runs before each group's transaction
	// (tests hold a commit with it).
	beforeCommit func()
}

// commit is one Apply waiting in the group.
type commit struct {
	ops     []Op
	encoded [][]byte
}

// Open opens or creates the state file at path (mode 0600). It fails with
// ErrLocked within a second when another process has it open, and with a
// clear error when the file is not a gpumesh state file.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w (%s)", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		meta := tx.Bucket([]byte(Meta))
		switch v := meta.Get([]byte("schema")); {
		case v == nil:
			return meta.Put([]byte("schema"), []byte(schemaVersion))
		case string(v) != schemaVersion:
			return fmt.Errorf("state file has schema %q, this gpumesh reads %q", v, schemaVersion)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	s := &Store{db: db, path: path}
	s.queue = groupcommit.New(s.commitGroup)
	return s, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Check reads the state file's schema record back: nil when the store is
// open and its file readable, else an error naming the file and why (after
// Close: "database not open").
func (s *Store) Check() error {
	err := s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(Meta))
		if meta == nil {
			return errors.New("no meta bucket")
		}
		if v := meta.Get([]byte("schema")); string(v) != schemaVersion {
			return fmt.Errorf("schema %q, want %q", v, schemaVersion)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", s.path, err)
	}
	return nil
}

// Op is one change in an Apply.
type Op struct {
	bucket Bucket
	key    string
	value  any // nil deletes
}

// Put returns an Op that stores value (JSON-encoded) under key.
func Put(b Bucket, key string, value any) Op { return Op{bucket: b, key: key, value: value} }

// Delete returns an Op that removes key.
func Delete(b Bucket, key string) Op { return Op{bucket: b, key: key} }

// Apply commits ops in one transaction: all of them or none. Applies from
// several goroutines at once are committed together (group commit): the
// first to come commits what is queued, again until nothing is, while the
// others wait for the transaction that holds theirs; each returns once its
// ops are on disk. Ops are checked before they join a group, so that one
// Apply's bad op cannot fail another's.
func (s *Store) Apply(ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	wait, err := s.Queue(ops)
	if err != nil {
		return err
	}
	return wait()
}

// Queue checks ops and queues them behind every Apply and Queue that came
// before, which is the order they reach the disk in; wait commits them as
// Apply does and returns once they are on disk. A caller that must order
// its writes with what it decided (a newer record after an older one)
// queues under its own lock and waits after letting it go. No ops queue a
// barrier: its wait returns once everything queued before it is on disk,
// with the error of the transaction that held the last of it. wait must
// be called.
func (s *Store) Queue(ops []Op) (wait func() error, err error) {
	c := &commit{ops: ops, encoded: make([][]byte, len(ops))}
	for i, op := range ops {
		if !slices.Contains(buckets, op.bucket) {
			return nil, fmt.Errorf("store: unknown bucket %q", op.bucket)
		}
		if op.key == "" {
			return nil, fmt.Errorf("store: empty key in bucket %q", op.bucket)
		}
		if op.value == nil {
			continue
		}
		b, err := json.Marshal(op.value)
		if err != nil {
			return nil, fmt.Errorf("store: encoding %s/%s: %w", op.bucket, op.key, err)
		}
		c.encoded[i] = b
	}
	return s.queue.Add(c), nil
}

// SetBeforeCommit sets fn to run before each group's transaction; tests
// hold a commit with it, as a slow disk would.
func (s *Store) SetBeforeCommit(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeCommit = fn
}

// commitGroup writes the ops of every Apply of group, in order, in one
// transaction, whose outcome is each one's; a group of barriers alone
// needs none.
func (s *Store) commitGroup(group []*commit) []error {
	s.mu.Lock()
	hook := s.beforeCommit
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	err := s.writeGroup(group)
	errs := make([]error, len(group))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// writeGroup is commitGroup's transaction.
func (s *Store) writeGroup(group []*commit) error {
	if !slices.ContainsFunc(group, func(c *commit) bool { return len(c.ops) > 0 }) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.lastErr // what was queued before went in the last transaction
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, c := range group {
			for i, op := range c.ops {
				b := tx.Bucket([]byte(op.bucket))
				var err error
				if c.encoded[i] == nil {
					err = b.Delete([]byte(op.key))
				} else {
					err = b.Put([]byte(op.key), c.encoded[i])
				}
				if err != nil {
					return fmt.Errorf("store: %s/%s: %w", op.bucket, op.key, err)
				}
			}
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits++
	s.lastErr = err
	return err
}

// Get decodes the value under key into v.
func (s *Store) Get(b Bucket, key string, v any) error {
	return s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket([]byte(b)).Get([]byte(key))
		if raw == nil {
			return ErrNotFound
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return fmt.Errorf("store: decoding %s/%s: %w", b, key, err)
		}
		return nil
	})
}

// ForEach calls fn for every record of a bucket in key order, with the raw
// JSON value; fn returning an error stops the walk and returns it.
func (s *Store) ForEach(b Bucket, fn func(key string, value []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(b)).ForEach(func(k, v []byte) error {
			return fn(string(k), v)
		})
	})
}

// ForEachPrefix calls fn for every record of a bucket whose key starts
// with prefix, in key order, with the raw JSON value.
func (s *Store) ForEachPrefix(b Bucket, prefix string, fn func(key string, value []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte(b)).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			if err := fn(string(k), v); err != nil {
				return err
			}
		}
		return nil
	})
}
