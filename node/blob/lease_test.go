package blob

import (
	"bytes"
	"errors"
	"slices"
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
