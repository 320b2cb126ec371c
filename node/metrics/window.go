package metrics

import (
	"slices"
	"time"
)

// Window holds the durations observed over a sliding span of time (the
// placement latencies of the last five minutes, the reroutes of the last
// hour) and answers counts and quantiles over it. Time is passed in; a Window
// never reads the clock. It is not safe for concurrent use.
//
// It keeps the most recent Capacity observations. Quantiles are taken over
// those still inside the span; the count stays exact beyond Capacity to within
// one 64th of the span, from coarse per-slot tallies of the observations the
// ring let go.
type Window struct {
	span    time.Duration
	samples []sample // ring, oldest at head once full
	head    int
	full    bool
	// evicted tallies observations pushed out of the ring, by slot of
	// span/64.
	evicted    [windowSlots]slot
	slotLength time.Duration
}

const windowSlots = 64

type sample struct {
	at time.Time
	d  time.Duration
}

type slot struct {
	index int64 // at / slotLength
	n     int
}

// NewWindow returns a Window over span keeping up to capacity observations.
// It panics if span or capacity is not positive: both are constants of the
// caller.
func NewWindow(span time.Duration, capacity int) *Window {
	if span <= 0 || capacity <= 0 {
		panic("metrics: NewWindow needs a positive span and capacity")
	}
	return &Window{span: span, samples: make([]sample, 0, capacity), slotLength: max(span/windowSlots, 1)}
}

// Span is the length of the window.
func (w *Window) Span() time.Duration { return w.span }

// Observe records a duration d that ended at at. Negative durations count as
// zero.
func (w *Window) Observe(at time.Time, d time.Duration) {
	d = max(d, 0)
	if len(w.samples) < cap(w.samples) {
		w.samples = append(w.samples, sample{at, d})
		return
	}
	old := w.samples[w.head]
	w.samples[w.head] = sample{at, d}
	w.head = (w.head + 1) % len(w.samples)
	w.full = true
	idx := old.at.UnixNano() / int64(w.slotLength)
	s := &w.evicted[uint64(idx)%windowSlots]
	if s.index != idx {
		*s = slot{index: idx}
	}
	s.n++
}

// inSpan reports whether at lies in (now−span, now].
func (w *Window) inSpan(now, at time.Time) bool {
	return at.After(now.Add(-w.span)) && !at.After(now)
}

// Count is the number of observations in (now−span, now].
func (w *Window) Count(now time.Time) int {
	n := 0
	for _, s := range w.samples {
		if w.inSpan(now, s.at) {
			n++
		}
	}
	if w.full {
		first := now.Add(-w.span).UnixNano() / int64(w.slotLength)
		last := now.UnixNano() / int64(w.slotLength)
		for _, s := range w.evicted {
			if s.n > 0 && s.index > first && s.index <= last {
				n += s.n
			}
		}
	}
	return n
}

// Quantiles returns the nearest-rank quantiles qs (each in [0, 1]) of the
// retained observations in (now−span, now], and how many there were. With
// none, every quantile is 0.
func (w *Window) Quantiles(now time.Time, qs ...float64) ([]time.Duration, int) {
	ds := make([]time.Duration, 0, len(w.samples))
	for _, s := range w.samples {
		if w.inSpan(now, s.at) {
			ds = append(ds, s.d)
		}
	}
	out := make([]time.Duration, len(qs))
	if len(ds) == 0 {
		return out, 0
	}
	slices.Sort(ds)
	for i, q := range qs {
		q = min(max(q, 0), 1)
		// Nearest rank: the smallest value with at least q of the
		// observations at or below it.
		rank := int(q*float64(len(ds)) + 0.999999999)
		out[i] = ds[min(max(rank, 1), len(ds))-1]
	}
	return out, len(ds)
}

// Rate turns samples of a monotonically increasing counter (messages, bytes)
// into a per-second rate over a sliding span. A counter that goes down is
// taken as restarted from zero. Time is passed in. It is not safe for
// concurrent use.
type Rate struct {
	span   time.Duration
	points []point // ring of the most recent samples
	head   int
}

type point struct {
	at    time.Time
	total uint64
}

// rateCapacity bounds the samples a Rate keeps; at one sample a second it
// covers two minutes.
const rateCapacity = 128

// NewRate returns a Rate over span. It panics if span is not positive.
func NewRate(span time.Duration) *Rate {
	if span <= 0 {
		panic("metrics: NewRate needs a positive span")
	}
	return &Rate{span: span, points: make([]point, 0, rateCapacity)}
}

// Add records the counter's total at at. Samples must come in time order;
// one older than the last is dropped.
func (r *Rate) Add(at time.Time, total uint64) {
	if n := len(r.points); n > 0 && at.Before(r.last().at) {
		return
	}
	if len(r.points) < cap(r.points) {
		r.points = append(r.points, point{at, total})
		return
	}
	r.points[r.head] = point{at, total}
	r.head = (r.head + 1) % len(r.points)
}

func (r *Rate) last() point {
	return r.points[(r.head+len(r.points)-1)%len(r.points)]
}

// PerSecond is the counter's increase per second between the oldest and the
// newest samples in [now−span, now]. It is 0 with fewer than two such samples
// (the node just started, or stopped sampling).
func (r *Rate) PerSecond(now time.Time) float64 {
	inc, dt := r.increase(now)
	if dt <= 0 {
		return 0
	}
	return float64(inc) / dt.Seconds()
}

// Increase is the counter's increase between the oldest and the newest
// samples in [now−span, now].
func (r *Rate) Increase(now time.Time) uint64 {
	inc, _ := r.increase(now)
	return inc
}

func (r *Rate) increase(now time.Time) (uint64, time.Duration) {
	from := now.Add(-r.span)
	var (
		prev     point
		have     bool
		first    time.Time
		increase uint64
	)
	for i := range r.points {
		p := r.points[(r.head+i)%len(r.points)]
		if p.at.Before(from) || p.at.After(now) {
			continue
		}
		if !have {
			prev, first, have = p, p.at, true
			continue
		}
		if p.total >= prev.total {
			increase += p.total - prev.total
		} else {
			increase += p.total // restarted
		}
		prev = p
	}
	if !have {
		return 0, 0
	}
	return increase, prev.at.Sub(first)
}
