package sim

import (
	"runtime"
	"testing"
	"time"
)

func TestEstimateStartFollowsTheMeasurements(t *testing.T) {
	scale := 2 / float64(runtime.NumCPU())
	for _, tc := range []struct {
		n    int
		want time.Duration // on 2 CPUs
	}{{50, 4900 * time.Millisecond}, {100, 14 * time.Second}, {1000, 7*time.Minute + 50*time.Second}} {
		got := EstimateStart(tc.n)
		want := time.Duration(float64(tc.want) * scale)
		if got < want*9/10 || got > want*11/10 {
			t.Errorf("EstimateStart(%d) = %v, want about %v", tc.n, got, want)
		}
	}
	if EstimateStart(0) != 0 {
		t.Error("no nodes take time")
	}
	d := 3 * time.Minute
	n := MaxNodesWithin(d)
	if EstimateStart(n) > d || EstimateStart(n+1) <= d {
		t.Errorf("MaxNodesWithin(%v) = %d: %v, %v", d, n, EstimateStart(n), EstimateStart(n+1))
	}
}
