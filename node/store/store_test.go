package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type record struct {
	ID    string  `json:"id"`
	State string  `json:"state"`
	Cost  float64 `json:"cost"`
}

func TestRecordsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Apply([]Op{
		Put(Jobs, "a", record{"a", "running", 1.5}),
		Put(Jobs, "b", record{"b", "pending", 0}),
		Put(Attempts, "a-s0-e1", record{"a", "running", 0}),
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Apply([]Op{Delete(Jobs, "b"), Put(Jobs, "a", record{"a", "succeeded", 3.25})}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got record
	if err := st.Get(Jobs, "a", &got); err != nil || got != (record{"a", "succeeded", 3.25}) {
		t.Fatalf("Get(a) = %+v, %v", got, err)
	}
	if err := st.Get(Jobs, "b", &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted record: err = %v", err)
	}
	var keys []string
	st.ForEach(Jobs, func(k string, _ []byte) error { keys = append(keys, k); return nil })
	if len(keys) != 1 || keys[0] != "a" {
		t.Errorf("jobs = %v", keys)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Apply([]Op{Put(Jobs, "a", record{ID: "a"}), Put("nosuch", "x", 1)})
	if err == nil {
		t.Fatal("an op on an unknown bucket was accepted")
	}
	if err := st.Get(Jobs, "a", &record{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a failed Apply left a record behind (err %v)", err)
	}
	if err := st.Apply([]Op{Put(Jobs, "", 1)}); err == nil {
		t.Error("an empty key was accepted")
	}
	if err := st.Apply([]Op{Put(Jobs, "bad", func() {})}); err == nil {
		t.Error("an unencodable value was accepted")
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
}

func TestNotAStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	os.WriteFile(path, []byte("this is not a bbolt file, it is a text file of some length"), 0o600)
	if _, err := Open(path); err == nil {
		t.Fatal("a garbage file opened as state")
	}
}

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(); err != nil {
		t.Fatalf("Check of an open store: %v", err)
	}
	st.Close()
	err = st.Check()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not open") {
		t.Fatalf("Check after Close: %v, want an error naming %s as not open", err, path)
	}
}

// Applies that come while a transaction is being written go together in
// the next one: 20 writers waiting behind a held commit cost one more
// transaction, not 20, and each finds its record on disk when Apply
// returns. A bad Apply among them is refused alone.
func TestConcurrentAppliesShareATransaction(t *testing.T) {
	st, hold, held := storeHoldingItsFirstCommit(t)
	errs := make(chan error, 22)
	go func() { errs <- st.Apply([]Op{Put(Jobs, "first", record{ID: "first"})}) }()
	<-held
	const writers = 20
	for i := range writers {
		go func() { errs <- st.Apply([]Op{Put(Jobs, fmt.Sprintf("w%02d", i), record{ID: "w"})}) }()
	}
	bad := st.Apply([]Op{Put(Jobs, "ok-in-bad", record{}), Put("nosuch", "x", 1)})
	if bad == nil || !strings.Contains(bad.Error(), "unknown bucket") {
		t.Errorf("a bad Apply: %v", bad)
	}
	for {
		if st.queue.Len() == writers {
			break
		}
		time.Sleep(time.Millisecond) // polling for the writers to queue
	}
	close(hold)
	for range writers + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st.mu.Lock()
	commits := st.commits
	st.mu.Unlock()
	if commits != 2 {
		t.Errorf("%d transactions for %d Applies, want 2", commits, writers+1)
	}
	n := 0
	st.ForEach(Jobs, func(k string, _ []byte) error { n++; return nil })
	if n != writers+1 {
		t.Errorf("%d records, want %d", n, writers+1)
	}
	if err := st.Get(Jobs, "ok-in-bad", &record{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("the bad Apply's good op was written (err %v)", err)
	}
}

// Writes queued in an order reach the disk in it, whoever commits them,
// and a barrier (Queue of no ops) returns only once what was queued
// before it is on disk: a replica holder that found a record already
// taken acknowledges it only then.
func TestQueuedWritesLandInOrderBehindABarrier(t *testing.T) {
	st, hold, held := storeHoldingItsFirstCommit(t)
	put := func(v string) func() error {
		wait, err := st.Queue([]Op{Put(Jobs, "job", record{ID: v})})
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}
	other := put("held")
	errs := make(chan error, 3)
	go func() { errs <- other() }()
	<-held // "held" is being committed, and stays so
	older, newer := put("v1"), put("v2")
	barrier, err := st.Queue(nil)
	if err != nil {
		t.Fatal(err)
	}
	barrierDone := make(chan error, 1)
	go func() { barrierDone <- barrier() }()
	go func() { errs <- newer() }() // waits in turn: the older write is ahead
	select {
	case err := <-barrierDone:
		t.Fatalf("the barrier returned (%v) while the writes before it were held", err)
	default:
	}
	close(hold)
	if err := <-barrierDone; err != nil {
		t.Fatal(err)
	}
	var got record
	if err := st.Get(Jobs, "job", &got); err != nil || got.ID != "v2" {
		t.Fatalf("after the barrier the disk holds %+v (%v), want v2, the last queued", got, err)
	}
	if err := older(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Queue([]Op{Put("nosuch", "x", 1)}); err == nil || !strings.Contains(err.Error(), "unknown bucket") {
		t.Errorf("a bad Queue: %v", err)
	}
}

// storeHoldingItsFirstCommit opens a store whose first transaction waits,
// once held is closed, until the test closes hold.
func storeHoldingItsFirstCommit(t *testing.T) (st *Store, hold, held chan struct{}) {
	t.Helper()
	st, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	hold, held = make(chan struct{}), make(chan struct{})
	first := true
	st.SetBeforeCommit(func() {
		if first {
			first = false
			close(held)
			<-hold
		}
	})
	return st, hold, held
}
