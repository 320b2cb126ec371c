package sim

import (
	"errors"
	"strings"
	"testing"
)

// A demo is refused with its estimate and what is available, and the
// most it suggests fits.
func TestCheckDemoMemory(t *testing.T) {
	if err := checkDemoMemory(1_000_000, 0); err != nil {
		t.Errorf("unknown memory refused: %v", err)
	}
	if err := checkDemoMemory(50, 16_000); err != nil {
		t.Errorf("50 nodes in 16 GB refused: %v", err)
	}
	// 300 suppliers and 8 coordinators: 100 + 308 × 10 = 3180 MiB, more
	// than 80% of 2000.
	err := checkDemoMemory(300, 2000)
	if !errors.Is(err, ErrTooBig) {
		t.Fatalf("300 nodes in 2000 MiB: %v", err)
	}
	for _, want := range []string{"300 suppliers and 8 coordinators", "about 3180 MiB", "2000 MiB is available", "at most about 142 here"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if checkDemoMemory(142, 2000) != nil || checkDemoMemory(143, 2000) == nil {
		t.Error("the most it suggests does not fit, or one more does")
	}
	if got := EstimateDemoMiB(50); got != BaseMiB+(50+5)*FullNodeMiB {
		t.Errorf("estimate for 50: %d MiB", got)
	}
}
