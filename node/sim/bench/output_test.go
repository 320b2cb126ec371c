package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleResults() *Results {
	yes, no := true, false
	return &Results{
		Started: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), Took: 12,
		Machine:   Machine{CPUs: 2, GOMAXPROCS: 2, MemoryMiB: 24000, AvailMiB: 20000, LoadAvg: "1.0 1.0 1.0", OS: "linux", Arch: "amd64", Go: "go1.25"},
		Config:    Config{Scenarios: []string{"placement"}, Nodes: 100, CardsPerNode: 4, VirtualNodes: 1000, GossipNodes: 1000, QualityNodes: 200, QualityJobs: 150, Samples: 1, GossipWindow: 20, Seed: 1},
		Scenarios: []string{"placement"},
		Rows: []Row{
			{Scenario: "placement", Case: "1000 cards", Clock: ClockReal, Metric: "median", Value: 812.5, Unit: "ms", N: 3, Target: "< 1000 ms", Met: &yes},
			{Scenario: "placement", Case: "a|b, \"quoted\"", Clock: ClockVirtualWAN, Metric: "median round trips", Value: 2, Unit: "RTT", N: 3, Target: "≤ 3 RTT", Met: &no, Note: "9 messages"},
			{Scenario: "quality", Case: "mesh / central", Metric: "throughput", Value: 99.5, Unit: "%"},
		},
		Plots: []Plot{{File: "placement.svg", Title: "Placement <latency> & size", XLabel: "cards", YLabel: "ms", LogX: true, LogY: true,
			Lines: []Line{{Name: "real", Points: []Point{{1, 20}, {8, 25}, {64, 60}, {1000, 800}}}, {Name: "virtual", Points: []Point{{1, 2}, {1000, 2}}}}}},
		Notes: []string{"the mesh was small"},
	}
}

// results.json reads back as written.
func TestResultsJSONRoundTrip(t *testing.T) {
	r := sampleResults()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip changed the results:\n got %+v\nwant %+v", got, r)
	}
	if _, err := ReadJSON(strings.NewReader(`{"rows": [{"scenario": "x", "bogus": 1}]}`)); err == nil {
		t.Error("an unknown field was accepted")
	}
}

// The CSV has a header and one record per row, quoted where needed.
func TestResultsCSV(t *testing.T) {
	r := sampleResults()
	var b bytes.Buffer
	if err := r.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(r.Rows) || !reflect.DeepEqual(recs[0], csvHeader) {
		t.Fatalf("records %q", recs)
	}
	if want := []string{"placement", "a|b, \"quoted\"", ClockVirtualWAN, "median round trips", "2", "RTT", "3", "≤ 3 RTT", "false", "9 messages"}; !reflect.DeepEqual(recs[2], want) {
		t.Errorf("record %q, want %q", recs[2], want)
	}
	if recs[3][8] != "" {
		t.Errorf("a row without a target has met %q", recs[3][8])
	}
}

// The table has a row per figure, the targets marked, pipes escaped.
func TestResultsMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := sampleResults().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| scenario | case | clock | metric | value | n | target |",
		"| placement | 1000 cards | real | median | 812 ms | 3 | < 1000 ms ✓ |",
		`| placement | a\|b, "quoted" | virtual 40ms | median round trips | 2 RTT | 3 | ≤ 3 RTT ✗ |`,
		"| quality | mesh / central | – | throughput | 99.5 % |  |  |",
		"- the mesh was small",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{0, "ms", "0 ms"}, {2, "RTT", "2 RTT"}, {2.5, "RTT", "2.50 RTT"}, {16.83, "ms", "16.8 ms"}, {812.5, "ms", "812 ms"},
		{0.389, "MiB", "0.389 MiB"}, {100.94, "%", "100.9 %"}, {65.3, "×", "65.3 ×"}, {math.NaN(), "%", "NaN %"}, {1234, "", "1234"},
	} {
		if got := FormatValue(c.v, c.unit); got != c.want {
			t.Errorf("FormatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

// checkSVG parses an SVG document to its end and counts its elements.
func checkSVG(t *testing.T, r io.Reader) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(r)
	count := map[string]int{}
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v", el.Name)
			}
			depth++
			count[el.Name.Local]++
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 || count["svg"] != 1 {
		t.Fatalf("unbalanced document: depth %d, %d svg elements", depth, count["svg"])
	}
	return count
}

// The plots are well-formed SVG with a marker per point and a polyline per
// line of more than one point; text is escaped.
func TestWriteSVG(t *testing.T) {
	for _, p := range []Plot{
		sampleResults().Plots[0],
		{File: "failover.svg", Title: "CDF", XLabel: "ms", YLabel: "fraction", Lines: []Line{{Name: "crash", Points: []Point{{1000, 0.5}, {1200, 1}}}, {Name: "one", Points: []Point{{5000, 1}}}}},
		{File: "flat.svg", Title: "flat", Lines: []Line{{Name: "same", Points: []Point{{3, 3}, {3, 3}}}}},
	} {
		var b bytes.Buffer
		if err := WriteSVG(&b, p); err != nil {
			t.Fatal(err)
		}
		doc := b.String()
		count := checkSVG(t, &b)
		points, lines := 0, 0
		for _, l := range p.Lines {
			points += len(l.Points)
			if len(l.Points) > 1 {
				lines++
			}
		}
		if count["circle"] != points || count["polyline"] != lines {
			t.Errorf("%s: %d circles, %d polylines; want %d and %d", p.File, count["circle"], count["polyline"], points, lines)
		}
		if p.File == "placement.svg" && !strings.Contains(doc, "Placement &lt;latency&gt; &amp; size") {
			t.Error("the title is not escaped")
		}
	}
	// A log axis leaves out points ≤ 0; a plot with nothing to draw is an error.
	var b bytes.Buffer
	err := WriteSVG(&b, Plot{Title: "empty", LogY: true, Lines: []Line{{Name: "zero", Points: []Point{{1, 0}}}}})
	if !errors.Is(err, ErrEmptyPlot) {
		t.Errorf("empty plot: %v", err)
	}
}

// WriteDir writes the JSON, the CSV and every plot, and refuses a plot
// file name that would leave the directory.
func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	r := sampleResults()
	paths, err := r.WriteDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, ResultsJSON), filepath.Join(dir, ResultsCSV), filepath.Join(dir, "placement.svg")}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("wrote %v, want %v", paths, want)
	}
	f, err := os.Open(want[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, err := ReadJSON(f); err != nil || !reflect.DeepEqual(got, r) {
		t.Errorf("results.json reads back as %+v, %v", got, err)
	}
	r.Plots[0].File = "../escape.svg"
	if _, err := r.WriteDir(dir); err == nil {
		t.Error("a plot file outside the directory was accepted")
	}
}
