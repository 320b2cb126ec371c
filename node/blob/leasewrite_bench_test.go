package blob

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSetLease measures a lease set on the disk, as each attempt's
// outputs are kept when it ends: by one caller at a time (serial, the
// baseline), and by 32 at once (parallel), as when many attempts end
// together. ns/op is per lease.
//
//	go test -run '^$' -bench SetLease ./node/blob/
func BenchmarkSetLease(b *testing.B) {
	lease := func(i int64, exp time.Time) Lease {
		return Lease{ID: fmt.Sprintf("outputs/job-%d/0/1", i), Manifests: []Digest{Sum([]byte(fmt.Sprint(i)))}, Expires: exp}
	}
	b.Run("serial", func(b *testing.B) {
		s, c := openStore(b, NoLimit)
		exp := c.Now().Add(time.Hour)
		var i int64
		for b.Loop() {
			i++
			if err := s.SetLease(lease(i, exp)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel-32", func(b *testing.B) {
		s, c := openStore(b, NoLimit)
		exp := c.Now().Add(time.Hour)
		var n atomic.Int64
		b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.SetLease(lease(n.Add(1), exp)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
