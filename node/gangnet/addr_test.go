package gangnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAddrsOfAJobsRanks(t *testing.T) {
	sub := Subnet("job-1")
	if sub.Bits() != 16 || sub.Addr().As4()[0] != 10 || sub.Addr().As4()[1] == 0 || sub.Addr().As4()[1] == 255 {
		t.Fatalf("subnet %s: want 10.X.0.0/16 with X in 1..254", sub)
	}
	if Subnet("job-1") != sub {
		t.Fatal("the subnet is not derived from the job alone")
	}
	for _, rank := range []int{0, 1, 254, 255, 256, MaxRank} {
		a, err := Addr("job-1", rank)
		if err != nil {
			t.Fatal(err)
		}
		if a.Bits() != 16 || !sub.Contains(a.Addr()) || a.Addr() == sub.Addr() || a.Addr() == netip.MustParseAddr(strings.Replace(sub.Addr().String(), ".0.0", ".255.255", 1)) {
			t.Errorf("rank %d: %s", rank, a)
		}
		if r, ok := RankOf("job-1", a.Addr()); !ok || r != rank {
			t.Errorf("rank %d's address %s is rank %d, %v", rank, a, r, ok)
		}
	}
	if a, _ := Addr("job-1", 0); a.Addr().As4()[3] != 1 {
		t.Errorf("rank 0 (the master) is %s, want .0.1", a)
	}
	for _, rank := range []int{-1, MaxRank + 1} {
		if _, err := Addr("job-1", rank); err == nil {
			t.Errorf("rank %d has an address", rank)
		}
	}
	for _, a := range []netip.Addr{sub.Addr(), netip.MustParseAddr("192.168.1.1"), Subnet("another-job").Addr().Next()} {
		if r, ok := RankOf("job-1", a); ok {
			t.Errorf("%s is rank %d of job-1 (subnet %s)", a, r, sub)
		}
	}
	last := sub.Addr().As4()
	last[2], last[3] = 255, 255
	if _, ok := RankOf("job-1", netip.AddrFrom4(last)); ok {
		t.Error("the last address is a rank's")
	}
}

func FuzzRequestFrame(f *testing.F) {
	f.Add([]byte(`{"job":"j1","from_rank":0,"from_share":0,"from_epoch":3,"to_rank":1,"to_share":1,"to_epoch":4,"port":29500}`))
	f.Add([]byte(`{"job":"j1"} {}`))
	f.Add([]byte(`{"job":"../x","port":-1,"extra":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r request
		if err := decodeFrame(b, &r); err != nil {
			return
		}
		if err := r.validate(); err != nil {
			return
		}
		if !jobPattern.MatchString(r.Job) || r.Port < 1 || r.Port > 65535 || r.FromRank == r.ToRank || r.FromEpoch == 0 {
			t.Fatalf("accepted %+v", r)
		}
	})
}
