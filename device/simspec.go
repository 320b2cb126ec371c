package device

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSimCards bounds the cards of one simulated node: per entry and in total.
const MaxSimCards = 1024

// SimEntry is one "key:count" entry of a simulation spec.
type SimEntry struct {
	Key   string // a catalog model key
	Count int    // 1..MaxSimCards
}

// SimSpec lists the cards of a simulated node, in order.
type SimSpec []SimEntry

// String formats the spec the way ParseSimSpec reads it.
func (s SimSpec) String() string {
	parts := make([]string, len(s))
	for i, e := range s {
		parts[i] = fmt.Sprintf("%s:%d", e.Key, e.Count)
	}
	return strings.Join(parts, ",")
}

// Total returns the number of cards the spec describes.
func (s SimSpec) Total() int {
	n := 0
	for _, e := range s {
		n += e.Count
	}
	return n
}

// SpecError is a simulation spec that does not parse. Token is the offending
// entry as written; Closest holds the nearest catalog keys when the model is
// unknown. Its message is one line.
type SpecError struct {
	Token   string
	Reason  string
	Closest []string
}

// Error returns the one-line message: the entry, the reason, the closest keys.
func (e *SpecError) Error() string {
	msg := fmt.Sprintf("sim spec entry %q: %s", e.Token, e.Reason)
	if strings.TrimSpace(e.Token) == "" {
		msg = "sim spec: " + e.Reason
	}
	if len(e.Closest) > 0 {
		msg += "; closest known: " + strings.Join(e.Closest, ", ")
	}
	return msg
}

// ParseSimSpec reads a simulation spec such as
// "h100-sxm-80g:8,rtx4090-48g:2,mtt-s4000-48g:4": comma-separated entries of
// a catalog model key and a card count from 1 to MaxSimCards. A key without a
// count ("h200-141g") means one card. Keys are matched case-insensitively;
// spaces around entries are ignored. The same key may appear twice (its
// entries stay separate). More than MaxSimCards cards in total is an error.
//
// Every error is a *SpecError naming the offending entry; an unknown key
// lists the closest catalog keys.
func ParseSimSpec(spec string, cat *Catalog) (SimSpec, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, &SpecError{Token: spec, Reason: "empty spec; want key:count entries such as h100-sxm-80g:8"}
	}
	var out SimSpec
	total := 0
	entries := strings.Split(spec, ",")
	for i, raw := range entries {
		tok := strings.TrimSpace(raw)
		if tok == "" {
			return nil, &SpecError{Token: raw, Reason: fmt.Sprintf("entry %d of %d is empty (a stray comma?)", i+1, len(entries))}
		}
		key, countText, hasCount := strings.Cut(tok, ":")
		key = strings.ToLower(strings.TrimSpace(key))
		countText = strings.TrimSpace(countText)
		if key == "" {
			return nil, &SpecError{Token: tok, Reason: "missing model key before ':'"}
		}
		count := 1
		if hasCount {
			n, err := parseCount(countText)
			if err != nil {
				return nil, &SpecError{Token: tok, Reason: err.Error()}
			}
			count = n
		}
		if _, ok := cat.Lookup(key); !ok {
			return nil, &SpecError{Token: tok, Reason: fmt.Sprintf("unknown model %q", key), Closest: cat.Closest(key, 3)}
		}
		total += count
		if total > MaxSimCards {
			return nil, &SpecError{Token: tok, Reason: fmt.Sprintf("more than %d cards in total", MaxSimCards)}
		}
		out = append(out, SimEntry{Key: key, Count: count})
	}
	return out, nil
}

func parseCount(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing count after ':'")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("count %q is not a whole number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxSimCards {
		return 0, fmt.Errorf("count %s is over %d", s, MaxSimCards)
	}
	if n == 0 {
		return 0, fmt.Errorf("count must be at least 1")
	}
	return n, nil
}
