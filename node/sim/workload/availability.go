package workload

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Session is one up-session of a supplier: it is up from Up until Down.
type Session struct {
	Line int // in its file; 0 when generated
	Node string
	Up   time.Duration
	// Down is when it goes; Forever when it stays up.
	Down time.Duration
}

// Forever is the Down of a session that does not end.
const Forever = time.Duration(math.MaxInt64)

// Availability is a node availability trace: up-sessions sorted by node,
// then by time.
type Availability struct {
	Name     string
	Sessions []Session
}

// maxNodeName bounds a node's label.
const maxNodeName = 64

// ParseAvailability reads an availability trace in the CSV format of the
// package doc. A node's sessions must not overlap.
func ParseAvailability(r io.Reader, name string) (Availability, error) {
	t, err := newTable(r, name, "node", "up_s", "down_s")
	if err != nil {
		return Availability{}, err
	}
	av := Availability{Name: name}
	for {
		rec, err := t.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Availability{}, err
		}
		if err := t.row(); err != nil {
			return Availability{}, err
		}
		s := Session{Line: t.line}
		s.Node, _ = t.field(rec, "node")
		if s.Node == "" || len(s.Node) > maxNodeName || strings.ContainsFunc(s.Node, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\uFFFD' }) {
			return Availability{}, t.fail("node", "want a label of 1 to %d printable characters without spaces, got %q", maxNodeName, clip(s.Node))
		}
		up, err := t.seconds(rec, "up_s", false)
		if err != nil {
			return Availability{}, err
		}
		s.Up, s.Down = secs(up), Forever
		if d, _ := t.field(rec, "down_s"); d != "" {
			down, err := t.seconds(rec, "down_s", false)
			if err != nil {
				return Availability{}, err
			}
			if down <= up {
				return Availability{}, t.fail("down_s", "%v is not after up_s %v", down, up)
			}
			s.Down = secs(down)
		}
		av.Sessions = append(av.Sessions, s)
	}
	if len(av.Sessions) == 0 {
		return Availability{}, &ParseError{File: name, Msg: "no sessions after the header"}
	}
	av.sort()
	for i := 1; i < len(av.Sessions); i++ {
		a, b := av.Sessions[i-1], av.Sessions[i]
		if a.Node == b.Node && b.Up < a.Down {
			return Availability{}, &ParseError{File: name, Line: max(a.Line, b.Line), Column: "up_s",
				Msg: fmt.Sprintf("node %s is already up then (lines %d and %d overlap)", a.Node, min(a.Line, b.Line), max(a.Line, b.Line))}
		}
	}
	return av, nil
}

// LoadAvailability reads an availability trace file (ParseAvailability).
func LoadAvailability(path string) (Availability, error) {
	f, err := os.Open(path)
	if err != nil {
		return Availability{}, fmt.Errorf("availability trace: %w", err)
	}
	defer f.Close()
	return ParseAvailability(f, path)
}

func (av *Availability) sort() {
	slices.SortStableFunc(av.Sessions, func(a, b Session) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return cmpDur(a.Up, b.Up)
	})
}

// Nodes lists the nodes of the trace, sorted.
func (av Availability) Nodes() []string {
	var out []string
	for _, s := range av.Sessions {
		if len(out) == 0 || out[len(out)-1] != s.Node {
			out = append(out, s.Node)
		}
	}
	return out
}

// Of returns the sessions of one node.
func (av Availability) Of(node string) []Session {
	var out []Session
	for _, s := range av.Sessions {
		if s.Node == node {
			out = append(out, s)
		}
	}
	return out
}

// Churn describes how a supplier comes and goes: exponential up-sessions
// of mean MTBF separated by exponential outages of mean MTTR.
type Churn struct {
	MTBF, MTTR time.Duration
}

// Sessions draws the up-sessions of a node over [0, horizon) from c: the
// node starts up; a zero MTBF means it never goes. The last session of the
// horizon has Down Forever if it outlives it.
func Sessions(node string, c Churn, horizon time.Duration, r *rand.Rand) []Session {
	if c.MTBF <= 0 {
		return []Session{{Node: node, Up: 0, Down: Forever}}
	}
	var out []Session
	for at := time.Duration(0); at < horizon; {
		up := time.Duration(r.ExpFloat64() * float64(c.MTBF))
		s := Session{Node: node, Up: at, Down: at + max(up, time.Millisecond)}
		if s.Down >= horizon {
			s.Down = Forever
			out = append(out, s)
			break
		}
		out = append(out, s)
		at = s.Down + max(time.Duration(r.ExpFloat64()*float64(c.MTTR)), time.Millisecond)
	}
	return out
}
