package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// The kinds of jobs in a demo workload.
const (
	KindInference        = "inference"   // 1 card, on demand, short
	KindPreemptibleBatch = "preemptible" // 1–4 cards, preemptible: fills idle cards cheaply
	KindFineTune         = "fine-tune"   // 8 cards on one node
	KindGang             = "gang"        // 16–64 cards, 8 per node (torchrun across nodes)
	KindTraining         = "training"    // the elastic gang: 8 cards, then every free card of its class
)

// PlannedJob is one submission of a demo workload.
type PlannedJob struct {
	At   time.Duration // after the workload starts
	Kind string
	Spec market.JobSpec
}

// WorkloadPlan is what a demo submits and when, and when it scales the
// training job.
type WorkloadPlan struct {
	Jobs []PlannedJob
	// Training is the elastic training job (also in Jobs); ScaleUpAt and
	// ScaleDownAt are when it grows to every free card of its class and
	// back to its first size.
	Training               string
	ScaleUpAt, ScaleDownAt time.Duration
	// Source names the trace the jobs were drawn from.
	Source string
}

// PlanOptions shape a demo workload.
type PlanOptions struct {
	// Duration is how long jobs arrive. Required.
	Duration time.Duration
	// Cards is the mesh's card count: arrivals are paced to offer Load of
	// it. Required.
	Cards int
	// Load is the share of the cards the arrivals keep busy on average
	// (besides the training job). Default 0.5.
	Load float64
	// TimeScale divides a trace's arrival times and durations (its
	// replay speed). Default 60.
	TimeScale float64
	// TraceFrom is where in the trace (its own time) the replay starts;
	// TraceFromBusiest (the default, 0 being the trace's start only when
	// asked with TraceFromStart) starts it at the stretch, as long as the
	// replay covers, that holds the most jobs: a trace whose first hours
	// are idle is replayed where it is busy.
	TraceFrom time.Duration
	// Trace, when set, supplies arrivals, card counts and durations (scaled
	// by TimeScale and clipped to the run); otherwise they are drawn from
	// the published distributions (workload.Generate).
	Trace *workload.Trace
	Seed  uint64
}

// Demo job durations, in demo time: log-normal around a median of 8 s,
// clipped to 3–30 s (a 1 h job of life at 60× would be a minute).
const (
	demoMedianDuration = 8 * time.Second
	demoSigma          = 0.6
	demoMinDuration    = 3 * time.Second
	demoMaxDuration    = 30 * time.Second
)

// PlanWorkload draws a demo workload. Each job's kind follows its card
// count: one card is inference (three in four) or preemptible batch, 2–4
// cards preemptible batch, 5–8 a fine-tune of 8 cards on one node, more a
// gang of 8 per node. The elastic training job arrives at 10% of the run,
// grows at 35% and shrinks back at 75%. The same options give the same
// plan.
func PlanWorkload(o PlanOptions) (WorkloadPlan, error) {
	if o.Duration <= 0 || o.Cards <= 0 {
		return WorkloadPlan{}, fmt.Errorf("sim: a workload needs a duration and cards")
	}
	if !(o.Load > 0) {
		o.Load = 0.5
	}
	if !(o.TimeScale > 0) {
		o.TimeScale = 60
	}
	r := rand.New(rand.NewPCG(o.Seed, 0xdeadbeef))
	var src workload.Trace
	replayed := ""
	if o.Trace != nil {
		covers := time.Duration(float64(o.Duration) * o.TimeScale) // of the trace's own time
		from := o.TraceFrom
		switch {
		case from == TraceFromBusiest:
			from = busiest(*o.Trace, covers)
		case from == TraceFromStart:
			from = 0
		case from < 0:
			return WorkloadPlan{}, fmt.Errorf("sim: trace from %v: want 0 or more", from)
		case from > o.Trace.Span():
			return WorkloadPlan{}, fmt.Errorf("sim: trace from %v: the trace's last job arrives at %v", lifeTime(from), lifeTime(o.Trace.Span()))
		}
		window := o.Trace.Window(from, from+covers)
		src = window.Scale(1 / o.TimeScale)
		for i := range src.Jobs {
			src.Jobs[i].Duration = min(max(src.Jobs[i].Duration, demoMinDuration), o.Duration)
		}
		share := 0.0
		if n := len(o.Trace.Jobs); n > 0 {
			share = 100 * float64(len(window.Jobs)) / float64(n)
		}
		replayed = fmt.Sprintf("%s: replayed %s of it from %s in, of %s over which its jobs arrive (%d of %d jobs, %.1f%%), %g× faster",
			o.Trace.Name, lifeTime(covers), lifeTime(from), lifeTime(o.Trace.Span()), len(window.Jobs), len(o.Trace.Jobs), share, o.TimeScale)
	} else {
		// Mean cards per job ~2.9 and mean duration ~9.6 s: pace arrivals
		// so that they offer Load of the mesh.
		meanCards, meanDur := 2.93, demoMedianDuration.Seconds()*1.2
		rate := o.Load * float64(o.Cards) / (meanCards * meanDur)
		n := int(rate*o.Duration.Seconds()) + 1
		src = workload.Generate(workload.Synthetic{Jobs: n, Rate: rate, MedianDuration: demoMedianDuration, Sigma: demoSigma,
			MinDuration: demoMinDuration, MaxDuration: demoMaxDuration, Seed: o.Seed})
		src = src.Window(0, o.Duration)
	}
	plan := WorkloadPlan{Source: src.Name}
	if replayed != "" {
		plan.Source = replayed
	}
	counts := map[string]int{}
	for _, j := range src.Jobs {
		kind := kindOf(j.GPUs, r)
		counts[kind]++
		id := fmt.Sprintf("%s-%04d", shortKind(kind), counts[kind])
		plan.Jobs = append(plan.Jobs, PlannedJob{At: j.Submit, Kind: kind, Spec: specOf(id, kind, j.GPUs, j.Duration)})
	}
	// The elastic training job runs past the end of the demo.
	plan.Training = "train-0001"
	plan.ScaleUpAt, plan.ScaleDownAt = o.Duration*35/100, o.Duration*75/100
	train := specOf(plan.Training, KindTraining, 8, o.Duration+time.Minute)
	plan.Jobs = append(plan.Jobs, PlannedJob{At: o.Duration / 10, Kind: KindTraining, Spec: train})
	slices.SortStableFunc(plan.Jobs, func(a, b PlannedJob) int { return int(a.At - b.At) })
	return plan, nil
}

func kindOf(gpus int, r *rand.Rand) string {
	switch {
	case gpus == 1 && r.Float64() < 0.75:
		return KindInference
	case gpus <= 4:
		return KindPreemptibleBatch
	case gpus <= 8:
		return KindFineTune
	}
	return KindGang
}

func shortKind(kind string) string {
	switch kind {
	case KindInference:
		return "infer"
	case KindPreemptibleBatch:
		return "batch"
	case KindFineTune:
		return "tune"
	case KindGang:
		return "gang"
	}
	return "train"
}

// MaxTrainingCards is the most cards the demo's training job grows to.
const MaxTrainingCards = 1000

// specOf builds the spec of a demo job: a process that sleeps for d.
func specOf(id, kind string, gpus int, d time.Duration) market.JobSpec {
	s := market.JobSpec{
		ID:               id,
		Name:             kind,
		Cards:            gpus,
		AllowSimulated:   true, // the demo's suppliers are simulated
		ExpectedDuration: market.Duration(d),
		Command:          []string{"sleep", fmt.Sprintf("%.1f", d.Seconds())},
	}
	switch kind {
	case KindInference:
		// A 24 GiB card or better, up to an A100's list price.
		s.MinMemoryMiB, s.MaxPriceCNY = 24<<10, 12
	case KindPreemptibleBatch:
		s.Kind, s.MaxPriceCNY = market.KindPreemptible, 6
	case KindFineTune:
		s.Cards, s.Layout = 8, market.Layout{Mode: market.LayoutOneNode}
		s.MinMemoryMiB, s.MaxPriceCNY = 48<<10, 40
	case KindGang:
		s.Cards = (gpus + 7) / 8 * 8
		s.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: 8}
		s.MinMemoryMiB, s.MaxPriceCNY = 48<<10, 40
		// The cluster's nodes run jobs as their own processes (isolation
		// process), which gives a gang no private network: it meets on
		// the host's.
		s.Network = market.NetworkHost
	case KindTraining:
		s.Network = market.NetworkHost // as KindGang
		s.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: 8}
		s.Elastic = &market.Elastic{Min: 8, Max: MaxTrainingCards}
		s.MinMemoryMiB, s.MaxPriceCNY = TrainingClass.MinMemoryMiB, 40
	}
	return s
}

// Where a trace's replay starts (PlanOptions.TraceFrom), besides a time.
const (
	// TraceFromBusiest starts at the busiest stretch (the default: 0).
	TraceFromBusiest time.Duration = 0
	// TraceFromStart starts at the trace's first moment.
	TraceFromStart time.Duration = -1
)

// busiest returns the arrival time that starts the window of length d
// holding the most jobs of tr (the earliest such), 0 for an empty trace.
// The jobs are in order of arrival.
func busiest(tr workload.Trace, d time.Duration) time.Duration {
	best, bestN, j := time.Duration(0), -1, 0
	for i, a := range tr.Jobs {
		for j < len(tr.Jobs) && tr.Jobs[j].Submit < a.Submit+d {
			j++
		}
		if n := j - i; n > bestN {
			best, bestN = a.Submit, n
		}
	}
	return best
}

// lifeTime prints a span of a trace's own time: "45m", "36.0 h",
// "12.3 days".
func lifeTime(d time.Duration) string {
	switch {
	case d >= 72*time.Hour:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
	return d.Round(time.Second).String()
}
