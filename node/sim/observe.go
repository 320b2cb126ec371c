package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// observer follows a running cluster: the jobs submitted and what became of
// them (from the coordinators' events and records), the processes on every
// node (the ground truth of which card runs what), and the invariants.
// Its methods are safe for concurrent use.
type observer struct {
	cat *device.Catalog

	mu         sync.Mutex
	jobs       map[string]*jobTrack
	order      []string // job IDs in submission order
	reroutes   []time.Duration
	violations []string
	use        map[string]*modelUse // by model
	lastSample time.Time
	samples    int
	left       int // departures (leave or crash)
	joined     int // suppliers back
	churned    []ChaosEvent
}

// jobTrack is what the observer knows of one job.
type jobTrack struct {
	id, kind  string
	spec      market.JobSpec
	submitted time.Time
	acked     bool
	refused   string // why the submission was refused
	running   time.Time
	rerouting time.Time // start of the reroute in progress; zero when none
	reroutes  int
	state     market.JobState
	from      string // the supplier whose node sent the job's last event
	rec       market.JobRecord
	hasRec    bool
}

// modelUse integrates one model's cards over time.
type modelUse struct {
	busy, capacity float64 // card-seconds
	nowBusy, nowUp int
}

func newObserver() *observer {
	return &observer{cat: device.DefaultCatalog(), jobs: map[string]*jobTrack{}, use: map[string]*modelUse{}}
}

// submitting records a job about to be submitted, before the call: the
// coordinator may place it before the call returns.
func (o *observer) submitting(spec market.JobSpec, kind string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.jobs[spec.ID] = &jobTrack{id: spec.ID, kind: kind, spec: spec, submitted: at, state: market.JobPending}
	o.order = append(o.order, spec.ID)
}

// submitted records the answer to a submission.
func (o *observer) submitted(id string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	j := o.jobs[id]
	if j == nil {
		return
	}
	if err != nil {
		j.refused = err.Error()
		return
	}
	j.acked = true
}

// event folds one coordinator event, sent by supplier's node.
func (o *observer) event(supplier string, ev api.Event) {
	if ev.Job == "" || (ev.Type != "job" && ev.Type != "reroute") {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	j := o.jobs[ev.Job]
	if j == nil {
		// Submitted from outside the demo (gpumesh submit --api ...).
		j = &jobTrack{id: ev.Job, kind: "external", submitted: ev.At, acked: true}
		o.jobs[ev.Job] = j
		o.order = append(o.order, ev.Job)
	}
	to := market.JobState(ev.State)
	j.state, j.from = to, supplier
	switch {
	case to == market.JobRunning && j.running.IsZero():
		j.running = ev.At
	case to == market.JobRerouting && j.rerouting.IsZero():
		j.rerouting = ev.At
		j.reroutes++
	case to == market.JobRunning && !j.rerouting.IsZero():
		o.reroutes = append(o.reroutes, ev.At.Sub(j.rerouting))
		j.rerouting = time.Time{}
	case to.Terminal():
		j.rerouting = time.Time{}
	}
}

// records folds the coordinators' latest records: a record of a higher
// term, or the same term and a higher version, replaces the one held. The
// final fold also takes each job's state from its record (events may have
// been missed by a subscriber that fell behind).
func (o *observer) records(recs []market.JobRecord, final bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range recs {
		j := o.jobs[r.ID]
		if j == nil {
			j = &jobTrack{id: r.ID, kind: "external", spec: r.Spec, submitted: r.SubmittedAt, acked: true}
			o.jobs[r.ID] = j
			o.order = append(o.order, r.ID)
		}
		if j.hasRec && (r.Term < j.rec.Term || (r.Term == j.rec.Term && r.Version <= j.rec.Version)) {
			continue
		}
		j.rec, j.hasRec = r, true
		if final {
			j.state = r.State
		}
		if j.running.IsZero() && !r.RunningAt.IsZero() {
			j.running = r.RunningAt // the event was missed
		}
	}
}

// nodeSample is one node's cards and processes at one instant.
type nodeSample struct {
	supplier string
	cards    []device.Card
	procs    []procSample
}

type procSample struct {
	job   string
	share int
	epoch uint64
	cards []string
}

// sample folds one look at every node that is up: cards busy by model
// (integrated since the last sample) and the first invariant — no card is
// held by two processes at once.
func (o *observer) sample(now time.Time, nodes []nodeSample) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dt := 0.0
	if !o.lastSample.IsZero() {
		dt = now.Sub(o.lastSample).Seconds()
	}
	o.lastSample = now
	o.samples++
	for _, u := range o.use {
		u.nowBusy, u.nowUp = 0, 0
	}
	for _, ns := range nodes {
		model := map[string]string{}
		for _, c := range ns.cards {
			model[c.ID] = c.Model
			o.modelUse(c.Model).nowUp++
		}
		holder := map[string]procSample{}
		for _, p := range ns.procs {
			for _, id := range p.cards {
				if other, ok := holder[id]; ok {
					o.violations = append(o.violations, fmt.Sprintf("%s: card %s held by %s share %d epoch %d and by %s share %d epoch %d at once",
						ns.supplier, id, other.job, other.share, other.epoch, p.job, p.share, p.epoch))
					continue
				}
				holder[id] = p
				if m, ok := model[id]; ok {
					o.modelUse(m).nowBusy++
				}
			}
		}
	}
	for _, u := range o.use {
		u.busy += dt * float64(u.nowBusy)
		u.capacity += dt * float64(u.nowUp)
	}
}

func (o *observer) modelUse(m string) *modelUse {
	u := o.use[m]
	if u == nil {
		u = &modelUse{}
		o.use[m] = u
	}
	return u
}

// churn records a supplier leaving or coming back (ev.At: when it was
// done, after the workload started).
func (o *observer) churn(ev ChaosEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.churned = append(o.churned, ev)
	if ev.Up {
		o.joined++
	} else {
		o.left++
	}
}

// Counts are the job tallies of a Progress.
type Counts struct {
	Submitted int // acknowledged submissions (and jobs seen from outside)
	Refused   int // submissions refused
	Placed    int // jobs that ran at least once
	Waiting   int // pending, bidding or placing
	Running   int // running or rerouting
	Succeeded int
	Failed    int
	Cancelled int
	Rerouted  int // reroutes (a job may reroute more than once)
}

func (o *observer) countsLocked() Counts {
	var c Counts
	for _, id := range o.order {
		j := o.jobs[id]
		if !j.acked {
			if j.refused != "" {
				c.Refused++
			}
			continue
		}
		c.Submitted++
		if !j.running.IsZero() {
			c.Placed++
		}
		c.Rerouted += j.reroutes
		switch j.state {
		case market.JobPending, market.JobBidding, market.JobPlacing:
			c.Waiting++
		case market.JobRunning, market.JobRerouting:
			c.Running++
		case market.JobSucceeded:
			c.Succeeded++
		case market.JobFailed:
			c.Failed++
		case market.JobCancelled:
			c.Cancelled++
		}
	}
	return c
}

// ModelBusy is one model's cards: busy now, up now, and utilization so far.
type ModelBusy struct {
	Model       string
	Busy, Up    int
	Utilization float64 // busy card-seconds / card-seconds up
}

func (o *observer) busyLocked() []ModelBusy {
	var out []ModelBusy
	for m, u := range o.use {
		mb := ModelBusy{Model: m, Busy: u.nowBusy, Up: u.nowUp}
		if u.capacity > 0 {
			mb.Utilization = u.busy / u.capacity
		}
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b ModelBusy) int {
		if a.Up != b.Up {
			return b.Up - a.Up
		}
		if a.Model < b.Model {
			return -1
		}
		return 1
	})
	return out
}

func (o *observer) spendLocked() float64 {
	s := 0.0
	for _, j := range o.jobs {
		if j.hasRec {
			s += j.rec.CostCNY
		}
	}
	return s
}
