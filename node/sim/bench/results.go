package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Clocks a figure is measured in.
const (
	// ClockReal is wall-clock time on this machine: every simulated node
	// shares its CPUs, so the figure measures the machine as much as the
	// protocol.
	ClockReal = "real"
	// ClockVirtualLAN and ClockVirtualWAN are protocol time under the
	// market's virtual-time harness (markettest) with 0.5 ms and 40 ms
	// one-way link latency: independent of the machine's load.
	ClockVirtualLAN = "virtual 0.5ms"
	ClockVirtualWAN = "virtual 40ms"
)

// Row is one figure of one scenario.
type Row struct {
	Scenario string `json:"scenario"`
	// Case says what was measured ("1000 cards", "crash", "mesh/central").
	Case string `json:"case"`
	// Clock is ClockReal, ClockVirtualLAN or ClockVirtualWAN, or "" for a
	// figure that is not a time (a count, a ratio, bytes).
	Clock  string  `json:"clock,omitempty"`
	Metric string  `json:"metric"` // "median", "p99", "jobs/s", ...
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"` // "ms", "jobs/s", "B/s", "%", "RTT", ...
	// N is how many samples the figure summarizes (0 when it is not a
	// summary).
	N int `json:"n,omitempty"`
	// Target is the goal the figure is held to, as text ("< 1000 ms");
	// empty when there is none. Met reports whether it was reached (nil
	// when there is no target).
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Point is one point of a plot line.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Line is one named series of a plot.
type Line struct {
	Name   string  `json:"name"`
	Points []Point `json:"points"`
}

// Plot is a figure drawn as an SVG file (WriteSVG).
type Plot struct {
	// File is the plot's file name in the output directory ("placement.svg").
	File   string `json:"file"`
	Title  string `json:"title"`
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`
	// LogX and LogY draw that axis on a log10 scale (values must be > 0).
	LogX  bool   `json:"log_x,omitempty"`
	LogY  bool   `json:"log_y,omitempty"`
	Lines []Line `json:"lines"`
}

// Machine describes where a run took place.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	MemoryMiB  uint64 `json:"memory_mib,omitempty"`    // total; 0 where unknown
	AvailMiB   uint64 `json:"available_mib,omitempty"` // available when the run began
	LoadAvg    string `json:"load_avg,omitempty"`      // when the run began
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Go         string `json:"go"`
}

// Results are what a run measured. Their JSON form is results.json.
type Results struct {
	Started time.Time `json:"started"`
	Took    float64   `json:"took_s"`
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	// Setup says what ran where Config does not (the processes scenario:
	// "5 node processes × 64 cards, 32 submitters, 300 jobs").
	Setup     string   `json:"setup,omitempty"`
	Scenarios []string `json:"scenarios"` // those that ran to the end without failing
	Rows      []Row    `json:"rows"`
	Plots     []Plot   `json:"plots,omitempty"`
	// Notes say what a reader must know to read the rows (a mesh smaller
	// than asked, a scenario cut short).
	Notes []string `json:"notes,omitempty"`
	// Interrupted: the run was stopped (Ctrl-C) before every scenario ended.
	Interrupted bool `json:"interrupted,omitempty"`

	// stopped is closed once every node of the run has stopped (Stopped).
	stopped chan struct{}
}

// Stopped is closed once every node of the run has stopped. Run returns
// with it closed, except after an interrupt: then it returns what was
// measured at once, and the nodes stop (as after a power cut, not
// leaving one by one) in the background.
func (r *Results) Stopped() <-chan struct{} {
	if r.stopped == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return r.stopped
}

// WriteJSON writes r as indented JSON.
func (r *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads results written by WriteJSON.
func ReadJSON(rd io.Reader) (*Results, error) {
	var r Results
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: results: %w", err)
	}
	return &r, nil
}

// csvHeader is the header of WriteCSV.
var csvHeader = []string{"scenario", "case", "clock", "metric", "value", "unit", "n", "target", "met", "note"}

// WriteCSV writes one line per row, with a header.
func (r *Results) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, row := range r.Rows {
		met := ""
		if row.Met != nil {
			met = strconv.FormatBool(*row.Met)
		}
		rec := []string{row.Scenario, row.Case, row.Clock, row.Metric, strconv.FormatFloat(row.Value, 'g', -1, 64), row.Unit,
			strconv.Itoa(row.N), row.Target, met, row.Note}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteMarkdown writes the rows as a markdown table, then the notes.
func (r *Results) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| scenario | case | clock | metric | value | n | target |\n")
	b.WriteString("|---|---|---|---|--:|--:|---|\n")
	for _, row := range r.Rows {
		target := row.Target
		if row.Met != nil {
			if *row.Met {
				target += " ✓"
			} else {
				target += " ✗"
			}
		}
		n := ""
		if row.N > 0 {
			n = strconv.Itoa(row.N)
		}
		clock := row.Clock
		if clock == "" {
			clock = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", row.Scenario, mdEscape(row.Case), clock, row.Metric,
			FormatValue(row.Value, row.Unit), n, mdEscape(target))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// FormatValue renders a figure with its unit, to about three significant
// digits.
func FormatValue(v float64, unit string) string {
	var s string
	switch a := math.Abs(v); {
	case math.IsNaN(v) || math.IsInf(v, 0):
		s = strconv.FormatFloat(v, 'f', -1, 64)
	case v == math.Trunc(v) && a < 1e15:
		s = strconv.FormatFloat(v, 'f', 0, 64)
	case unit == "%" || unit == "×":
		s = strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 100:
		s = strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	default:
		s = strconv.FormatFloat(v, 'g', 3, 64)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}
