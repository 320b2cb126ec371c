package workload

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseJobsReadsColumnsByName(t *testing.T) {
	in := "# a comment\n" +
		"gpus,extra,submit_s,duration_s,status\n" +
		"8,x,10.5,3600,completed\n" +
		"1,y,0,60,unknown\n" +
		"# another comment\n" +
		"2,z,10.5,1.25,\n"
	tr, err := ParseJobs(strings.NewReader(in), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{Line: 4, Submit: 0, GPUs: 1, Duration: time.Minute},
		{Line: 3, Submit: 10500 * time.Millisecond, GPUs: 8, Duration: time.Hour, Status: "completed"},
		{Line: 6, Submit: 10500 * time.Millisecond, GPUs: 2, Duration: 1250 * time.Millisecond},
	}
	if !slices.Equal(tr.Jobs, want) {
		t.Fatalf("jobs:\n got %+v\nwant %+v", tr.Jobs, want)
	}
}

func TestParseJobsNamesTheBadLineAndColumn(t *testing.T) {
	head := "submit_s,gpus,duration_s,gpu_model,status\n"
	for _, tc := range []struct {
		name, in string
		line     int
		col, msg string
	}{
		{"empty", "", 0, "", "empty: want a header"},
		{"no header column", "submit_s,gpus\n1,2\n", 1, "", "lacks column duration_s"},
		{"header twice", "submit_s,gpus,gpus,duration_s\n", 1, "gpus", "named twice"},
		{"no rows", head, 0, "", "no jobs"},
		{"gpus zero", head + "0,1,60,,\n5,0,60,,\n", 3, "gpus", `from 1 to 4096, got "0"`},
		{"gpus text", head + "0,eight,60,,\n", 2, "gpus", `got "eight"`},
		{"gpus huge", head + "0,5000,60,,\n", 2, "gpus", `got "5000"`},
		{"negative submit", head + "-1,1,60,,\n", 2, "submit_s", "more than 0"},
		{"nan submit", head + "NaN,1,60,,\n", 2, "submit_s", "want a number of seconds"},
		{"zero duration", head + "0,1,0,,\n", 2, "duration_s", "more than 0"},
		{"missing duration", head + "0,1\n", 2, "duration_s", "missing"},
		{"ten years", head + "0,1,1e12,,\n", 2, "duration_s", "ten years"},
		{"control char", head + "0,1,5,a\x01b,\n", 2, "gpu_model", "printable"},
		{"bad quote", head + "0,1,5,\"a,\n", 2, "", "quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJobs(strings.NewReader(tc.in), "jobs.csv")
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrBadTrace) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			if pe.Line != tc.line || pe.Column != tc.col || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "jobs.csv") {
				t.Fatalf("err = %q (line %d, column %q); want line %d, column %q, containing %q", err, pe.Line, pe.Column, tc.line, tc.col, tc.msg)
			}
		})
	}
}

func TestLoadJobsReportsAnUnreadableFile(t *testing.T) {
	_, err := LoadJobs(filepath.Join(t.TempDir(), "missing.csv"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.csv") {
		t.Fatalf("err = %v", err)
	}
}

func TestEmbeddedPhillySamplesMatchTheirPublishedFigures(t *testing.T) {
	for _, c := range PhillyClusters {
		tr, err := Philly(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Jobs) != 2000 || tr.Jobs[0].Submit != 0 {
			t.Fatalf("%s: %d jobs, first at %v", c, len(tr.Jobs), tr.Jobs[0].Submit)
		}
		for _, j := range tr.Jobs {
			if j.Duration < 1200*time.Second || j.Model != "" || j.Status != "" {
				t.Fatalf("%s line %d: %+v: the sample holds jobs of at least 1200 s with unknown model and status", c, j.Line, j)
			}
		}
	}
	if _, err := Philly("nope"); !errors.Is(err, ErrBadTrace) {
		t.Fatalf("unknown cluster: err = %v", err)
	}
}

func TestWindowAndScale(t *testing.T) {
	tr := Trace{Jobs: []Job{{Submit: 0, GPUs: 1, Duration: time.Hour}, {Submit: time.Hour, GPUs: 2, Duration: 2 * time.Hour}, {Submit: 3 * time.Hour, GPUs: 4, Duration: time.Hour}}}
	w := tr.Window(30*time.Minute, 3*time.Hour)
	if len(w.Jobs) != 1 || w.Jobs[0].Submit != 30*time.Minute || w.Jobs[0].GPUs != 2 {
		t.Fatalf("window: %+v", w.Jobs)
	}
	s := tr.Scale(1.0 / 60)
	if s.Jobs[1].Submit != time.Minute || s.Jobs[1].Duration != 2*time.Minute || tr.Jobs[1].Submit != time.Hour {
		t.Fatalf("scale: %+v (original %+v)", s.Jobs[1], tr.Jobs[1])
	}
	if s.Span() != 3*time.Minute || tr.CardSeconds() != 3600+2*7200+4*3600 {
		t.Fatalf("span %v, card-seconds %v", s.Span(), tr.CardSeconds())
	}
}

func TestGenerateFollowsThePublishedDistributions(t *testing.T) {
	tr := Generate(Synthetic{Jobs: 20000, Rate: 2, Seed: 1})
	if len(tr.Jobs) != 20000 {
		t.Fatalf("%d jobs", len(tr.Jobs))
	}
	counts := map[string]int{}
	var durs []time.Duration
	for i, j := range tr.Jobs {
		if i > 0 && j.Submit < tr.Jobs[i-1].Submit {
			t.Fatal("arrivals out of order")
		}
		switch {
		case j.GPUs == 1:
			counts["1"]++
		case j.GPUs <= 4:
			counts["2-4"]++
		case j.GPUs <= 8:
			counts["5-8"]++
		default:
			counts["9-64"]++
		}
		durs = append(durs, j.Duration)
	}
	for bucket, want := range map[string]float64{"1": 0.687, "2-4": 0.164, "5-8": 0.126, "9-64": 0.0235} {
		got := float64(counts[bucket]) / 20000
		if math.Abs(got-want) > 0.015 {
			t.Errorf("share of %s-card jobs %.3f, want %.3f", bucket, got, want)
		}
	}
	slices.Sort(durs)
	if med := durs[len(durs)/2]; med < 800*time.Second || med > 950*time.Second {
		t.Errorf("median duration %v, want about 874 s", med)
	}
	if rate := float64(len(tr.Jobs)) / tr.Span().Seconds(); rate < 1.9 || rate > 2.1 {
		t.Errorf("arrival rate %.2f/s, want about 2", rate)
	}
	again := Generate(Synthetic{Jobs: 20000, Rate: 2, Seed: 1})
	if !slices.Equal(tr.Jobs, again.Jobs) {
		t.Error("the same seed drew another trace")
	}
}

func TestSessionsHaveTheirMeanUptime(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	c := Churn{MTBF: time.Hour, MTTR: 10 * time.Minute}
	var up time.Duration
	n := 0
	for range 200 {
		ss := Sessions("n", c, 48*time.Hour, r)
		for i, s := range ss {
			if s.Down <= s.Up || (i > 0 && s.Up <= ss[i-1].Down) {
				t.Fatalf("sessions overlap or are empty: %+v", ss)
			}
			if s.Down != Forever {
				up += s.Down - s.Up
				n++
			}
		}
	}
	if mean := up / time.Duration(n); mean < 54*time.Minute || mean > 66*time.Minute {
		t.Errorf("mean up-session %v over %d sessions, want about 1h", mean, n)
	}
	if ss := Sessions("idc", Churn{}, time.Hour, r); len(ss) != 1 || ss[0].Down != Forever {
		t.Errorf("a node without churn: %+v", ss)
	}
}
