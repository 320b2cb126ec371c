package workload

import (
	"errors"
	"fmt"
)

// ErrBadTrace is wrapped by every error about a trace's content.
var ErrBadTrace = errors.New("bad trace")

// ParseError says where a trace is wrong: the file (its name as given), the
// 1-based line, and the column when one is at fault.
type ParseError struct {
	File   string
	Line   int    // 0: the file as a whole
	Column string // "" when no one column is at fault
	Msg    string
}

func (e *ParseError) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Column != "" {
		return fmt.Sprintf("%s: column %s: %s", where, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s: %s", where, e.Msg)
}

// Unwrap makes errors.Is(err, ErrBadTrace) hold.
func (e *ParseError) Unwrap() error { return ErrBadTrace }
