package market

import (
	"strings"
	"unicode/utf8"
)

// MaxEndReasonBytes bounds the reason an attempt's end carries
// (ExecutionExited.Reason, AttemptEnded.Reason): a longer one is cut.
const MaxEndReasonBytes = 512

// oneLineCut makes s one line (runs of white space, newlines included,
// become one space; invalid UTF-8 becomes U+FFFD) of at most n bytes,
// cut at a character boundary with "…" appended where it was cut.
func oneLineCut(s string, n int) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if len(s) <= n {
		return s
	}
	cut := max(n-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
