package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shortID shortens a peer ID the way libp2p's logs do ("12*abcdef": the
// first two and the last six characters), so the CLI and the node's logs
// name a peer alike.
func shortID(id string) string {
	if len(id) <= 10 {
		return id
	}
	return id[:2] + "*" + id[len(id)-6:]
}

// oneLine makes text fit on one line of a table or a message, and keeps a
// peer-supplied string from sending the terminal control sequences.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		if r < ' ' || r >= 0x7f && r <= 0x9f {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// cell is a table cell: one line, "-" when empty.
func cell(s string) string {
	if s = oneLine(s); s == "" {
		return "-"
	}
	return s
}

// age formats how long ago t was, in at most two units: "45s", "12m",
// "3h5m", "2d4h"; "-" for the zero time.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h := int(d.Hours())
		return trimZero(fmt.Sprintf("%dh%dm", h, int(d.Minutes())-60*h))
	default:
		days := int(d.Hours()) / 24
		return trimZero(fmt.Sprintf("%dd%dh", days, int(d.Hours())-24*days))
	}
}

// trimZero drops a trailing zero unit: "3h0m" → "3h".
func trimZero(s string) string {
	if strings.HasSuffix(s, "h0m") || strings.HasSuffix(s, "d0h") {
		return s[:len(s)-2]
	}
	return s
}

// cny formats an amount of money.
func cny(v float64) string { return fmt.Sprintf("%.2f", v) }

// exitCode formats an optional exit code.
func exitCode(c *int) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprint(*c)
}
