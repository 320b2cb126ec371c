package market

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// The supplier side of a Node: its cards, the reservations it made for bids
// and the attempts it runs.
//
// A card is free, reserved (under one lease), running (one attempt), or both
// reserved and running when the running work is preemptible and an
// on-demand bid reserved it. A card whose attempt is stopping stays with
// that attempt until the executor reports the process gone; a preempted
// card passes to the new attempt at once but the new execution starts only
// when the old one has exited (draining).
type supplier struct {
	n            *Node
	cards        []*cardState // in the order the cards were first seen
	byID         map[string]*cardState
	leases       map[string]*reservation
	leaseByRound map[roundKey]*reservation
	nextExpiry   time.Time // no later than the earliest lease's until
	attempts     map[attemptKey]*attempt
	// ended are the attempts whose end the coordinator acknowledged,
	// kept until ReportTTL after the end (expiry, in that order) so that
	// a coordinator that takes the job over later hears the end.
	ended    map[attemptKey]*attempt
	expiry   []attemptKey
	order    []attemptKey // tick's scratch: the attempts in key order
	leaseSeq uint64
	// cardsVersion counts the changes of the card set (setCards): what
	// a card is, its health and evidence change only there.
	cardsVersion uint64
	leaving      bool      // draining: nothing is offered any more
	lastTick     time.Time // the previous Tick: a long gap means the node was frozen
}

type roundKey struct {
	job   string
	round uint64
}

type attemptKey struct {
	job   string
	share int
	epoch uint64
}

type cardState struct {
	card     device.Card
	present  bool
	lease    *reservation
	run      *attempt // the attempt that owns the card
	draining *attempt // a preempted attempt still exiting on the card
}

func (c *cardState) offerable() bool { return c.present && c.card.Health.Healthy }

type reservation struct {
	id          string
	job         string
	round       uint64
	coordinator string
	until       time.Time
	cards       []*cardState
	withdrawn   []string // cards taken out of the lease (unhealthy, gone)
	bid         *Bid
	allowSim    bool // the request's filter allowed simulated cards
}

type attempt struct {
	rec         Attempt
	cards       []*cardState
	exec        ExecSpec
	kind        Kind
	world       int
	gang        *GangInfo
	restore     *Checkpoint
	startWanted bool // start requested (Award.Start or Start)
	startSent   bool // Execution emitted
	runningAt   time.Time
	lastAck     time.Time
	nextRenew   time.Time
	stopCause   Cause
	end         *AttemptEnded
	nextResend  time.Time
	giveUpAt    time.Time // the end report is dropped then (ReportTTL after the end)
	acked       bool      // the coordinator acknowledged the end
	// resumeGrace: the node was frozen; the attempt fences only if no ack
	// comes by then (Config.FenceAfter).
	resumeGrace time.Time
	dirty       bool
}

func newSupplier(n *Node) *supplier {
	s := &supplier{
		n:            n,
		byID:         map[string]*cardState{},
		leases:       map[string]*reservation{},
		leaseByRound: map[roundKey]*reservation{},
		attempts:     map[attemptKey]*attempt{},
		ended:        map[attemptKey]*attempt{},
	}
	s.setCards(n.cfg.Cards)
	s.restore(n.cfg.EndedAttempts)
	return s
}

// restore takes back the ended attempts an earlier run of this node
// persisted (Config.EndedAttempts): the unacknowledged ones are reported
// again, and every one answers a coordinator that takes its job over.
func (s *supplier) restore(ended []Attempt) {
	for _, rec := range ended {
		key := attemptKey{rec.Job, rec.Share, rec.Epoch}
		if s.attempts[key] != nil || s.ended[key] != nil {
			continue
		}
		a := &attempt{rec: rec, acked: rec.Acked, giveUpAt: rec.EndedAt.Add(s.n.cfg.ReportTTL)}
		a.end = &AttemptEnded{Job: rec.Job, Share: rec.Share, Epoch: rec.Epoch, Cause: rec.Cause, ExitCode: rec.ExitCode, CardSeconds: rec.CardSeconds,
			Reason: oneLineCut(rec.Reason, MaxEndReasonBytes), Outputs: rec.Outputs}
		if a.acked {
			s.keepEnded(key, a)
		} else {
			s.attempts[key] = a
		}
	}
}

// keepEnded moves an attempt whose end was acknowledged out of the
// attempts tick visits, until ReportTTL after its end.
func (s *supplier) keepEnded(key attemptKey, a *attempt) {
	delete(s.attempts, key)
	s.ended[key] = a
	i, _ := slices.BinarySearchFunc(s.expiry, a.giveUpAt, func(k attemptKey, t time.Time) int {
		return s.ended[k].giveUpAt.Compare(t)
	})
	s.expiry = slices.Insert(s.expiry, i, key)
}

// expireEnded forgets the acknowledged ends older than ReportTTL.
func (s *supplier) expireEnded(now time.Time) {
	for len(s.expiry) > 0 {
		key := s.expiry[0]
		a := s.ended[key]
		if a != nil && now.Before(a.giveUpAt) {
			return
		}
		s.expiry = s.expiry[1:]
		if a != nil {
			delete(s.ended, key)
			a.rec.State = AttemptClosed
			s.touch(a)
		}
	}
}

// price is what this node asks per card-hour for card, for a preemptible
// job or not, rounded to the fen.
func (s *supplier) price(card *device.Card, preemptible bool) float64 {
	p, ok := s.n.cfg.Prices.PerModel[card.Model]
	if !ok {
		if m, known := s.n.cat.Lookup(card.Model); known {
			p = m.DefaultPriceCNY()
		} else {
			p = device.Model{MemoryGiB: card.MemoryGiB(), ComputeUnits: card.ComputeUnits}.DefaultPriceCNY()
		}
	}
	if preemptible {
		p *= s.n.cfg.Prices.PreemptibleFactor
	}
	return math.Round(p*100) / 100
}

// expireLeases releases every reservation whose lease has passed, so none
// outlives it. Called at the start of every Step; it looks at the leases
// only once the earliest of them may have passed.
func (s *supplier) expireLeases(now time.Time) {
	if len(s.leases) == 0 || !now.After(s.nextExpiry) {
		return
	}
	var next time.Time
	for _, r := range s.leases {
		if now.After(r.until) {
			s.release(r)
		} else if next.IsZero() || r.until.Before(next) {
			next = r.until
		}
	}
	s.nextExpiry = next
}

func (s *supplier) release(r *reservation) {
	for _, c := range r.cards {
		if c.lease == r {
			c.lease = nil
		}
	}
	delete(s.leases, r.id)
	delete(s.leaseByRound, roundKey{r.job, r.round})
	s.n.adDirty = true
}

// onBidRequest reserves cards and bids, or declines. A request that came by
// the broadcast topic is not declined: silence says no to a broadcast, or a
// thousand nodes would answer one job.
func (s *supplier) onBidRequest(from string, m *BidRequest, broadcast bool) error {
	now := s.n.now
	if r := s.leaseByRound[roundKey{m.Job, m.Round}]; r != nil {
		if r.coordinator != from {
			return fmt.Errorf("%w: bid request for job %s round %d from %s, reserved for %s", ErrRefused, m.Job, m.Round, from, r.coordinator)
		}
		s.n.send(from, r.bid) // a duplicate request: the same answer
		return nil
	}
	if s.leaving {
		if !broadcast {
			s.n.send(from, &Decline{Job: m.Job, Round: m.Round, Reason: "the node is draining"})
		}
		return nil
	}
	facts := JobFacts{Owner: m.Owner, Duration: m.Duration.Std(), Network: m.Network, Resources: m.Resources, Image: m.Image, Gang: m.Gang}
	if facts.Network == "" {
		facts.Network = NetworkNone
	}
	if ok, reason := s.n.cfg.Policy.Admit(facts); !ok {
		if !broadcast {
			s.n.send(from, &Decline{Job: m.Job, Round: m.Round, Reason: "policy: " + reason})
		}
		return nil
	}
	match := newMatcher(m.Filter)
	var free, preempt []bidOption
	var misses cardMisses // why free cards did not match, for a decline
	for _, c := range s.cards {
		if !c.offerable() || c.lease != nil || c.draining != nil {
			continue
		}
		price := s.price(&c.card, m.Filter.Preemptible)
		busy := c.run != nil
		// A card whose attempt of this same job is stopping (a gang
		// restarting) is as good as free: the new attempt starts once the
		// old one has exited.
		soon := busy && c.run.rec.Job == m.Job && c.run.stopCause != "" && c.run.end == nil
		if soon {
			busy = false
		} else if busy && (m.Filter.Preemptible || c.run.kind != KindPreemptible || c.run.stopCause != "" || c.run.end != nil) {
			continue
		}
		facts := cardFacts{model: c.card.Model, vendor: c.card.Vendor, memMiB: c.card.MemoryMiB, cu: c.card.ComputeUnits, price: price, preempts: busy, simulated: c.card.Simulated()}
		if r := match.check(&facts); r != reasonPassed {
			if misses == nil {
				misses = cardMisses{}
			}
			misses[r]++
			continue
		}
		o := bidOption{c, price, price / max(c.card.ComputeUnits, 1e-3), busy}
		if busy {
			preempt = append(preempt, o)
		} else {
			free = append(free, o)
		}
	}
	take := bidCards(free, preempt, m.Want)
	matched := len(take)
	if !m.MixedModels {
		take = bidOneModel(free, preempt, m.Want)
	}
	if len(take) < m.Min {
		if !broadcast {
			s.n.send(from, &Decline{Job: m.Job, Round: m.Round, Reason: declineText(&m.Filter, matched, len(take), m.Min, misses)})
		}
		return nil
	}
	s.leaseSeq++
	r := &reservation{
		id: "L" + strconv.FormatUint(s.leaseSeq, 10), job: m.Job, round: m.Round, coordinator: from,
		until: now.Add(s.n.cfg.ReserveTTL), allowSim: m.Filter.AllowSimulated,
	}
	bid := &Bid{Job: m.Job, Round: m.Round, Lease: r.id, LeaseFor: Duration(s.n.cfg.ReserveTTL),
		Availability: s.n.cfg.Availability, Region: s.n.cfg.Region}
	for _, o := range take {
		o.c.lease = r
		r.cards = append(r.cards, o.c)
		bid.Cards = append(bid.Cards, BidCard{ID: o.c.card.ID, Model: o.c.card.Model, Vendor: o.c.card.Vendor,
			MemoryMiB: o.c.card.MemoryMiB, ComputeUnits: o.c.card.ComputeUnits, PriceCNY: o.price, Preempts: o.preempts, Simulated: o.c.card.Simulated()})
	}
	r.bid = bid
	if len(s.leases) == 0 || r.until.Before(s.nextExpiry) {
		s.nextExpiry = r.until
	}
	s.leases[r.id] = r
	s.leaseByRound[roundKey{m.Job, m.Round}] = r
	s.n.adDirty = true
	s.n.send(from, bid)
	return nil
}

func (s *supplier) onAward(from string, m *Award) error {
	key := attemptKey{m.Job, m.Share, m.Epoch}
	if a := s.attempts[key]; a != nil {
		if a.rec.Coordinator != from {
			return fmt.Errorf("%w: award for %s share %d epoch %d from %s, runs for %s", ErrRefused, m.Job, m.Share, m.Epoch, from, a.rec.Coordinator)
		}
		if a.end == nil {
			s.n.send(from, &Accept{Job: m.Job, Share: m.Share, Epoch: m.Epoch, Lease: m.Lease, Started: a.startWanted})
		}
		return nil // a duplicate award
	}
	reject := func(err error, reason string) error {
		s.n.send(from, &Reject{Job: m.Job, Share: m.Share, Epoch: m.Epoch, Lease: m.Lease, Reason: reason})
		return fmt.Errorf("%w: award for %s share %d: %s", err, m.Job, m.Share, reason)
	}
	r := s.leases[m.Lease]
	if r == nil || r.job != m.Job || r.round != m.Round || r.coordinator != from {
		return reject(ErrStale, "lease "+m.Lease+" expired or unknown")
	}
	if s.leaving {
		s.release(r)
		return reject(ErrStale, "the node is draining")
	}
	if reason := s.judgeAward(m, r); reason != "" {
		s.release(r)
		return reject(ErrRefused, reason)
	}
	inLease := map[string]*cardState{}
	for _, c := range r.cards {
		inLease[c.card.ID] = c
	}
	var cards []*cardState
	for _, id := range m.Cards {
		c := inLease[id]
		switch {
		case c == nil && slices.Contains(r.withdrawn, id):
			s.release(r)
			return reject(ErrStale, "card "+id+" is gone")
		case c == nil:
			s.release(r)
			return reject(ErrRefused, "card "+id+" is not in lease "+m.Lease)
		case c.lease != r || !c.offerable():
			s.release(r)
			return reject(ErrStale, "card "+id+" is gone")
		}
		cards = append(cards, c)
	}
	if len(m.Exec.Images) > 0 {
		for _, c := range cards {
			if _, ok := m.Exec.ImageFor(c.card.Vendor); !ok {
				s.release(r)
				return reject(ErrRefused, "the job names no image for vendor "+string(c.card.Vendor)+" (card "+c.card.ID+")")
			}
		}
	}
	s.release(r) // the award consumes the lease; cards it does not name are free again
	slices.SortFunc(cards, func(x, y *cardState) int { return cmp.Compare(s.position(x), s.position(y)) })
	a := &attempt{
		rec: Attempt{Job: m.Job, Share: m.Share, Epoch: m.Epoch, Term: m.Term, Coordinator: from,
			PriceCNY: m.PriceCNY, State: AttemptCommitted, Service: m.Exec.Service},
		cards: cards, exec: m.Exec, kind: m.Kind, world: m.World, gang: m.Gang, restore: m.Restore,
		lastAck: s.n.now, nextRenew: s.n.now.Add(s.n.cfg.RenewInterval),
	}
	if m.Signed != nil {
		a.rec.Owner = m.Signed.Spec.Owner // verified by judgeAward
	}
	for _, c := range cards {
		a.rec.Cards = append(a.rec.Cards, c.card.ID)
		if victim := c.run; victim != nil {
			s.stop(victim, CausePreempted)
			if c.run == victim { // still exiting: drain it
				c.draining = victim
			}
		}
		c.run = a
	}
	s.attempts[key] = a
	s.touch(a)
	s.n.adDirty = true
	if m.Start {
		a.startWanted = true
		s.tryStart(a)
	}
	s.n.send(from, &Accept{Job: m.Job, Share: m.Share, Epoch: m.Epoch, Lease: m.Lease, Started: a.startWanted})
	return nil
}

// tryStart emits the Execution once the attempt may start and its cards
// are no longer draining preempted work.
func (s *supplier) tryStart(a *attempt) {
	if !a.startWanted || a.startSent || a.end != nil || a.stopCause != "" {
		return
	}
	for _, c := range a.cards {
		if c.draining != nil {
			return
		}
	}
	a.startSent = true
	a.rec.State = AttemptRunning
	s.touch(a)
	s.n.starts = append(s.n.starts, Execution{
		Job: a.rec.Job, Share: a.rec.Share, Epoch: a.rec.Epoch, Coordinator: a.rec.Coordinator,
		Cards: a.rec.Cards, Exec: a.exec, Kind: a.kind, World: a.world, Gang: a.gang, Restore: a.restore,
	})
}

func (s *supplier) onRelease(from string, m *Release) error {
	r := s.leases[m.Lease]
	if r == nil || r.job != m.Job || r.coordinator != from {
		return ErrStale
	}
	s.release(r)
	return nil
}

// attemptFrom finds the live attempt a coordinator message is about, and
// lets a coordinator that outranks the attempt's (a higher term, or the
// same term and a greater peer ID: Outranks) take the attempt over; one it
// outranks is told it has been superseded.
//
// An attempt that has ended follows a new coordinator too, and reports its
// end to it at once: a successor learns what happened while nobody
// coordinated.
func (s *supplier) attemptFrom(from, job string, share int, epoch, term uint64) (*attempt, error) {
	a := s.attempts[attemptKey{job, share, epoch}]
	if a == nil {
		a = s.ended[attemptKey{job, share, epoch}]
	}
	if a == nil {
		return nil, ErrStale
	}
	switch {
	case Outranks(term, from, a.rec.Term, a.rec.Coordinator):
		if old := a.rec.Coordinator; old != from {
			// The coordinator of the lower term may not know it was
			// replaced (it was cut off with this runner): once the attempt
			// stops renewing with it, it would place the share again
			// under its own term. Tell it to let the job go.
			s.n.send(old, &Superseded{Job: job, Term: term, Coordinator: from})
		}
		a.rec.Term, a.rec.Coordinator = term, from
		s.touch(a)
		if a.end != nil {
			// Reported to the new coordinator until it acknowledges.
			key := attemptKey{job, share, epoch}
			if s.ended[key] == a {
				delete(s.ended, key)
				s.expiry = slices.DeleteFunc(s.expiry, func(k attemptKey) bool { return k == key })
				s.attempts[key] = a
			}
			a.acked, a.rec.Acked = false, false
			a.nextResend = s.n.now.Add(s.n.cfg.RenewInterval)
			s.n.send(from, a.end)
			return nil, fmt.Errorf("%w: the attempt has ended", ErrStale)
		}
	case a.end != nil:
		return nil, ErrStale
	case Outranks(a.rec.Term, a.rec.Coordinator, term, from):
		s.n.send(from, &Superseded{Job: job, Term: a.rec.Term, Coordinator: a.rec.Coordinator})
		return nil, fmt.Errorf("%w: term %d of %s is outranked by term %d of %s", ErrStale, term, from, a.rec.Term, a.rec.Coordinator)
	case from != a.rec.Coordinator:
		return nil, fmt.Errorf("%w: %s is not the coordinator of %s", ErrRefused, from, job)
	}
	return a, nil
}

// follow makes an attempt of this node renew with a coordinator that
// outranks the one it follows (that one, this node itself, let the job
// go): the new coordinator acks it if it holds it live, and stops it if
// not. A Stop from the old coordinator is then refused as outranked.
func (s *supplier) follow(job string, share int, epoch, term uint64, coordinator string) {
	a := s.attempts[attemptKey{job, share, epoch}]
	if a == nil || a.end != nil || !Outranks(term, coordinator, a.rec.Term, a.rec.Coordinator) {
		return
	}
	a.rec.Term, a.rec.Coordinator = term, coordinator
	s.touch(a)
}

func (s *supplier) onStart(from string, m *Start) error {
	a, err := s.attemptFrom(from, m.Job, m.Share, m.Epoch, m.Term)
	if err != nil {
		return err
	}
	if !a.startWanted {
		a.startWanted, a.world = true, m.World
		g := m.Gang
		a.gang = &g
		s.tryStart(a)
	}
	a.lastAck = s.n.now
	return nil
}

func (s *supplier) onRenewalAck(from string, m *RenewalAck) error {
	a, err := s.attemptFrom(from, m.Job, m.Share, m.Epoch, m.Term)
	if err != nil {
		return err
	}
	a.lastAck = s.n.now
	return nil
}

func (s *supplier) onStop(from string, m *Stop) error {
	a, err := s.attemptFrom(from, m.Job, m.Share, m.Epoch, m.Term)
	if err != nil {
		return err
	}
	s.stopAsked(a, CauseStopped, from, m.Reason)
	return nil
}

func (s *supplier) onEndAck(from string, m *EndAck) error {
	key := attemptKey{m.Job, m.Share, m.Epoch}
	a := s.attempts[key]
	if a == nil || a.end == nil {
		return ErrStale
	}
	// Kept ReportTTL after the end, no longer re-sent: a successor that
	// adopted a record older than this end asks the attempt, and hears its
	// end instead of placing the share again (attemptFrom).
	if from != a.rec.Coordinator {
		return fmt.Errorf("%w: end ack for %s share %d epoch %d from %s, reported to %s", ErrStale, m.Job, m.Share, m.Epoch, from, a.rec.Coordinator)
	}
	a.acked, a.rec.Acked = true, true
	s.touch(a)
	s.keepEnded(key, a)
	return nil
}

func (s *supplier) close(key attemptKey, a *attempt) {
	a.rec.State = AttemptClosed
	s.touch(a)
	delete(s.attempts, key)
}

// stop ends an attempt for cause: at once if it never started, else by
// asking the executor and waiting for ExecutionExited.
func (s *supplier) stop(a *attempt, cause Cause) { s.stopAsked(a, cause, "", "") }

// stopAsked is stop for a Stop from coordinator by, which said why in
// reason: both go to the executor's log line.
func (s *supplier) stopAsked(a *attempt, cause Cause, by, reason string) {
	if a.end != nil || a.stopCause != "" {
		return
	}
	a.stopCause = cause
	if !a.startSent {
		s.finish(a, 0, "", "")
		return
	}
	a.rec.State = AttemptStopping
	s.touch(a)
	s.n.stops = append(s.n.stops, StopExecution{Job: a.rec.Job, Share: a.rec.Share, Epoch: a.rec.Epoch, Cause: cause, By: by, Reason: reason})
}

// finish records the end of an attempt, frees its cards and reports to the
// coordinator until acknowledged; reason (ExecutionExited.Reason) goes
// with the report, cut to MaxEndReasonBytes, and so do outputs.
func (s *supplier) finish(a *attempt, exitCode int, reason, outputs string) {
	now := s.n.now
	cause := a.stopCause
	if cause == "" {
		cause = CauseExited
	}
	a.rec.CardSeconds = s.usage(a)
	a.rec.State, a.rec.Cause, a.rec.ExitCode, a.rec.EndedAt = AttemptDone, cause, exitCode, now
	a.rec.Reason = oneLineCut(reason, MaxEndReasonBytes)
	a.rec.Outputs = outputs
	a.end = &AttemptEnded{Job: a.rec.Job, Share: a.rec.Share, Epoch: a.rec.Epoch, Cause: cause, ExitCode: exitCode, CardSeconds: a.rec.CardSeconds,
		Reason: a.rec.Reason, Outputs: outputs}
	a.nextResend = now.Add(s.n.cfg.RenewInterval)
	a.giveUpAt = now.Add(s.n.cfg.ReportTTL)
	s.touch(a)
	var waiting []*attempt
	for _, c := range a.cards {
		if c.run == a {
			c.run = nil
		}
		if c.draining == a {
			c.draining = nil
			if c.run != nil {
				waiting = append(waiting, c.run)
			}
		}
		if !c.present && c.run == nil && c.lease == nil {
			s.forget(c)
		}
	}
	for _, w := range waiting {
		s.tryStart(w)
	}
	s.n.adDirty = true
	s.n.send(a.rec.Coordinator, a.end)
}

// usage is the attempt's card-seconds so far: its cards times the time its
// process has run.
func (s *supplier) usage(a *attempt) float64 {
	if a.runningAt.IsZero() {
		return a.rec.CardSeconds
	}
	return float64(len(a.cards)) * s.n.now.Sub(a.runningAt).Seconds()
}

func (s *supplier) onExecutionStarted(ev ExecutionStarted) error {
	a := s.attempts[attemptKey{ev.Job, ev.Share, ev.Epoch}]
	if a == nil || !a.startSent || a.end != nil {
		return fmt.Errorf("%w: no execution of %s share %d epoch %d was started", ErrUnknownJob, ev.Job, ev.Share, ev.Epoch)
	}
	if a.runningAt.IsZero() {
		a.runningAt = s.n.now
		a.rec.StartedAt = s.n.now
		s.touch(a)
	}
	return nil
}

func (s *supplier) onExecutionExited(ev ExecutionExited) error {
	a := s.attempts[attemptKey{ev.Job, ev.Share, ev.Epoch}]
	if a == nil || !a.startSent || a.end != nil {
		return fmt.Errorf("%w: no execution of %s share %d epoch %d is running", ErrUnknownJob, ev.Job, ev.Share, ev.Epoch)
	}
	if ev.Fenced && (a.stopCause == "" || a.stopCause == CauseStopped) {
		a.stopCause = CauseFenced
	}
	if ev.NotStarted && a.stopCause == "" {
		a.stopCause = CauseNotStarted
	}
	outputs := ev.Outputs
	if !sha256Digest.MatchString(outputs) {
		outputs = "" // not a digest: the node's mistake, not the owner's to see
	}
	s.finish(a, ev.ExitCode, ev.Reason, outputs)
	return nil
}

// leaseList lists the attempts whose processes run (or stop) and when their
// coordinator last acknowledged each.
func (s *supplier) leaseList() []Lease {
	var out []Lease
	for _, key := range s.sortedAttempts() {
		a := s.attempts[key]
		if a.startSent && a.end == nil {
			out = append(out, Lease{Job: key.job, Share: key.share, Epoch: key.epoch, AckedAt: a.lastAck})
		}
	}
	return out
}

// tick renews leases of running attempts, fences those whose coordinator
// went silent, and re-sends unacknowledged reports.
func (s *supplier) tick() {
	now := s.n.now
	if !s.lastTick.IsZero() && now.Sub(s.lastTick) > s.n.cfg.FenceAfter/2 {
		// The node was frozen: renew at once, and fence only if the
		// coordinator does not answer (see Config.FenceAfter).
		for _, a := range s.attempts {
			if a.end == nil && a.stopCause == "" {
				a.resumeGrace = now.Add(2 * s.n.cfg.RenewInterval)
				a.nextRenew = now
			}
		}
	}
	s.lastTick = now
	s.expireEnded(now)
	for _, key := range s.sortedAttempts() {
		a := s.attempts[key]
		if a == nil {
			continue
		}
		switch {
		case a.end != nil:
			if now.After(a.giveUpAt) {
				s.close(key, a)
			} else if !a.acked && !now.Before(a.nextResend) {
				a.nextResend = now.Add(s.n.cfg.RenewInterval)
				s.n.send(a.rec.Coordinator, a.end)
			}
		case a.stopCause != "":
			// waiting for the executor
		case s.n.cfg.Policy.MaxDuration > 0 && !a.runningAt.IsZero() && now.Sub(a.runningAt) >= s.n.cfg.Policy.MaxDuration:
			s.stop(a, CauseTimeLimit)
		case now.Sub(a.lastAck) > s.n.cfg.FenceAfter && !now.Before(a.resumeGrace):
			s.stop(a, CauseFenced)
		case !now.Before(a.nextRenew):
			a.nextRenew = now.Add(s.n.cfg.RenewInterval)
			s.n.send(a.rec.Coordinator, &Renewal{Job: a.rec.Job, Term: a.rec.Term, Share: a.rec.Share, Epoch: a.rec.Epoch,
				Started: a.startWanted, CardSeconds: s.usage(a), Ready: a.rec.Ready})
		}
	}
}

// setCards replaces the card set (CardsChanged): new cards are offered,
// missing or unhealthy ones withdrawn and their work stopped.
func (s *supplier) setCards(cards []device.Card) {
	seen := map[string]bool{}
	for _, card := range cards {
		if card.ID == "" || seen[card.ID] {
			continue
		}
		seen[card.ID] = true
		if card.Model == "" {
			s.n.cat.Resolve(&card)
		}
		c := s.byID[card.ID]
		if c == nil {
			c = &cardState{}
			s.byID[card.ID] = c
			s.cards = append(s.cards, c)
		}
		c.card, c.present = card, true
	}
	s.cardsVersion++
	for _, c := range slices.Clone(s.cards) {
		if !seen[c.card.ID] {
			c.present = false
		}
		if c.offerable() {
			continue
		}
		if r := c.lease; r != nil {
			r.cards = slices.DeleteFunc(r.cards, func(x *cardState) bool { return x == c })
			r.withdrawn = append(r.withdrawn, c.card.ID)
			c.lease = nil
		}
		if c.run != nil {
			s.stop(c.run, CauseCardLost)
		}
		if !c.present && c.run == nil && c.draining == nil {
			s.forget(c)
		}
	}
	s.n.adDirty = true
}

// position is the card's place in this node's card order.
func (s *supplier) position(c *cardState) int { return slices.Index(s.cards, c) }

func (s *supplier) forget(c *cardState) {
	delete(s.byID, c.card.ID)
	s.cards = slices.DeleteFunc(s.cards, func(x *cardState) bool { return x == c })
}

func (s *supplier) touch(a *attempt) {
	a.rec.Version++
	if !a.dirty {
		a.dirty = true
		s.n.dirtyAttempts = append(s.n.dirtyAttempts, a)
	}
}

// drain stops offering this node's cards, lets its reservations go and asks
// the coordinator of every attempt it runs to move it.
func (s *supplier) drain() {
	if s.leaving {
		return
	}
	s.leaving = true
	for _, r := range s.leases {
		s.release(r)
	}
	s.n.adDirty = true
	for _, key := range s.sortedAttempts() {
		a := s.attempts[key]
		if a.end != nil || a.stopCause != "" {
			continue
		}
		s.n.send(a.rec.Coordinator, &Moving{Job: a.rec.Job, Term: a.rec.Term, Share: a.rec.Share, Epoch: a.rec.Epoch})
	}
}

// sortedAttempts returns the keys of the attempts by job, share and epoch,
// in a scratch slice that the next call reuses: a loop that sends visits
// them in the same order on every run, not in map order.
func (s *supplier) sortedAttempts() []attemptKey {
	s.order = s.order[:0]
	for k := range s.attempts {
		s.order = append(s.order, k)
	}
	if len(s.order) > 1 {
		slices.SortFunc(s.order, func(a, b attemptKey) int {
			if c := cmp.Compare(a.job, b.job); c != 0 {
				return c
			}
			if c := cmp.Compare(a.share, b.share); c != 0 {
				return c
			}
			return cmp.Compare(a.epoch, b.epoch)
		})
	}
	return s.order
}

// bidOption is a card a supplier may bid for a request, at its price.
type bidOption struct {
	c        *cardState
	price    float64
	rank     float64 // price per compute unit: the cheaper first
	preempts bool
}

// bidCards picks up to want cards to bid: free ones first, then ones that
// preempt work, each kind the cheapest per compute unit first.
func bidCards(free, preempt []bidOption, want int) []bidOption {
	byRank := func(a, b bidOption) int { return cmp.Compare(a.rank, b.rank) }
	free, preempt = slices.Clone(free), slices.Clone(preempt)
	slices.SortStableFunc(free, byRank)
	slices.SortStableFunc(preempt, byRank)
	take := free[:min(len(free), want)]
	if len(take) < want {
		take = append(take, preempt[:min(len(preempt), want-len(take))]...)
	}
	return take
}

// bidOneModel picks the cards to bid when a share's cards must be of one
// model (BidRequest.MixedModels false): bidCards among the cards of each
// model, and of those the model that gives the most cards, then the one
// whose cards cost least per compute unit in all, then by name.
func bidOneModel(free, preempt []bidOption, want int) []bidOption {
	var models []string
	for _, o := range append(slices.Clip(free), preempt...) {
		if !slices.Contains(models, o.c.card.Model) {
			models = append(models, o.c.card.Model)
		}
	}
	slices.Sort(models)
	of := func(opts []bidOption, model string) []bidOption {
		return slices.DeleteFunc(slices.Clone(opts), func(o bidOption) bool { return o.c.card.Model != model })
	}
	var best []bidOption
	bestRank := 0.0
	for _, model := range models {
		take := bidCards(of(free, model), of(preempt, model), want)
		rank := 0.0
		for _, o := range take {
			rank += o.rank
		}
		if len(take) > len(best) || (len(take) == len(best) && rank < bestRank) {
			best, bestRank = take, rank
		}
	}
	return best
}
