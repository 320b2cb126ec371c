package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Peak is the most memory the process used during a watch.
type Peak struct {
	// Heap is the largest Go heap in use seen (HeapInuse, sampled every
	// few milliseconds).
	Heap uint64
	// RSS is the largest resident set of the process during the watch
	// (Linux's VmHWM, reset when the watch starts); 0 where unknown.
	RSS uint64
}

// Watch starts watching the process's memory; the function it returns
// stops the watch and returns the peak. The process's whole memory is
// watched: in a benchmark that runs holders and a fetcher in one process,
// the figure covers all of them.
func Watch() func() Peak {
	resetRSS()
	var mu sync.Mutex
	var peak Peak
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak.Heap = max(peak.Heap, ms.HeapInuse)
		mu.Unlock()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() Peak {
		close(stop)
		<-done
		sample()
		mu.Lock()
		defer mu.Unlock()
		peak.RSS = peakRSS()
		return peak
	}
}

// resetRSS resets the kernel's peak resident set of the process (Linux:
// writing 5 to /proc/self/clear_refs).
func resetRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS reads the peak resident set since the reset, or 0.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
