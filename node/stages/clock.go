// Package stages times where a submitted job's time goes, stage by stage,
// at the nodes that handle it.
package stages

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/metrics"
)

// Stage timings. Where a job's time goes between its submission and its
// first lease renewal, stage by stage, as gpumesh_job_stage_seconds
// histograms and one debug log line per job at its coordinator:
//
//	level=DEBUG msg="job stages" job=j… queue_ms=0.1 persist_ms=1.9 replicate_ms=4.2 bid_window_ms=3.0 award_ms=9.1 first_renewal_ms=301 total_ms=318
//
// The stages of the node that took the request (api, signature) and of the
// supplier (start) are timed there and go to those nodes' histograms. A
// job whose auction finds no capacity leaves its timeline when it ends or
// after timelineTTL: waiting for cards is no stage.

// timelineTTL bounds how long a job's timeline is kept without reaching
// its first renewal; maxTimelines bounds how many are kept at once.
const (
	timelineTTL  = 2 * time.Minute
	maxTimelines = 10000
)

// timeline is one job's moments at its coordinator.
type timeline struct {
	received   time.Time // submitLocal began
	queued     time.Time // handed to the driver
	stepped    time.Time // the driver took it up
	persisted  time.Time // its record on disk
	replicated time.Time // its replicas confirmed (acknowledged)
	cleared    time.Time // its auction cleared (placing)
	running    time.Time // every share running
}

// Clock keeps the timelines of the jobs a node coordinates. Its methods
// are safe for concurrent use; a nil *Clock does nothing.
type Clock struct {
	m   *metrics.Metrics
	log *slog.Logger

	mu   sync.Mutex
	jobs map[string]*timeline
}

// New returns a Clock that observes into m's gpumesh_job_stage_seconds
// and logs each job's stages to log at debug level.
func New(m *metrics.Metrics, log *slog.Logger) *Clock {
	return &Clock{m: m, log: log, jobs: map[string]*timeline{}}
}

// Observe records one stage that is not part of a coordinator's timeline
// (api, signature, start).
func (s *Clock) Observe(st metrics.Stage, d time.Duration) {
	if s != nil && s.m != nil {
		s.m.ObserveStage(st, d)
	}
}

// Since observes the time from at to now as stage st, when at is set.
func (s *Clock) Since(st metrics.Stage, at time.Time) {
	if !at.IsZero() {
		s.Observe(st, time.Since(at))
	}
}

// API observes the API's part of a request: from its arrival to now.
func (s *Clock) API(ctx context.Context) {
	if at, ok := api.ReceivedAt(ctx); ok {
		s.Since(metrics.StageAPI, at)
	}
}

// update runs f on job's timeline, making it when create is set.
func (s *Clock) update(job string, create bool, f func(t *timeline)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.jobs[job]
	if !ok {
		if !create || len(s.jobs) >= maxTimelines {
			return
		}
		t = &timeline{}
		s.jobs[job] = t
	}
	f(t)
}

// Received starts job's timeline: a submission reached its coordinator.
func (s *Clock) Received(job string, at time.Time) {
	s.update(job, true, func(t *timeline) {
		if t.received.IsZero() { // a retried submission keeps the first
			t.received = at
		}
	})
}

// Queued marks the submission handed to the driver; Stepped (on the
// driver) that it was taken up, and Persisted (after the turn's write)
// that its record is on disk.
func (s *Clock) Queued(job string, at time.Time) {
	s.update(job, false, func(t *timeline) {
		if t.queued.IsZero() {
			t.queued = at
		}
	})
}

func (s *Clock) Stepped(job string, at time.Time) {
	s.update(job, false, func(t *timeline) {
		if t.stepped.IsZero() && !t.queued.IsZero() {
			t.stepped = at
			s.Observe(metrics.StageQueue, at.Sub(t.queued))
		}
	})
}

func (s *Clock) Persisted(job string, at time.Time) {
	s.update(job, false, func(t *timeline) {
		if t.persisted.IsZero() && !t.stepped.IsZero() {
			t.persisted = at
			s.Observe(metrics.StagePersist, at.Sub(t.stepped))
		}
	})
}

// Replicated marks the job's record confirmed by its replicas, and the
// submission acknowledged.
func (s *Clock) Replicated(job string, at time.Time) {
	s.update(job, false, func(t *timeline) {
		if t.replicated.IsZero() && !t.persisted.IsZero() {
			t.replicated = at
			s.Observe(metrics.StageReplicate, at.Sub(t.persisted))
		}
	})
}

// Noted follows the market's notifications of the job: its auction
// cleared, it runs, it ended (its timeline goes).
func (s *Clock) Noted(note market.Notification) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.jobs[note.Job]
	if !ok {
		return
	}
	switch {
	case note.To == market.JobPlacing && t.cleared.IsZero() && !t.stepped.IsZero():
		t.cleared = note.At
		s.Observe(metrics.StageBidWindow, note.At.Sub(t.stepped))
	case note.To == market.JobRunning && t.running.IsZero() && !t.cleared.IsZero():
		t.running = note.At
		s.Observe(metrics.StageAward, note.At.Sub(t.cleared))
	case note.To.Terminal():
		if t.running.IsZero() || note.To == market.JobMoved {
			delete(s.jobs, note.Job) // no renewal will come
		}
	}
}

// Renewed marks a lease renewal of job received: the first ends its
// timeline, with the log line.
func (s *Clock) Renewed(job string, at time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	t, ok := s.jobs[job]
	if !ok || t.running.IsZero() {
		s.mu.Unlock()
		return
	}
	delete(s.jobs, job)
	s.mu.Unlock()
	s.Observe(metrics.StageFirstRenewal, at.Sub(t.running))
	s.log.Debug("job stages", "job", job,
		"queue_ms", msBetween(t.queued, t.stepped), "persist_ms", msBetween(t.stepped, t.persisted),
		"replicate_ms", msBetween(t.persisted, t.replicated), "bid_window_ms", msBetween(t.stepped, t.cleared),
		"award_ms", msBetween(t.cleared, t.running), "first_renewal_ms", msBetween(t.running, at),
		"total_ms", msBetween(t.received, at))
}

// Sweep drops the timelines older than timelineTTL.
func (s *Clock) Sweep(now time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, t := range s.jobs {
		if now.Sub(t.received) > timelineTTL {
			delete(s.jobs, id)
		}
	}
}

// msBetween is b − a in milliseconds, to 0.01 ms; -1 where either is
// missing (the stage did not happen here, or came in another order).
func msBetween(a, b time.Time) float64 {
	if a.IsZero() || b.IsZero() {
		return -1
	}
	return float64(b.Sub(a).Microseconds()/10) / 100
}
