package blob

import (
	"bytes"
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// clock is a settable clock for the store's ages and expiries.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// openStore opens a store in a fresh directory.
func openStore(t testing.TB, limit int64) (*Store, *clock) {
	t.Helper()
	c := newClock()
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "blobs"), Limit: limit, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

// reopen closes s and opens its directory again.
func reopen(t testing.TB, s *Store, c *clock, limit int64) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Config{Dir: s.Dir(), Limit: limit, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// lease creates a lease that never expires.
func mustLease(t testing.TB, s *Store, id string) {
	t.Helper()
	if err := s.SetLease(Lease{ID: id}); err != nil {
		t.Fatal(err)
	}
}

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0], key[1], key[2], key[3] = byte(seed), byte(seed>>8), byte(seed>>16), byte(seed>>24)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// node is one member of a test tree.
type node struct {
	mode   fs.FileMode // permission bits
	data   []byte      // a file's bytes
	target string      // a link's target: makes it a link
	dir    bool
}

// writeTree creates a tree under dir. Parents come before children when
// the map is walked in sorted order, which writeTree does.
func writeTree(t testing.TB, dir string, tree map[string]node) {
	t.Helper()
	paths := make([]string, 0, len(tree))
	for p := range tree {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		n := tree[p]
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case n.dir:
			err = os.Mkdir(full, 0o700)
		case n.target != "":
			err = os.Symlink(n.target, full)
		default:
			err = os.WriteFile(full, n.data, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := len(paths) - 1; i >= 0; i-- {
		n := tree[paths[i]]
		if n.target == "" {
			if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(paths[i])), n.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readTree reads a tree back as writeTree takes it.
func readTree(t testing.TB, dir string) map[string]node {
	t.Helper()
	out := make(map[string]node)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			out[rel] = node{dir: true, mode: info.Mode().Perm()}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = node{target: target}
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = node{data: data, mode: info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree fails t where two trees differ.
func sameTree(t testing.TB, got, want map[string]node) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s: missing", p)
		case g.dir != w.dir || g.target != w.target:
			t.Errorf("%s: got %+v, want %+v", p, g, w)
		case !bytes.Equal(g.data, w.data):
			t.Errorf("%s: %d bytes differ from the %d written", p, len(g.data), len(w.data))
		case g.mode != w.mode:
			t.Errorf("%s: mode %v, want %v", p, g.mode, w.mode)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: not in the tree put", p)
		}
	}
}

// put stores dir under a new lease named after it.
func put(t testing.TB, s *Store, dir string) PutStats {
	t.Helper()
	id := "test/" + filepath.Base(dir)
	if _, err := s.Lease(id); err != nil {
		mustLease(t, s, id)
	}
	st, err := s.Put(context.Background(), dir, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
