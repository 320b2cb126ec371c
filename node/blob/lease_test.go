package blob

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestLeasesPersistAcrossRestart(t *testing.T) {
	s, c := openStore(t, NoLimit)
	m1, m2, c1 := Sum([]byte("m1")), Sum([]byte("m2")), Sum([]byte("c1"))
	exp := c.Now().Add(time.Hour)
	if err := s.SetLease(Lease{ID: "ckpt/job/0", Manifests: []Digest{m1}, Expires: exp}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddToLease("ckpt/job/0", []Digest{m2}, []Digest{c1}); err != nil {
		t.Fatal(err)
	}
	mustLease(t, s, "payload/job")
	if err := s.DeleteLease("payload/job"); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, s, c, NoLimit)
	got := s.Leases()
	if len(got) != 1 {
		t.Fatalf("leases after restart: %+v, want ckpt/job/0 alone", got)
	}
	l := got[0]
	wantM := []Digest{m1, m2}
	slices.SortFunc(wantM, func(a, b Digest) int { return bytes.Compare(a[:], b[:]) })
	if l.ID != "ckpt/job/0" || !l.Expires.Equal(exp) || !slices.Equal(l.Manifests, wantM) || !slices.Equal(l.Chunks, []Digest{c1}) {
		t.Fatalf("lease after restart: %+v", l)
	}
	if u := s.Usage(); u.Leases != 1 {
		t.Fatalf("Usage.Leases = %d", u.Leases)
	}

	// SetLease replaces what a lease holds.
	if err := s.SetLease(Lease{ID: "ckpt/job/0", Manifests: []Digest{m2}}); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, c, NoLimit)
	if l, err := s.Lease("ckpt/job/0"); err != nil || !slices.Equal(l.Manifests, []Digest{m2}) || len(l.Chunks) != 0 || !l.Expires.IsZero() {
		t.Fatalf("replaced lease: %+v, %v", l, err)
	}
}

func TestLeaseErrors(t *testing.T) {
	s, _ := openStore(t, NoLimit)
	if err := s.AddToLease("nope", []Digest{Sum(nil)}, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddToLease of a missing lease = %v", err)
	}
	if err := s.DeleteLease("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteLease of a missing lease = %v", err)
	}
	if _, err := s.Lease("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lease of a missing lease = %v", err)
	}
	for _, id := range []string{"", "a\nb", string(make([]byte, 257)), "\xff"} {
		if err := s.SetLease(Lease{ID: id}); err == nil {
			t.Errorf("SetLease(%q) succeeded", id)
		}
	}
	if err := s.SetLease(Lease{ID: "z", Chunks: []Digest{{}}}); !errors.Is(err, ErrBadDigest) {
		t.Errorf("a lease of the zero digest: %v", err)
	}
	if len(s.Leases()) != 0 {
		t.Errorf("failed calls left leases: %+v", s.Leases())
	}
}

// Leases set while another is being written go to the disk together, in
// one transaction, and each of them survives a restart: many attempts end
// together, and each keeps its outputs under a lease.
func TestLeasesSetTogetherShareOneCommitAndAllPersist(t *testing.T) {
	s, c := openStore(t, NoLimit)
	const later = 20
	release := make(chan struct{})
	entered := make(chan struct{}, later+1)
	commits := 0
	s.beforeLeaseCommit = func() { // the committer's goroutine alone runs it
		commits++
		entered <- struct{}{}
		if commits == 1 {
			<-release
		}
	}
	lease := func(i int) Lease {
		return Lease{ID: fmt.Sprintf("outputs/job-%d/0/1", i), Manifests: []Digest{Sum([]byte{byte(i)})}, Expires: c.Now().Add(time.Hour)}
	}
	errs := make(chan error, later+1)
	go func() { errs <- s.SetLease(lease(0)) }()
	<-entered // the first is on its way to the disk, and holds it
	for i := 1; i <= later; i++ {
		go func() { errs <- s.SetLease(lease(i)) }()
	}
	queued := s.lw.Len
	for deadline := time.Now().Add(10 * time.Second); queued() < later; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d leases queued behind the first", queued(), later)
		}
		runtime.Gosched()
	}
	close(release)
	for range later + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if commits != 2 {
		t.Errorf("%d leases took %d commits, want 2: the first, then the %d queued behind it together", later+1, commits, later)
	}
	s = reopen(t, s, c, NoLimit)
	for i := 0; i <= later; i++ {
		want := lease(i)
		if l, err := s.Lease(want.ID); err != nil || !slices.Equal(l.Manifests, want.Manifests) || !l.Expires.Equal(want.Expires) {
			t.Errorf("after restart, lease %s = %+v, %v", want.ID, l, err)
		}
	}
}

// A change refused by its own check (AddToLease of a lease that is not
// there) is refused alone; the others of its group are written.
func TestARefusedLeaseChangeDoesNotSinkItsGroup(t *testing.T) {
	s, c := openStore(t, NoLimit)
	release := make(chan struct{})
	first := true
	entered := make(chan struct{}, 3)
	s.beforeLeaseCommit = func() {
		entered <- struct{}{}
		if first {
			first = false
			<-release
		}
	}
	errs := make(chan error, 3)
	go func() { errs <- s.SetLease(Lease{ID: "a"}) }()
	<-entered
	var wg sync.WaitGroup
	var missing, other error
	wg.Add(2)
	go func() { defer wg.Done(); missing = s.AddToLease("nope", []Digest{Sum([]byte("m"))}, nil) }()
	go func() { defer wg.Done(); other = s.SetLease(Lease{ID: "b", Expires: c.Now().Add(time.Hour)}) }()
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		n := s.lw.Len()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 changes queued", n)
		}
	}
	close(release)
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(missing, ErrNotFound) {
		t.Errorf("AddToLease of a missing lease = %v, want ErrNotFound", missing)
	}
	if other != nil {
		t.Errorf("the other change of its group: %v", other)
	}
	s = reopen(t, s, c, NoLimit)
	if _, err := s.Lease("b"); err != nil {
		t.Errorf("after restart: %v", err)
	}
}
