package workload

import (
	"embed"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"
)

// MaxGPUs is the most cards one job of a trace may ask for (the market's
// limit, market.MaxCards).
const MaxGPUs = 4096

// Job is one job of a trace.
type Job struct {
	// Line is the job's line in its file; 0 for a generated job.
	Line int
	// Submit is when the job arrives, from the start of the trace.
	Submit time.Duration
	// GPUs is the number of cards it wants, 1 to MaxGPUs.
	GPUs int
	// Duration is how long it runs once placed.
	Duration time.Duration
	// Model is the card model the trace names; "" when unknown.
	Model string
	// Status is how the job ended in the trace (completed, failed,
	// cancelled...); "" when unknown.
	Status string
}

// Trace is a job trace: its jobs in order of arrival.
type Trace struct {
	// Name says where the trace came from (a file name, "philly-ee9e8c",
	// "synthetic seed 1").
	Name string
	Jobs []Job
}

// ParseJobs reads a job trace in the CSV format of the package doc. name
// is used in errors. The jobs come out sorted by arrival (stable, so equal
// arrivals keep their order in the file).
func ParseJobs(r io.Reader, name string) (Trace, error) {
	t, err := newTable(r, name, "submit_s", "gpus", "duration_s")
	if err != nil {
		return Trace{}, err
	}
	tr := Trace{Name: name}
	for {
		rec, err := t.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Trace{}, err
		}
		if err := t.row(); err != nil {
			return Trace{}, err
		}
		j, err := t.job(rec)
		if err != nil {
			return Trace{}, err
		}
		tr.Jobs = append(tr.Jobs, j)
	}
	if len(tr.Jobs) == 0 {
		return Trace{}, &ParseError{File: name, Msg: "no jobs after the header"}
	}
	slices.SortStableFunc(tr.Jobs, func(a, b Job) int { return cmpDur(a.Submit, b.Submit) })
	return tr, nil
}

func (t *table) job(rec []string) (Job, error) {
	j := Job{Line: t.line}
	submit, err := t.seconds(rec, "submit_s", false)
	if err != nil {
		return j, err
	}
	dur, err := t.seconds(rec, "duration_s", true)
	if err != nil {
		return j, err
	}
	s, _ := t.field(rec, "gpus")
	g, err := strconv.Atoi(s)
	if err != nil || g < 1 || g > MaxGPUs {
		return j, t.fail("gpus", "want a whole number of cards from 1 to %d, got %q", MaxGPUs, clip(s))
	}
	if j.Model, err = t.text(rec, "gpu_model"); err != nil {
		return j, err
	}
	if j.Status, err = t.text(rec, "status"); err != nil {
		return j, err
	}
	j.Submit, j.Duration, j.GPUs = secs(submit), max(secs(dur), time.Millisecond), g
	return j, nil
}

// LoadJobs reads a job trace file (ParseJobs).
func LoadJobs(path string) (Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return Trace{}, fmt.Errorf("job trace: %w", err)
	}
	defer f.Close()
	return ParseJobs(f, path)
}

//go:embed traces/*.csv
var embedded embed.FS

// PhillyClusters are the virtual clusters of the embedded Philly samples.
var PhillyClusters = []string{"ee9e8c", "11cb48"}

// Philly returns an embedded sample of Microsoft's Philly trace (2,000
// jobs of one virtual cluster, CC BY 4.0; see traces/README.md): cluster
// is one of PhillyClusters.
func Philly(cluster string) (Trace, error) {
	if !slices.Contains(PhillyClusters, cluster) {
		return Trace{}, fmt.Errorf("%w: no embedded Philly cluster %q (have %v)", ErrBadTrace, cluster, PhillyClusters)
	}
	name := "philly_vc_" + cluster + "_jobs.csv"
	f, err := embedded.Open("traces/" + name)
	if err != nil {
		return Trace{}, err
	}
	defer f.Close()
	tr, err := ParseJobs(f, name)
	tr.Name = "philly-" + cluster
	return tr, err
}

// Window returns the jobs that arrive in [from, to), with arrivals moved so
// that from is 0.
func (tr Trace) Window(from, to time.Duration) Trace {
	out := Trace{Name: tr.Name}
	for _, j := range tr.Jobs {
		if j.Submit >= from && j.Submit < to {
			j.Submit -= from
			out.Jobs = append(out.Jobs, j)
		}
	}
	return out
}

// Scale multiplies every arrival time and duration by f (0.01: a hundred
// times faster); durations stay at least a millisecond.
func (tr Trace) Scale(f float64) Trace {
	out := Trace{Name: tr.Name, Jobs: slices.Clone(tr.Jobs)}
	for i := range out.Jobs {
		j := &out.Jobs[i]
		j.Submit = time.Duration(float64(j.Submit) * f)
		j.Duration = max(time.Duration(float64(j.Duration)*f), time.Millisecond)
	}
	return out
}

// Span is the arrival time of the last job.
func (tr Trace) Span() time.Duration {
	if len(tr.Jobs) == 0 {
		return 0
	}
	return tr.Jobs[len(tr.Jobs)-1].Submit
}

// CardSeconds is the sum over jobs of cards × duration: the work the trace
// asks of a mesh.
func (tr Trace) CardSeconds() float64 {
	s := 0.0
	for _, j := range tr.Jobs {
		s += float64(j.GPUs) * j.Duration.Seconds()
	}
	return s
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
