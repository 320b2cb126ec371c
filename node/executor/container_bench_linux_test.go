package executor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/cardedit"
)

// BenchmarkCachedImageStart is the target for a cached image: an
// attempt's start — its directories, bundle and runtime spec, the
// runtime starting the container — until the image's entrypoint runs
// (its first line of output), median of the runs (target < 300 ms).
// Against it, in the same run, a host command (echo) started by the
// sandbox, and the same image on one NVIDIA card of a fake driver tree
// (its card edits made as the node makes them — node/cardedit, built-in
// rules: 3 device nodes, 4 library files and nvidia-smi — then 3 device
// nodes made and 5 files bound). Needs root and a working OCI runtime;
// skips without.
//
//	go test ./node/executor/ -run XXX -bench CachedImageStart -benchtime 20x
func BenchmarkCachedImageStart(b *testing.B) {
	ex := containerized(b, func(c *Config) { c.Logger = nil })
	rootfs := testRootfs(b, ex.Config().ContainerIDBase)
	ed, err := cardedit.New(cardedit.Config{Root: driverTree(b), CDIDirs: []string{b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	var image, host, cards []time.Duration
	i := 0
	for b.Loop() {
		i++
		for _, kind := range []string{"img", "host", "cards"} {
			a := Attempt{JobID: "bench-" + kind, Epoch: uint64(i)}
			start := time.Now()
			switch kind {
			case "img":
				a.Image = &Container{Rootfs: rootfs, Args: []string{"/bin/job", "report"}, Cwd: "/"}
			case "host":
				a.Command = []string{"echo", "args", "report"}
			case "cards":
				edits, err := ed.For([]device.Card{cardNV1}, []device.Card{cardNV0, cardNV1}, []string{"PATH=/bin"})
				if err != nil {
					b.Fatal(err)
				}
				a.Image = &Container{Rootfs: rootfs, Args: []string{"/bin/job", "report"}, Cwd: "/", Cards: edits}
			}
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
			switch kind {
			case "img":
				image = append(image, took)
			case "host":
				host = append(host, took)
			case "cards":
				cards = append(cards, took)
			}
		}
	}
	mi, mh, mc := median(image), median(host), median(cards)
	b.ReportMetric(float64(mi.Microseconds())/1000, "image-median-ms")
	b.ReportMetric(float64(mh.Microseconds())/1000, "host-median-ms")
	b.ReportMetric(float64(mc.Microseconds())/1000, "cards-median-ms")
	b.ReportMetric(mi.Seconds()/mh.Seconds(), "image/host")
	b.ReportMetric(mc.Seconds()/mi.Seconds(), "cards/image")
	b.Logf("runtime %s: image start median %v, with a card and its driver files %v, host command in the sandbox %v (%d runs each)",
		ex.Capabilities().Runtime, mi, mc, mh, len(image))
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
