//go:build unix

package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// BenchmarkResumeFromCheckpoint: a job writes a checkpoint of
// GPUMESH_BENCH_CKPT_SIZE (default 2 GiB of incompressible bytes) and asks
// for it to be shipped (.ready); once the job's record holds it, the
// runner is killed (kill -9 of the node and its job) and the time until
// the share's next attempt runs with the checkpoint restored is measured
// (issue 15's target: under 10 s on loopback). It also reports the peak
// RSS of the node processes while they ship and restore (target: under
// 200 MiB).
//
//	go test -run '^$' -bench ResumeFromCheckpoint -benchtime 1x -timeout 30m ./e2e/
func BenchmarkResumeFromCheckpoint(b *testing.B) {
	size := int64(2 << 30)
	if v := os.Getenv("GPUMESH_BENCH_CKPT_SIZE"); v != "" {
		n, err := strconv.ParseInt(strings.TrimSuffix(v, "MiB"), 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("GPUMESH_BENCH_CKPT_SIZE=%q: want a number of MiB, such as 512MiB", v)
		}
		size = n << 20
	}
	src := filepath.Join(b.TempDir(), "state.bin")
	writeRandom(b, src, size)
	// Four nodes: the job runs on one, two others hold its checkpoint,
	// and any of the three may run it next.
	c := newCluster(b, nil, chaosSeed(b), []string{"a100-80g:1", "a100-80g:1", "a100-80g:1", "a100-80g:1"}, nil)
	script := checkTwice + `
d=$GPUMESH_CHECKPOINT_DIR
if [ -s $d/state.bin ]; then echo $$ > $m.resumed; else cp ` + src + ` $HOME/state.bin.tmp && mv $HOME/state.bin.tmp $d/state.bin && touch $d/.ready; fi
echo $$ > $m.start
exec sleep 100000`
	var peak peakRSS
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		spec := market.JobSpec{AllowSimulated: true, Cards: 1, MaxPriceCNY: 50, Command: []string{"sh", "-c", script}, Env: map[string]string{envMarks: c.marks}}
		j := c.submit(c.any(), spec)
		watch := peak.watch(c)
		rec := c.waitRecord(j.id, 10*time.Minute, "a checkpoint of "+strconv.FormatInt(size>>20, 10)+" MiB in the record", func(r market.JobRecord) bool {
			for _, cp := range r.Checkpoints {
				if cp.Bytes >= size {
					return true
				}
			}
			return false
		})
		cp := rec.Checkpoints[len(rec.Checkpoints)-1]
		b.Logf("checkpoint: %d MiB, %d MiB new, on %d nodes", cp.Bytes>>20, cp.NewBytes>>20, len(cp.Holders))
		old := onlyLive(b, rec)
		b.StartTimer()
		killed := time.Now()
		c.crash(c.byID(old.Node), "runner of "+j.id)
		var resumed time.Time
		eventually(b, 2*time.Minute, "the next attempt runs with the checkpoint restored", func() bool {
			ents, _ := os.ReadDir(c.marks)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), j.id+".") && strings.HasSuffix(e.Name(), ".resumed") {
					if info, err := e.Info(); err == nil {
						resumed = info.ModTime()
						return true
					}
				}
			}
			return false
		})
		b.StopTimer()
		watch()
		took := resumed.Sub(killed)
		b.ReportMetric(took.Seconds(), "s-resume")
		b.Logf("killed runner → resumed elsewhere from %d MiB: %v (peak RSS of a node while shipping and restoring: %d MiB)", size>>20, took.Round(time.Millisecond), peak.max()>>20)
		b.ReportMetric(float64(peak.max()>>20), "MiB-peak-rss")
		c.cancel(j)
		c.restartAll()
	}
	c.finish(2 * time.Minute)
}

// writeRandom writes n pseudo-random (incompressible, never repeating)
// bytes to path.
func writeRandom(tb testing.TB, path string, n int64) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.NewChaCha8([32]byte{7})
	buf := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(buf)) {
		_, _ = r.Read(buf)
		if _, err := w.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// peakRSS samples the node processes' resident memory.
type peakRSS struct {
	mu   sync.Mutex
	peak int64
}

// watch samples every 100 ms until the returned stop is called.
func (p *peakRSS) watch(c *cluster) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			for _, n := range c.live() {
				if n.cmd == nil || n.cmd.Process == nil {
					continue
				}
				if rss := rssOf(n.cmd.Process.Pid); rss > 0 {
					p.mu.Lock()
					p.peak = max(p.peak, rss)
					p.mu.Unlock()
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (p *peakRSS) max() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

// rssOf reads a process's resident set size in bytes from /proc (0 if
// unreadable).
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
