package stages

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/metrics"
)

// counts returns how many observations m's gpumesh_job_stage_seconds
// holds for each stage.
func counts(t *testing.T, m *metrics.Metrics) map[metrics.Stage]uint64 {
	t.Helper()
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[metrics.Stage]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "gpumesh_job_stage_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "stage" {
					out[metrics.Stage(l.GetValue())] = s.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

func newClock(t *testing.T) (*Clock, *metrics.Metrics, *bytes.Buffer) {
	t.Helper()
	m, err := metrics.New(metrics.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	return New(m, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))), m, &logs
}

// A job's timeline at its coordinator: each stage is observed once, in
// order, and the first renewal ends it with one log line naming every
// stage; a second renewal observes nothing more.
func TestAJobsStagesAreObservedOnceEachInOrder(t *testing.T) {
	c, m, logs := newClock(t)
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c.Received("j", at(0))
	c.Received("j", at(1)) // a retried submission keeps the first
	c.Queued("j", at(2))
	c.Stepped("j", at(3))
	c.Persisted("j", at(5))
	c.Replicated("j", at(9))
	c.Noted(market.Notification{Job: "j", To: market.JobPlacing, At: at(20)})
	c.Noted(market.Notification{Job: "j", To: market.JobRunning, At: at(30)})
	c.Renewed("j", at(230))
	c.Renewed("j", at(430))
	want := map[metrics.Stage]uint64{metrics.StageQueue: 1, metrics.StagePersist: 1, metrics.StageReplicate: 1,
		metrics.StageBidWindow: 1, metrics.StageAward: 1, metrics.StageFirstRenewal: 1}
	got := counts(t, m)
	for s, n := range want {
		if got[s] != n {
			t.Errorf("stage %s observed %d times, want %d", s, got[s], n)
		}
	}
	line := logs.String()
	for _, kv := range []string{"queue_ms=1", "persist_ms=2", "replicate_ms=4", "bid_window_ms=17", "award_ms=10", "first_renewal_ms=200", "total_ms=230"} {
		if !strings.Contains(line, kv) {
			t.Errorf("log line lacks %s: %s", kv, line)
		}
	}
	if n := strings.Count(line, "job stages"); n != 1 {
		t.Errorf("%d log lines, want 1", n)
	}
}

// A stage reported out of order (a record persisted before its submission
// reached the driver) is not observed; a job that ends without running, or
// whose timeline is older than timelineTTL, leaves no timeline for later
// stages; a nil Clock does nothing.
func TestTimelinesGoWhenTheyCannotEnd(t *testing.T) {
	c, m, _ := newClock(t)
	t0 := time.Unix(1000, 0)
	c.Received("early", t0)
	c.Persisted("early", t0) // never queued nor stepped
	if got := counts(t, m); got[metrics.StagePersist] != 0 {
		t.Errorf("persist observed before the job was stepped: %v", got)
	}
	c.Received("ended", t0)
	c.Noted(market.Notification{Job: "ended", To: market.JobCancelled, At: t0})
	c.Queued("ended", t0)
	c.Stepped("ended", t0)
	if got := counts(t, m); got[metrics.StageQueue] != 0 {
		t.Errorf("a job that ended before it ran still has a timeline: %v", got)
	}
	for _, tc := range []struct {
		job  string
		age  time.Duration // at the sweep
		kept bool
	}{{"old", timelineTTL + time.Second, false}, {"young", timelineTTL - time.Second, true}} {
		before := counts(t, m)[metrics.StageQueue]
		c.Received(tc.job, t0)
		c.Sweep(t0.Add(tc.age))
		c.Queued(tc.job, t0)
		c.Stepped(tc.job, t0)
		if kept := counts(t, m)[metrics.StageQueue] > before; kept != tc.kept {
			t.Errorf("a timeline %v old at the sweep: kept %v, want %v", tc.age, kept, tc.kept)
		}
	}
	var none *Clock
	none.Received("j", t0)
	none.Since(metrics.StageStart, t0)
	none.Renewed("j", t0)
	none.Sweep(t0)
}
