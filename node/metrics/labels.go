package metrics

import (
	"strings"
	"unicode/utf8"
)

// Label values come from peers' ads and from this node's state. A label set
// that grows without bound (a peer advertising a new model key every second)
// would grow every scrape and Prometheus's memory with it, so every label
// value that is not from a fixed list goes through a bound.

// OtherLabel is the label value that stands for every value beyond a bound
// or outside a fixed list.
const OtherLabel = "other"

// maxLabelLen caps the length of a label value, in bytes.
const maxLabelLen = 64

// cleanLabel makes s a short, valid UTF-8 label value.
func cleanLabel(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	if len(s) > maxLabelLen {
		cut := maxLabelLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// oneOf returns s if it is in allowed, else OtherLabel.
func oneOf(s string, allowed ...string) string {
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	return OtherLabel
}

// bounded admits at most max distinct label values per scrape, first come
// first served; later values map to OtherLabel. Callers offer the values in
// order of importance (largest first) so that the values folded are the
// smallest.
type bounded struct {
	max  int
	seen map[string]bool
}

func newBounded(max int) *bounded { return &bounded{max: max, seen: map[string]bool{}} }

func (b *bounded) value(s string) string {
	s = cleanLabel(s)
	if b.seen[s] {
		return s
	}
	if len(b.seen) >= b.max-1 && s != OtherLabel { // keep one slot for OtherLabel
		return OtherLabel
	}
	b.seen[s] = true
	return s
}
