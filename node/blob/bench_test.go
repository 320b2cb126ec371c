package blob

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/blob/internal/bench"
)

// BenchmarkPutChangedTree prints the figure for deduplication: a
// tree is put, 5% of its bytes change (regions of 4 MiB, GPUMESH_BLOB_
// BENCH_REGION to change that; a fifth of them inserted, shifting the rest
// of their file), and the tree is put again: newBytes/total is what a
// holder of the first version receives (target ≤ 8%). It also prints the
// throughput of Put and Restore and their peak memory (target < 200 MiB
// at 4 GiB). Quote it at GPUMESH_BLOB_BENCH_SIZE=4GiB:
//
//	GPUMESH_BLOB_BENCH_SIZE=4GiB go test -run XXX -bench PutChangedTree -benchtime 1x ./node/blob/
func BenchmarkPutChangedTree(b *testing.B) {
	size, err := bench.Size()
	if err != nil {
		b.Fatal(err)
	}
	region := int64(4 << 20)
	if v := os.Getenv("GPUMESH_BLOB_BENCH_REGION"); v != "" {
		if region, err = bench.ParseSize(v); err != nil {
			b.Fatal(err)
		}
	}
	tree := bench.NewTree(size, 0.05, region)
	src := filepath.Join(b.TempDir(), "tree")
	if err := tree.Write(src, 1); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		s, err := Open(Config{Dir: filepath.Join(b.TempDir(), "blobs"), Limit: NoLimit})
		if err != nil {
			b.Fatal(err)
		}
		mustLease(b, s, "v1")
		mustLease(b, s, "v2")
		if err := tree.Write(src, 1); err != nil { // back to version 1
			b.Fatal(err)
		}
		b.StartTimer()

		watch := bench.Watch()
		start := time.Now()
		v1, err := s.Put(ctx, src, "v1")
		if err != nil {
			b.Fatal(err)
		}
		putTime := time.Since(start)
		putPeak := watch()

		b.StopTimer()
		if err := tree.Write(src, 2); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		v2, err := s.Put(ctx, src, "v2")
		if err != nil {
			b.Fatal(err)
		}

		watch = bench.Watch()
		start = time.Now()
		if err := s.Restore(ctx, v2.Manifest, filepath.Join(b.TempDir(), "restored")); err != nil {
			b.Fatal(err)
		}
		restoreTime := time.Since(start)
		restorePeak := watch()

		ratio := float64(v2.NewBytes) / float64(v2.Bytes)
		b.ReportMetric(100*ratio, "%new")
		b.ReportMetric(float64(v1.Bytes)/putTime.Seconds()/1e6, "put-MB/s")
		b.ReportMetric(float64(v2.Bytes)/restoreTime.Seconds()/1e6, "restore-MB/s")
		b.ReportMetric(float64(max(putPeak.RSS, restorePeak.RSS))/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(float64(max(putPeak.Heap, restorePeak.Heap))/(1<<20), "peak-heap-MiB")
		b.Logf("tree %s in %d files; %s changed in %d regions of %s (%.2f%%)",
			bench.Human(v1.Bytes), tree.Files, bench.Human(tree.Changed()), len(tree.Edits), bench.Human(region),
			100*float64(tree.Changed())/float64(v1.Bytes))
		b.Logf("second put: %s new of %s = %.2f%% (target ≤ 8%%); %d of %d chunks new",
			bench.Human(v2.NewBytes), bench.Human(v2.Bytes), 100*ratio, v2.NewChunks, v2.Chunks)
		b.Logf("put %s in %v (%.0f MB/s), peak heap %s, peak RSS %s",
			bench.Human(v1.Bytes), putTime.Round(time.Millisecond), float64(v1.Bytes)/putTime.Seconds()/1e6,
			bench.Human(int64(putPeak.Heap)), bench.Human(int64(putPeak.RSS)))
		b.Logf("restore %s in %v (%.0f MB/s), peak heap %s, peak RSS %s",
			bench.Human(v2.Bytes), restoreTime.Round(time.Millisecond), float64(v2.Bytes)/restoreTime.Seconds()/1e6,
			bench.Human(int64(restorePeak.Heap)), bench.Human(int64(restorePeak.RSS)))
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkPutSmallTree is what keeping a small job's outputs costs a
// node at each attempt's end: a tree of a directory and two small files
// (a job that wrote a result and a log line). It reports the CPU time and
// bytes allocated per Put; every ended attempt pays it.
//
//	go test -run XXX -bench PutSmallTree -benchmem ./node/blob/
func BenchmarkPutSmallTree(b *testing.B) {
	src := b.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "out"), 0o700); err != nil {
		b.Fatal(err)
	}
	for name, size := range map[string]int{"out/result.json": 300, "stdout.log": 4 << 10} {
		if err := os.WriteFile(filepath.Join(src, name), make([]byte, size), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	s, err := Open(Config{Dir: filepath.Join(b.TempDir(), "blobs"), Limit: NoLimit})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	mustLease(b, s, "out")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Put(ctx, src, "out"); err != nil {
			b.Fatal(err)
		}
	}
}
