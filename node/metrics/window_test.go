package metrics

import (
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestWindowQuantilesAndCount(t *testing.T) {
	w := NewWindow(5*time.Minute, 100)
	// 1..10 s, one a second, ending at t0+10s.
	for i := 1; i <= 10; i++ {
		w.Observe(t0.Add(time.Duration(i)*time.Second), time.Duration(i)*time.Second)
	}
	tests := []struct {
		name      string
		now       time.Time
		wantCount int
		wantP50   time.Duration
		wantP99   time.Duration
	}{
		{"all in", t0.Add(10 * time.Second), 10, 5 * time.Second, 10 * time.Second},
		{"before any", t0, 0, 0, 0},
		{"half observed so far", t0.Add(4 * time.Second), 4, 2 * time.Second, 4 * time.Second},
		// span is (now-5m, now]: at t0+5m+3s the first three are out.
		{"oldest three expired", t0.Add(5*time.Minute + 3*time.Second), 7, 7 * time.Second, 10 * time.Second},
		{"all expired", t0.Add(5*time.Minute + 10*time.Second), 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, n := w.Quantiles(tc.now, 0.5, 0.99)
			if n != tc.wantCount || q[0] != tc.wantP50 || q[1] != tc.wantP99 {
				t.Errorf("Quantiles = %v (n=%d), want p50 %v p99 %v (n=%d)", q, n, tc.wantP50, tc.wantP99, tc.wantCount)
			}
			if c := w.Count(tc.now); c != tc.wantCount {
				t.Errorf("Count = %d, want %d", c, tc.wantCount)
			}
		})
	}
}

func TestWindowNegativeDurationIsZero(t *testing.T) {
	w := NewWindow(time.Minute, 4)
	w.Observe(t0, -time.Second)
	if q, n := w.Quantiles(t0, 1); n != 1 || q[0] != 0 {
		t.Fatalf("Quantiles = %v, %d; want [0], 1", q, n)
	}
}

func TestWindowCountBeyondCapacity(t *testing.T) {
	// An hour window keeping 100 samples, fed 3000 reroutes over 50
	// minutes: the count must stay close to exact, quantiles come from the
	// last 100.
	span := time.Hour
	w := NewWindow(span, 100)
	for i := range 3000 {
		at := t0.Add(time.Duration(i) * time.Second)
		w.Observe(at, time.Duration(i)*time.Millisecond)
	}
	now := t0.Add(3000 * time.Second)
	if c := w.Count(now); c != 3000 {
		t.Errorf("Count over the whole history = %d, want 3000", c)
	}
	// 70 minutes on, the span is (600 s, 4200 s]: the observations at
	// 601..2999 s are in it. The count may be short by at most one slot
	// (span/64 = 56.25 s → 57 observations).
	later := t0.Add(70 * time.Minute)
	want := 2999 - 600
	if c := w.Count(later); c > want || c < want-57 {
		t.Errorf("Count 70 min on = %d, want %d (−57 at most)", c, want)
	}
	q, n := w.Quantiles(now, 0.5)
	if n != 100 || q[0] != 2949*time.Millisecond {
		t.Errorf("Quantiles over the retained = %v (n=%d), want 2.949s over 100", q, n)
	}
}

// TestWindowMatchesNaive compares Window with sorting every observation in
// the span, while the observations fit its capacity.
func TestWindowMatchesNaive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		span := time.Duration(rapid.IntRange(1, 600).Draw(t, "span_s")) * time.Second
		w := NewWindow(span, 256)
		type obs struct {
			at time.Time
			d  time.Duration
		}
		var all []obs
		n := rapid.IntRange(0, 256).Draw(t, "n")
		for i := range n {
			// Mostly in order, sometimes late.
			at := t0.Add(time.Duration(rapid.IntRange(0, 1200).Draw(t, "at_s"+string(rune('a'+i%26)))) * time.Second)
			d := time.Duration(rapid.IntRange(0, 60000).Draw(t, "d_ms")) * time.Millisecond
			w.Observe(at, d)
			all = append(all, obs{at, d})
		}
		now := t0.Add(time.Duration(rapid.IntRange(0, 1800).Draw(t, "now_s")) * time.Second)
		q := rapid.Float64Range(0, 1).Draw(t, "q")
		var in []time.Duration
		for _, o := range all {
			if o.at.After(now.Add(-span)) && !o.at.After(now) {
				in = append(in, o.d)
			}
		}
		slices.Sort(in)
		var want time.Duration
		if len(in) > 0 {
			rank := int(math.Ceil(q * float64(len(in))))
			want = in[max(rank, 1)-1]
		}
		got, cnt := w.Quantiles(now, q)
		if cnt != len(in) || got[0] != want {
			t.Fatalf("Quantiles(%v) = %v (n=%d), naive %v (n=%d)", q, got[0], cnt, want, len(in))
		}
		if c := w.Count(now); c != len(in) {
			t.Fatalf("Count = %d, naive %d", c, len(in))
		}
	})
}

func TestRate(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name    string
		samples []uint64 // one a second from t0
		now     time.Time
		want    float64
		wantInc uint64
	}{
		{"no samples", nil, at(0), 0, 0},
		{"one sample", []uint64{100}, at(0), 0, 0},
		{"steady 10/s", []uint64{0, 10, 20, 30, 40}, at(4), 10, 40},
		// A restart: 30 → 5 counts as +5: 10+10+10+5+10 over 5 s.
		{"restart", []uint64{0, 10, 20, 30, 5, 15}, at(5), 9, 45},
		// Span 60 s: at 100 s only samples at ≥ 40 s count, none here.
		{"stale", []uint64{0, 10, 20}, at(100), 0, 0},
		// Samples after now are not seen.
		{"future samples ignored", []uint64{0, 10, 20, 1000}, at(2), 10, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRate(time.Minute)
			for i, v := range tc.samples {
				r.Add(at(i), v)
			}
			if got := r.PerSecond(tc.now); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("PerSecond = %v, want %v", got, tc.want)
			}
			if got := r.Increase(tc.now); got != tc.wantInc {
				t.Errorf("Increase = %v, want %v", got, tc.wantInc)
			}
		})
	}
}

func TestRateDropsOutOfOrderAndWraps(t *testing.T) {
	r := NewRate(time.Hour)
	for i := range 1000 { // beyond the ring's capacity
		r.Add(t0.Add(time.Duration(i)*time.Second), uint64(i)*3)
	}
	r.Add(t0, 1<<40) // older than the last: dropped
	now := t0.Add(999 * time.Second)
	if got := r.PerSecond(now); math.Abs(got-3) > 1e-9 {
		t.Fatalf("PerSecond = %v, want 3", got)
	}
}
