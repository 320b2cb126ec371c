package node

import (
	"testing"
	"time"
)

// The driver's lateness becomes the advertiser's load: about 1 for a node
// that keeps taking its ticks 100 ms late, back near 0 once it keeps up.
func TestLagMeterFollowsTheDriversLateness(t *testing.T) {
	var m lagMeter
	if got := m.load(); got != 0 {
		t.Fatalf("a new meter's load %v, want 0", got)
	}
	for range 100 {
		m.observe(100 * time.Millisecond)
	}
	if got := m.load(); got < 0.99 || got > 1.01 {
		t.Errorf("load %v after 100 ticks taken 100 ms late, want 1", got)
	}
	for range 50 {
		m.observe(time.Millisecond)
	}
	if got := m.load(); got > 0.02 {
		t.Errorf("load %v after 50 ticks taken on time, want near 0", got)
	}
}
