package sim

import (
	"math"
	"runtime"
	"time"
)

// How long an in-process mesh of full nodes takes to start and form, as
// measured on linux/amd64 with 2 CPUs (gpumesh bench --scenario placement,
// load average 3-4): 50 nodes in 4.9 s, 100 in 14.1 s. The time grows as
// about nodes^1.5 (each join syncs with a membership that grows) and
// shrinks with the CPUs (every node shares them).
const (
	startRefNodes = 50
	startRef      = 4900 * time.Millisecond
	startExponent = 1.52
	startRefCPUs  = 2
)

// EstimateStart is about how long n full nodes take to start and form in
// one process on this machine's CPUs.
func EstimateStart(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	f := math.Pow(float64(n)/startRefNodes, startExponent) * startRefCPUs / float64(max(runtime.NumCPU(), 1))
	return time.Duration(float64(startRef) * f)
}

// MaxNodesWithin is the most full nodes that start and form within d here
// (EstimateStart).
func MaxNodesWithin(d time.Duration) int {
	lo, hi := 0, 1<<20
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if EstimateStart(mid) <= d {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
