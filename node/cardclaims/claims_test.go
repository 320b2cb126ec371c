package cardclaims

import (
	"slices"
	"strings"
	"testing"
)

func TestTwoPeersClaimingOneCardAreBothHeldBackUntilOneIsGone(t *testing.T) {
	x := New()
	a, b, c := "12D3KooWAAAAAAAAAAaaaaaa", "12D3KooWBBBBBBBBBBbbbbbb", "12D3KooWCCCCCCCCCCcccccc"
	if got := x.Set(a, []string{"uuid:gpu-1", "serial:s1"}); len(got) != 0 {
		t.Fatalf("a alone changed %v", got)
	}
	x.Set(c, []string{"uuid:gpu-9"})
	if got := x.Set(b, []string{"uuid:gpu-1", "uuid:gpu-2"}); !slices.Equal(got, []string{a}) {
		t.Fatalf("b's claim touched %v, want a", got)
	}
	for _, p := range []string{a, b} {
		why := x.Conflict(p)
		if !strings.Contains(why, "uuid:gpu-1") || !strings.Contains(why, "held back") {
			t.Errorf("Conflict(%s) = %q, want the card named", p, why)
		}
	}
	if !strings.Contains(x.Conflict(a), "12*bbbbbb") || !strings.Contains(x.Conflict(b), "12*aaaaaa") {
		t.Errorf("each should name the other: %q / %q", x.Conflict(a), x.Conflict(b))
	}
	if why := x.Conflict(c); why != "" {
		t.Errorf("c claims nothing of theirs, held back: %q", why)
	}
	if got := x.Remove(b); !slices.Equal(got, []string{a}) {
		t.Fatalf("b's removal touched %v, want a", got)
	}
	if why := x.Conflict(a); why != "" {
		t.Errorf("a is alone again, still held back: %q", why)
	}
	// A serial in common is as good as a UUID.
	x.Set(b, []string{"serial:s1"})
	if x.Conflict(a) == "" || x.Conflict(b) == "" {
		t.Error("a serial claimed twice holds nobody back")
	}
	// A peer that stops claiming the card frees both.
	x.Set(b, nil)
	if x.Conflict(a) != "" || x.Len() != 3 {
		t.Errorf("after b's claims went: conflict %q, %d keys", x.Conflict(a), x.Len())
	}
}
