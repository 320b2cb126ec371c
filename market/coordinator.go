package market

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
)

// The coordinator side of a Node: the lifecycle of every job this node
// coordinates. See round.go for placement rounds and leases.go for the
// attempts that run.
type coordinator struct {
	n      *Node
	jobs   map[string]*job
	active map[string]*job // jobs with something left to do
	order  []string        // tick's scratch: the active jobs by ID

	track *trackBook // what this node saw of each supplier (track.go)
	// probeAsked is when each supplier was last asked for a verification
	// probe whose verdict has not come (verify.go).
	probeAsked map[string]time.Time
	lastTick   time.Time // the previous Tick
	// accepts is each supplier's smoothed award → accept time, which its
	// awards' timeouts follow (acceptwait.go).
	accepts acceptTimes
	// resumedAt is the Tick that ended a gap of FenceAfter/2 since the one
	// before (this node was frozen): losses of attempts not heard from
	// since are not charged to their suppliers.
	resumedAt time.Time

	// Candidate selection's scratch, reused from call to call.
	lists  []modelList
	best   offerHeap
	clearX explainer // closeBidding's
}

func newCoordinator(n *Node) *coordinator {
	return &coordinator{n: n, jobs: map[string]*job{}, active: map[string]*job{}, clearX: explainer{cards: map[Reason]int{}}, track: newTrackBook(n), probeAsked: map[string]time.Time{}}
}

type shareEpoch struct {
	share int
	epoch uint64
}

// job is the coordinator's state of one job.
type job struct {
	// movedTo and movedTerm: the coordinator that superseded this node's
	// hold on the job (state JobMoved).
	movedTo   string
	movedTerm uint64

	spec   JobSpec
	sig    *SpecSignature // the owner's signature of spec, when it came with one
	match  *matcher
	scorer *scorer
	seed   uint64

	state       JobState
	reason      string
	term, epoch uint64
	target      int // cards the job should hold (elastic jobs move it)

	submittedAt, runningAt, endedAt time.Time
	exitCode                        *int
	restarts                        int

	placements []*placement
	byAttempt  map[shareEpoch]*placement
	live       map[int]*placement // share → its live attempt
	nextShare  int

	needCards     int        // LayoutAny: cards still to place
	freeShares    []int      // LayoutAny: numbers of lost shares, for their replacements
	needSlots     []int      // slot layouts: shares still to place
	shrinkPending bool       // a scale-down waits for the open round to end
	held          heldOffers // what the latest round passed over whatever its price (heldback.go)
	avoid         map[string]bool
	replaces      map[int]*placement // new share → the draining replica it replaces

	round    *round
	roundSeq uint64
	retryAt  time.Time
	backoff  time.Duration
	retries  uint64

	everRan   bool   // reached running once
	rerouting bool   // lost a share since it last ran whole
	wait      string // what unplaced needs wait for (the last round's failure)

	checkpoints []Checkpoint // the newest CheckpointKeep of each share, oldest first

	cardSeconds, cost float64
	priceCU           float64
	explain           *Explanation

	version uint64
	dirty   bool
}

// placement is the coordinator's state of one attempt.
type placement struct {
	Placement
	round        *round
	lease        string
	wait         time.Duration // for the award's answer, from when it left
	sentAt       time.Time     // when the award left, if it was held (AwardSent)
	deadline     time.Time     // of the award
	lastHeard    time.Time
	suspectSince time.Time
	gang         *GangInfo // the roster sent in its Start
	world        int       // the cards of that roster
	moving       bool      // its node is draining (see drain.go)
	// watched: this coordinator saw the attempt accept or renew, so its
	// end counts in its node's track record.
	watched bool
}

// answerFrom is when the placement's award left: when it was made,
// unless it was held for its record's commit (AwardSent).
func (p *placement) answerFrom() time.Time {
	if p.sentAt.IsZero() {
		return p.AwardedAt
	}
	return p.sentAt
}

func (j *job) flexible() bool {
	return j.spec.LayoutMode() == LayoutAny && j.spec.KindOrDefault() != KindService
}

// perSlot is the cards of one share in slot layouts.
func (j *job) perSlot() int {
	if j.spec.LayoutMode() == LayoutPerNode {
		return j.spec.Layout.PerNode
	}
	return j.spec.Cards
}

// twoPhase: gang members commit first and start together with a roster.
func (j *job) twoPhase() bool { return j.spec.LayoutMode() == LayoutPerNode }

func (j *job) initialNeed() Need {
	if j.flexible() {
		return Need{Cards: j.target}
	}
	return Need{Slots: j.target / j.perSlot(), PerSlot: j.perSlot()}
}

func (j *job) hasNeed() bool { return j.needCards > 0 || len(j.needSlots) > 0 }

// needString says what is still to place: "4 cards", "2 nodes × 8 cards".
func (j *job) needString() string {
	if j.flexible() {
		return Need{Cards: j.needCards}.String()
	}
	return Need{Slots: len(j.needSlots), PerSlot: j.perSlot()}.String()
}

// allocShare numbers a new share of a LayoutAny job: the number of a lost
// share it replaces if there is one, else the next.
func (j *job) allocShare() int {
	if n := len(j.freeShares); n > 0 {
		s := j.freeShares[0]
		j.freeShares = j.freeShares[1:]
		return s
	}
	j.nextShare++
	return j.nextShare - 1
}

// nextEpoch issues the next epoch of coordinator's slot of the job's
// current term (term.go); j.epoch stays the highest issued.
func (j *job) nextEpoch(coordinator string) uint64 {
	j.epoch = max(j.epoch, firstEpoch(j.term, coordinator)) + 1
	return j.epoch
}

func (c *coordinator) touch(j *job) {
	j.version++
	if !j.dirty {
		j.dirty = true
		c.n.dirtyJobs = append(c.n.dirtyJobs, j)
	}
}

// setState moves the job to st with reason and notifies when the state
// changes.
func (c *coordinator) setState(j *job, st JobState, reason string) {
	if j.state == st && j.reason == reason {
		return
	}
	if j.state != st {
		c.n.notes = append(c.n.notes, Notification{Job: j.spec.ID, From: j.state, To: st, Reason: reason, Epoch: j.epoch, At: c.n.now})
	}
	j.state, j.reason = st, reason
	if st == JobRunning && j.runningAt.IsZero() {
		j.runningAt = c.n.now
	}
	if st.Terminal() {
		j.endedAt = c.n.now
	}
	c.touch(j)
}

func (c *coordinator) submit(spec JobSpec, sig *SpecSignature) error {
	if err := spec.Validate(c.n.cat); err != nil {
		return err
	}
	if err := c.checkSigned(spec, sig); err != nil {
		return err
	}
	if c.jobs[spec.ID] != nil {
		return fmt.Errorf("%w: %s", ErrJobExists, spec.ID)
	}
	j := c.newJob(spec)
	j.sig = sig
	c.jobs[spec.ID] = j
	c.active[spec.ID] = j
	c.setState(j, JobPending, "submitted")
	if why := c.neverSatisfiable(j); why != "" {
		c.fail(j, why, nil)
		return nil
	}
	need := j.initialNeed()
	if need.Cards > 0 {
		j.needCards = need.Cards
	} else {
		for i := 0; i < need.Slots; i++ {
			j.needSlots = append(j.needSlots, i)
		}
		j.nextShare = need.Slots
	}
	c.startRound(j)
	return nil
}

// newJob returns the coordinator state of a new job of term 1.
func (c *coordinator) newJob(spec JobSpec) *job {
	dur := spec.ExpectedDuration.Std()
	if dur == 0 {
		dur = c.n.cfg.DefaultDuration
	}
	return &job{
		spec:        spec,
		match:       newMatcher(FilterOf(&spec)),
		scorer:      &scorer{duration: dur, unknownMTBF: c.n.cfg.UnknownMTBF, unknownCU: c.n.cfg.UnknownComputeUnits, track: c.track},
		seed:        seedOf(spec.ID),
		term:        1,
		target:      spec.TotalCards(),
		submittedAt: c.n.now,
		byAttempt:   map[shareEpoch]*placement{},
		live:        map[int]*placement{},
		avoid:       map[string]bool{},
	}
}

// fail ends the job as failed: everything it holds is stopped or released.
func (c *coordinator) fail(j *job, why string, exitCode *int) {
	c.abandon(j, "job failed")
	j.exitCode = exitCode
	c.setState(j, JobFailed, why)
}

// endAs ends a job as rec, the record of its end under another
// coordinator (JobEnded).
func (c *coordinator) endAs(rec JobRecord) error {
	j := c.jobs[rec.ID]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, rec.ID)
	}
	if j.state.Terminal() {
		return nil
	}
	c.abandon(j, "the job ended under another coordinator")
	j.exitCode = rec.ExitCode
	c.setState(j, rec.State, rec.Reason)
	return nil
}

func (c *coordinator) cancel(id, reason string) error {
	j := c.jobs[id]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	if j.state.Terminal() {
		if j.state == JobCancelled {
			return nil
		}
		return fmt.Errorf("%w: %s is %s", ErrJobEnded, id, j.state)
	}
	if reason == "" {
		reason = "cancelled by its owner"
	}
	c.abandon(j, "job cancelled")
	c.setState(j, JobCancelled, reason)
	return nil
}

// abandon stops every live attempt, releases the open round and drops all
// needs.
func (c *coordinator) abandon(j *job, why string) {
	c.cancelRound(j)
	for _, p := range j.liveSorted() {
		c.stopPlacement(j, p, why)
	}
	j.needCards, j.needSlots, j.shrinkPending = 0, nil, false
}

// stopPlacement asks the attempt's node to stop it. Its final usage still
// counts when it comes.
func (c *coordinator) stopPlacement(j *job, p *placement, why string) {
	if p.State == PlacementStopping || !p.State.live() {
		return
	}
	if p.State == PlacementAwarded && p.round != nil && p.round == j.round {
		j.round.outstanding--
	}
	p.State, p.Reason = PlacementStopping, why
	c.n.send(p.Node, &Stop{Job: j.spec.ID, Term: j.term, Share: p.Share, Epoch: p.Epoch, Reason: why})
	c.touch(j)
}

// settle ends an attempt in state st and takes it out of the live set.
func (c *coordinator) settle(j *job, p *placement, st PlacementState, cause Cause, why string) {
	p.State, p.Cause, p.EndedAt = st, cause, c.n.now
	if why != "" {
		p.Reason = why
	}
	if j.live[p.Share] == p {
		delete(j.live, p.Share)
	}
	c.touch(j)
}

func (j *job) liveSorted() []*placement {
	out := make([]*placement, 0, len(j.live))
	for _, p := range j.live {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *placement) int { return a.Share - b.Share })
	return out
}

func (c *coordinator) scale(id string, cards int) error {
	j := c.jobs[id]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	if j.state.Terminal() {
		return fmt.Errorf("%w: %s is %s", ErrJobEnded, id, j.state)
	}
	e := j.spec.Elastic
	switch {
	case e == nil:
		return fmt.Errorf("%w: job %s has no elastic range", ErrNotElastic, id)
	case cards < e.Min || cards > e.Max:
		return fmt.Errorf("%w: %s, range %d..%d", ErrNotElastic, text.Count(cards, "card"), e.Min, e.Max)
	case !j.flexible() && cards%j.perSlot() != 0:
		return fmt.Errorf("%w: %s is not a multiple of %d per node", ErrNotElastic, text.Count(cards, "card"), j.perSlot())
	}
	delta := cards - j.target
	j.target = cards
	c.touch(j)
	switch {
	case delta > 0 && j.flexible():
		j.needCards += delta
	case delta > 0:
		for i := 0; i < delta/j.perSlot(); i++ {
			j.needSlots = append(j.needSlots, j.nextShare)
			j.nextShare++
		}
	case delta < 0:
		c.shrinkNow(j)
	}
	if j.round == nil && j.hasNeed() {
		c.startRound(j)
	}
	c.refresh(j)
	return nil
}

// refresh derives the job's state from its rounds, needs and attempts.
func (c *coordinator) refresh(j *job) {
	if j.state.Terminal() {
		return
	}
	allRunning := len(j.live) > 0
	for _, p := range j.live {
		if p.State != PlacementRunning {
			allRunning = false
		}
	}
	busy := j.round != nil || j.hasNeed()
	switch {
	case !busy && allRunning:
		j.everRan, j.rerouting, j.backoff = true, false, 0
		c.setState(j, JobRunning, "")
	case j.everRan && j.rerouting:
		c.setState(j, JobRerouting, j.wait)
	case j.everRan:
		c.setState(j, JobRunning, j.wait)
	case j.round != nil && j.round.phase == phaseBidding && j.wait != "":
		c.setState(j, JobPending, j.wait) // a retry: still waiting until it clears
	case j.round != nil && j.round.phase == phaseBidding:
		c.setState(j, JobBidding, "")
	case j.round == nil && j.hasNeed() && j.wait != "":
		// Part of it placed, the rest waiting for capacity: the job is
		// not placing anything now, and says what it waits for.
		c.setState(j, JobPending, j.wait)
	case j.round != nil || len(j.live) > 0:
		c.setState(j, JobPlacing, "")
	default:
		c.setState(j, JobPending, j.wait)
	}
}

// checkDone ends a batch job whose shares have all exited 0.
func (c *coordinator) checkDone(j *job) {
	if j.state.Terminal() || j.spec.KindOrDefault() == KindService {
		return
	}
	if len(j.live) == 0 && !j.hasNeed() && j.round == nil {
		zero := 0
		j.exitCode = &zero
		c.setState(j, JobSucceeded, "every share exited 0")
	}
}

// record builds the job's record as persisted and served.
func (j *job) record(coordinatorID string) JobRecord {
	rec := JobRecord{
		ID: j.spec.ID, Spec: j.spec, Coordinator: coordinatorID, State: j.state, Reason: j.reason,
		Term: j.term, Epoch: j.epoch, Cards: j.target, ClearingPriceCU: j.priceCU,
		CardSeconds: j.cardSeconds, CostCNY: j.cost, ExitCode: j.exitCode, Restarts: j.restarts,
		SubmittedAt: j.submittedAt, RunningAt: j.runningAt, EndedAt: j.endedAt,
		Explanation: j.explain, Version: j.version, Signature: j.sig,
		MovedTo: j.movedTo, MovedTerm: j.movedTerm,
	}
	if len(j.checkpoints) > 0 {
		rec.Checkpoints = make([]Checkpoint, len(j.checkpoints))
		for i, cp := range j.checkpoints {
			rec.Checkpoints[i] = cp
			rec.Checkpoints[i].Holders = slices.Clone(cp.Holders)
		}
	}
	rec.Placements = make([]Placement, len(j.placements))
	for i, p := range j.placements {
		rec.Placements[i] = p.Placement
	}
	return rec
}
