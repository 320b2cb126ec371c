package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim/workload"
)

func TestPlanWorkloadIsValidAndDeterministic(t *testing.T) {
	o := PlanOptions{Duration: time.Minute, Cards: 230, Seed: 3}
	wl, err := PlanWorkload(o)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	ids := map[string]bool{}
	for i, pj := range wl.Jobs {
		if err := pj.Spec.Validate(nil); err != nil {
			t.Fatalf("%s: %v", pj.Spec.ID, err)
		}
		if ids[pj.Spec.ID] {
			t.Fatalf("%s twice", pj.Spec.ID)
		}
		ids[pj.Spec.ID] = true
		if i > 0 && pj.At < wl.Jobs[i-1].At || pj.At >= o.Duration {
			t.Fatalf("job %s at %v out of order or after the end", pj.Spec.ID, pj.At)
		}
		kinds[pj.Kind]++
		switch pj.Kind {
		case KindPreemptibleBatch:
			if pj.Spec.Kind != market.KindPreemptible {
				t.Errorf("%s: batch work must be preemptible", pj.Spec.ID)
			}
		case KindFineTune:
			if pj.Spec.Cards != 8 || pj.Spec.LayoutMode() != market.LayoutOneNode {
				t.Errorf("%s: a fine-tune takes 8 cards of one node", pj.Spec.ID)
			}
		case KindGang:
			if pj.Spec.Cards%8 != 0 || pj.Spec.Layout.PerNode != 8 {
				t.Errorf("%s: a gang takes 8 cards per node", pj.Spec.ID)
			}
		}
	}
	if kinds[KindTraining] != 1 || kinds[KindInference] == 0 || kinds[KindPreemptibleBatch] == 0 || kinds[KindFineTune] == 0 {
		t.Errorf("kinds %v", kinds)
	}
	tr := wl.Jobs[slices.IndexFunc(wl.Jobs, func(p PlannedJob) bool { return p.Kind == KindTraining })]
	if tr.Spec.Elastic == nil || tr.Spec.Elastic.Max != MaxTrainingCards || tr.Spec.ID != wl.Training || wl.ScaleUpAt >= wl.ScaleDownAt {
		t.Errorf("training job %+v, scale %v → %v", tr.Spec, wl.ScaleUpAt, wl.ScaleDownAt)
	}
	again, _ := PlanWorkload(o)
	if len(again.Jobs) != len(wl.Jobs) || again.Jobs[5].Spec.ID != wl.Jobs[5].Spec.ID || again.Jobs[5].At != wl.Jobs[5].At {
		t.Error("the same options made another plan")
	}
}

func TestPlanWorkloadFromATrace(t *testing.T) {
	tr := workload.Trace{Name: "t", Jobs: []workload.Job{
		{Submit: 0, GPUs: 1, Duration: time.Hour},
		{Submit: 60 * time.Second, GPUs: 6, Duration: 10 * time.Second},
		{Submit: 120 * time.Second, GPUs: 20, Duration: 2 * time.Hour},
		{Submit: time.Hour, GPUs: 1, Duration: time.Minute},
	}}
	wl, err := PlanWorkload(PlanOptions{Duration: 30 * time.Second, Cards: 100, TimeScale: 60, Trace: &tr, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, pj := range wl.Jobs {
		if pj.Kind == KindTraining {
			continue
		}
		got = append(got, pj.Kind)
		if d := pj.Spec.ExpectedDuration.Std(); d < demoMinDuration || d > 30*time.Second {
			t.Errorf("%s: duration %v not clipped to the run", pj.Spec.ID, d)
		}
	}
	// The job an hour in arrives after the 30 s run (60×: one minute).
	if len(got) != 3 || got[1] != KindFineTune || got[2] != KindGang || wl.Jobs[len(wl.Jobs)-1].At > 30*time.Second {
		t.Errorf("kinds %v", got)
	}
}

// A trace whose first hours hold one job (as the embedded Philly samples
// do) is replayed where it is busy, unless the start is asked for; the
// plan says which part of the trace it covers.
func TestPlanWorkloadReplaysTheBusiestStretch(t *testing.T) {
	tr := workload.Trace{Name: "quiet-start", Jobs: []workload.Job{{Submit: 0, GPUs: 1, Duration: time.Hour}}}
	for i := range 100 {
		tr.Jobs = append(tr.Jobs, workload.Job{Submit: 10*time.Hour + time.Duration(i)*20*time.Second, GPUs: 1, Duration: time.Hour})
	}
	tr.Jobs = append(tr.Jobs, workload.Job{Submit: 50 * time.Hour, GPUs: 1, Duration: time.Hour})
	jobs := func(wl WorkloadPlan) int {
		n := 0
		for _, pj := range wl.Jobs {
			if pj.Kind != KindTraining {
				n++
			}
		}
		return n
	}
	opts := PlanOptions{Duration: time.Minute, Cards: 100, TimeScale: 60, Trace: &tr, Seed: 1}
	wl, err := PlanWorkload(opts)
	if err != nil {
		t.Fatal(err)
	}
	// A minute at 60× covers an hour of the trace: 100 jobs 20 s apart
	// fill 33 minutes of it, from 10 h.
	if jobs(wl) != 100 || !strings.Contains(wl.Source, "quiet-start: replayed 1.0 h of it from 10.0 h in, of 50.0 h over which its jobs arrive (100 of 102 jobs, 98.0%), 60× faster") {
		t.Errorf("busiest: %d jobs, %q", jobs(wl), wl.Source)
	}
	opts.TraceFrom = TraceFromStart
	if wl, err = PlanWorkload(opts); err != nil || jobs(wl) != 1 || !strings.Contains(wl.Source, "replayed 1.0 h of it from 0s in") {
		t.Errorf("from the start: %d jobs, %q, %v", jobs(wl), wl.Source, err)
	}
	opts.TraceFrom, opts.TimeScale = 10*time.Hour+20*time.Minute, 120
	if wl, err = PlanWorkload(opts); err != nil || jobs(wl) != 40 || !strings.Contains(wl.Source, "120× faster") {
		t.Errorf("from 10h20m at 120×: %d jobs, %q, %v", jobs(wl), wl.Source, err)
	}
	opts.TraceFrom = 51 * time.Hour
	if _, err = PlanWorkload(opts); err == nil || !strings.Contains(err.Error(), "the trace's last job arrives at 50.0 h") {
		t.Errorf("from past the end: %v", err)
	}
}

func TestBusiest(t *testing.T) {
	at := func(hs ...float64) workload.Trace {
		var tr workload.Trace
		for _, h := range hs {
			tr.Jobs = append(tr.Jobs, workload.Job{Submit: time.Duration(h * float64(time.Hour))})
		}
		return tr
	}
	for _, tc := range []struct {
		tr   workload.Trace
		want time.Duration
	}{
		{at(), 0},
		{at(5), 5 * time.Hour},
		{at(0, 3, 3.5, 3.9, 8), 3 * time.Hour},
		{at(1, 1.5, 6, 6.5), time.Hour}, // a tie: the earliest
	} {
		if got := busiest(tc.tr, time.Hour); got != tc.want {
			t.Errorf("busiest(%v) = %v, want %v", tc.tr.Jobs, got, tc.want)
		}
	}
}
