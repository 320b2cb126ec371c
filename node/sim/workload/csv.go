package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Limits on what a trace may hold, so that a wrong file fails instead of
// filling memory.
const (
	// MaxRows is the most data rows a trace may have.
	MaxRows = 1_000_000
	// MaxSeconds is the largest time a trace may name: ten years.
	MaxSeconds = 10 * 365 * 24 * 3600
	// maxField is the longest field kept (a model name, a status).
	maxField = 128
)

// table reads a CSV with a header, one row at a time, and knows where each
// row came from.
type table struct {
	file string
	r    *csv.Reader
	cols map[string]int // header name → index
	line int            // of the row last read
	rows int
}

// newTable reads the header and checks that it names every required
// column once.
func newTable(rd io.Reader, file string, required ...string) (*table, error) {
	r := csv.NewReader(rd)
	r.Comment = '#'
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	r.ReuseRecord = true
	t := &table{file: file, r: r, cols: map[string]int{}}
	head, err := t.next()
	if err == io.EOF {
		return nil, &ParseError{File: file, Msg: fmt.Sprintf("empty: want a header naming %s", strings.Join(required, ", "))}
	}
	if err != nil {
		return nil, err
	}
	for i, name := range head {
		name = strings.ToLower(strings.TrimSpace(name))
		if _, dup := t.cols[name]; dup && name != "" {
			return nil, &ParseError{File: file, Line: t.line, Column: name, Msg: "named twice in the header"}
		}
		t.cols[name] = i
	}
	for _, name := range required {
		if _, ok := t.cols[name]; !ok {
			return nil, &ParseError{File: file, Line: t.line, Msg: fmt.Sprintf("the header %q lacks column %s (want %s)",
				strings.Join(head, ","), name, strings.Join(required, ", "))}
		}
	}
	return t, nil
}

// next returns the next row (valid until the following call), io.EOF at
// the end, or a *ParseError.
func (t *table) next() ([]string, error) {
	rec, err := t.r.Read()
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return nil, &ParseError{File: t.file, Line: pe.Line, Msg: pe.Err.Error()}
		}
		return nil, fmt.Errorf("%s: %w", t.file, err)
	}
	t.line, _ = t.r.FieldPos(0)
	return rec, nil
}

// row counts a data row against MaxRows.
func (t *table) row() error {
	t.rows++
	if t.rows > MaxRows {
		return &ParseError{File: t.file, Line: t.line, Msg: fmt.Sprintf("more than %d rows", MaxRows)}
	}
	return nil
}

// field returns a column of rec, "" when the row is too short for it.
func (t *table) field(rec []string, name string) (string, bool) {
	i, ok := t.cols[name]
	if !ok || i >= len(rec) {
		return "", false
	}
	return strings.TrimSpace(rec[i]), true
}

func (t *table) fail(col, format string, args ...any) error {
	return &ParseError{File: t.file, Line: t.line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

// seconds reads a column of seconds, 0 to MaxSeconds; fractions allowed.
func (t *table) seconds(rec []string, name string, positive bool) (float64, error) {
	s, ok := t.field(rec, name)
	if !ok || s == "" {
		return 0, t.fail(name, "missing: want a number of seconds")
	}
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		return 0, t.fail(name, "want a number of seconds, got %q", clip(s))
	case v < 0 || (positive && v == 0):
		return 0, t.fail(name, "want more than 0 seconds, got %q", clip(s))
	case v > MaxSeconds:
		return 0, t.fail(name, "want at most %d seconds (ten years), got %q", MaxSeconds, clip(s))
	}
	return v, nil
}

// text reads an optional free-text column: at most maxField bytes of
// printable text; "" and "unknown" read as "".
func (t *table) text(rec []string, name string) (string, error) {
	s, _ := t.field(rec, name)
	if len(s) > maxField {
		return "", t.fail(name, "longer than %d bytes", maxField)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return "", t.fail(name, "want printable text, got %q", clip(s))
		}
	}
	if strings.EqualFold(s, "unknown") {
		return "", nil
	}
	return s, nil
}

// clip shortens a bad value for an error message.
func clip(s string) string {
	if len(s) <= 32 {
		return s
	}
	for i := 32; i > 0; i-- {
		if i < len(s) && (s[i]&0xC0) != 0x80 {
			return s[:i] + "…"
		}
	}
	return s[:32] + "…"
}
