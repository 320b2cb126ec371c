package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Synthetic describes a job trace drawn from published distributions.
// Zero fields take the defaults stated on each.
type Synthetic struct {
	// Jobs is how many jobs to draw. Default 1000.
	Jobs int
	// Rate is the mean arrival rate, jobs per second of trace time
	// (Poisson arrivals). Default 1.
	Rate float64
	// MedianDuration is the median run time; durations are log-normal
	// around it. Default 874 s, Philly's median (ATC'19).
	MedianDuration time.Duration
	// Sigma is the log-normal's shape (the standard deviation of ln
	// duration). Default 1.5.
	Sigma float64
	// MinDuration and MaxDuration clip the durations. Defaults 10 s and 7 days.
	MinDuration, MaxDuration time.Duration
	// MaxGPUs caps the cards per job. Default 64, the largest bucket of
	// the Philly sample.
	MaxGPUs int
	// Seed seeds every draw.
	Seed uint64
}

// GPUBuckets is the distribution of cards per job in the Philly sample
// (shared/data/traces/README.md): 68.7% take 1 card, 16.4% 2–4, 12.6% 5–8,
// 2.35% 9–64 (the remainder is rounding). Within a bucket the counts are the
// sample's most frequent ones: 2 or 4; 8; 16, 32 or 64.
var GPUBuckets = []struct {
	Share  float64
	Counts []int
}{
	{0.687, []int{1}},
	{0.164, []int{2, 4, 4, 4, 4, 4, 4}},
	{0.126, []int{8}},
	{0.0235, []int{16, 16, 16, 16, 32, 64}},
}

// Generate draws a job trace from s.
func Generate(s Synthetic) Trace {
	s = s.withDefaults()
	r := rand.New(rand.NewPCG(s.Seed, 0x5ca1ab1e))
	tr := Trace{Name: fmt.Sprintf("synthetic seed %d", s.Seed), Jobs: make([]Job, 0, s.Jobs)}
	at := 0.0
	for range s.Jobs {
		at += r.ExpFloat64() / s.Rate
		d := float64(s.MedianDuration) * math.Exp(s.Sigma*r.NormFloat64())
		d = min(max(d, float64(s.MinDuration)), float64(s.MaxDuration))
		tr.Jobs = append(tr.Jobs, Job{
			Submit:   time.Duration(at * float64(time.Second)),
			GPUs:     min(drawGPUs(r), s.MaxGPUs),
			Duration: time.Duration(d),
		})
	}
	return tr
}

func drawGPUs(r *rand.Rand) int {
	u := r.Float64()
	for _, b := range GPUBuckets {
		if u < b.Share {
			return b.Counts[r.IntN(len(b.Counts))]
		}
		u -= b.Share
	}
	return 1
}

func (s Synthetic) withDefaults() Synthetic {
	if s.Jobs <= 0 {
		s.Jobs = 1000
	}
	if !(s.Rate > 0) {
		s.Rate = 1
	}
	if s.MedianDuration <= 0 {
		s.MedianDuration = 874 * time.Second
	}
	if !(s.Sigma > 0) {
		s.Sigma = 1.5
	}
	if s.MinDuration <= 0 {
		s.MinDuration = 10 * time.Second
	}
	if s.MaxDuration <= 0 {
		s.MaxDuration = 7 * 24 * time.Hour
	}
	if s.MaxGPUs <= 0 {
		s.MaxGPUs = 64
	}
	s.MaxGPUs = min(s.MaxGPUs, MaxGPUs)
	return s
}
