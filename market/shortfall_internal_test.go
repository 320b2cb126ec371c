package market

import (
	"strings"
	"testing"
)

// The causes of a shortfall are named most common first, two at most, the
// rest counted; a long or multi-line cause is cut to one bounded line.
func TestShortfallCausesMostCommonFirst(t *testing.T) {
	got := topCauses(map[string]int{"b price": 3, "a policy": 3, "draining": 1, "no free cards": 2})
	want := "a policy (3), b price (3), 3 for other reasons (see --explain)"
	if got != want {
		t.Errorf("topCauses = %q, want %q", got, want)
	}
	if got := topCauses(map[string]int{"only": 2}); got != "only (2)" {
		t.Errorf("one cause: %q", got)
	}
	long := causeText("line one\nline two " + strings.Repeat("é", 300))
	if strings.Contains(long, "\n") || len(long) > shortfallCauseLen || !strings.HasPrefix(long, "line one line two é") || !strings.HasSuffix(long, "…") {
		t.Errorf("causeText cut to %d bytes: %q", len(long), long)
	}
	if !strings.HasSuffix(strings.TrimSuffix(long, "…"), "é") {
		t.Errorf("cut inside a character: %q", long)
	}
}
