package executor

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkCachedImageStart is the target for a cached image: an
// attempt's start — its directories, bundle and runtime spec, the
// runtime starting the container — until the image's entrypoint runs
// (its first line of output), median of the runs (target < 300 ms).
// Against it, in the same run, a host command (echo) started by the
// sandbox. Needs root and a working OCI runtime; skips without.
//
//	go test ./node/executor/ -run XXX -bench CachedImageStart -benchtime 20x
func BenchmarkCachedImageStart(b *testing.B) {
	ex := containerized(b, func(c *Config) { c.Logger = nil })
	rootfs := testRootfs(b, ex.Config().ContainerIDBase)
	var image, host []time.Duration
	i := 0
	for b.Loop() {
		i++
		for _, inImage := range []bool{true, false} {
			a := Attempt{JobID: "bench-" + map[bool]string{true: "img", false: "host"}[inImage], Epoch: uint64(i)}
			if inImage {
				a.Image = &Container{Rootfs: rootfs, Args: []string{"/bin/job", "report"}, Cwd: "/"}
			} else {
				a.Command = []string{"echo", "args", "report"}
			}
			start := time.Now()
			r, err := ex.Start(a)
			if err != nil {
				b.Fatal(err)
			}
			for !strings.Contains(readAll(b, ex, a.Name(), Stdout), "args ") {
				select {
				case <-r.Done():
					b.Fatalf("the attempt ended before it ran: %+v %s", r.Result(), readAll(b, ex, a.Name(), Stdout))
				case <-r.Changed():
				}
			}
			took := time.Since(start)
			<-r.Done()
			if inImage {
				image = append(image, took)
			} else {
				host = append(host, took)
			}
		}
	}
	mi, mh := median(image), median(host)
	b.ReportMetric(float64(mi.Microseconds())/1000, "image-median-ms")
	b.ReportMetric(float64(mh.Microseconds())/1000, "host-median-ms")
	b.ReportMetric(mi.Seconds()/mh.Seconds(), "image/host")
	b.Logf("runtime %s: image start median %v, host command in the sandbox %v (%d runs each)", ex.Capabilities().Runtime, mi, mh, len(image))
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
