package market

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// Node is one gpumesh node's market: the supplier side (its cards, its
// reservations, the attempts it runs) and the coordinator side (every job
// it coordinates), as one pure state machine in the style of etcd raft's
// RawNode. It has no goroutines, network, clock or disk; events go in
// through Step and decisions come out through Ready. It is not safe for
// concurrent use: one goroutine owns it (see the package documentation).
type Node struct {
	cfg   Config
	cat   *device.Catalog
	now   time.Time
	sup   *supplier
	coord *coordinator

	// What Ready hands out.
	msgs          []Message
	starts        []Execution
	stops         []StopExecution
	notes         []Notification
	dirtyJobs     []*job
	dirtyAttempts []*attempt
	adDirty       bool
	adSeq         uint64
	lastAd        []Offer
	pendingAd     *Ad

	local []Message // messages to this node itself, handled within Step
}

// New returns a Node for cfg (see DefaultConfig), or the error of
// cfg.Validate.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, cat: cfg.Catalog}
	if n.cat == nil {
		n.cat = device.DefaultCatalog()
	}
	n.sup = newSupplier(n)
	n.coord = newCoordinator(n)
	n.cfg.TrackRecords = nil // the coordinator holds them now
	return n, nil
}

// ID returns the node's identity.
func (n *Node) ID() string { return n.cfg.ID }

// Quiet reports whether nothing this node does waits on time: no job it
// coordinates has anything left to do, it holds no reservation and it
// runs no attempt (whose renewals, reports and fences a Tick drives).
// What a Tick still does for a quiet node is slow: ended attempts are
// forgotten ReportTTL after their end. Its driver may tick it less often
// until an event makes it busy again.
func (n *Node) Quiet() bool {
	return len(n.coord.active) == 0 && len(n.sup.leases) == 0 && len(n.sup.attempts) == 0
}

// Step applies one event. It returns an error wrapping ErrBadEvent,
// ErrBadMessage or a *SpecError for input that is malformed (nothing
// changes), or one of the other sentinel errors of events.go for an
// expected outcome (a stale message, an unknown job). Messages this node
// sends to itself are handled before Step returns.
func (n *Node) Step(ev Event) error {
	if ev == nil {
		return fmt.Errorf("%w: nil event", ErrBadEvent)
	}
	now := ev.at()
	if now.IsZero() {
		return fmt.Errorf("%w: %T has no time", ErrBadEvent, ev)
	}
	if err := validateEvent(ev); err != nil {
		return err
	}
	if now.After(n.now) {
		n.now = now
	}
	n.sup.expireLeases(n.now)
	var err error
	switch e := ev.(type) {
	case Tick:
		n.sup.tick()
		n.coord.tick()
	case JobSubmitted:
		err = n.coord.submit(e.Spec, e.Signature)
	case JobAdopted:
		err = n.coord.adopt(e.Record, e.Term)
	case JobEnded:
		err = n.coord.endAs(e.Record)
	case CancelJob:
		err = n.coord.cancel(e.Job, e.Reason)
	case AwardHeld:
		n.coord.awardGated(e.Job, e.Share, e.Epoch, true)
	case AwardSent:
		n.coord.awardGated(e.Job, e.Share, e.Epoch, false)
	case ScaleJob:
		err = n.coord.scale(e.Job, e.Cards)
	case MessageReceived:
		err = n.handle(e.Message)
	case PeerLost:
		n.coord.peerLost(e.Node)
	case CardsChanged:
		n.sup.setCards(e.Cards)
	case Drain:
		n.sup.drain()
	case ExecutionStarted:
		err = n.sup.onExecutionStarted(e)
	case ExecutionExited:
		err = n.sup.onExecutionExited(e)
	case ExecutionReady:
		err = n.sup.onExecutionReady(e)
	case CheckpointTaken:
		err = n.coord.checkpoint(e)
	case ProbeResult:
		err = n.coord.onProbeResult(e)
	default:
		return fmt.Errorf("%w: unknown event %T", ErrBadEvent, ev)
	}
	for len(n.local) > 0 {
		m := n.local[0]
		n.local = n.local[1:]
		_ = n.handle(m) // our own messages: stale ones are expected, none are malformed
	}
	n.local = nil
	return err
}

func validateEvent(ev Event) error {
	switch e := ev.(type) {
	case MessageReceived:
		if err := checkID("message from", e.Message.From); err != nil {
			return err
		}
		if e.Message.Payload == nil {
			return fmt.Errorf("%w: no payload", ErrBadMessage)
		}
		return e.Message.Payload.validate()
	case CancelJob:
		return checkEventJob(e.Job)
	case AwardHeld:
		return checkEventJob(e.Job)
	case AwardSent:
		return checkEventJob(e.Job)
	case JobEnded:
		if err := checkEventJob(e.Record.ID); err != nil {
			return err
		}
		if !e.Record.State.Terminal() {
			return fmt.Errorf("%w: JobEnded with a record in state %s", ErrBadEvent, e.Record.State)
		}
	case ScaleJob:
		return checkEventJob(e.Job)
	case ExecutionStarted:
		return checkEventJob(e.Job)
	case ExecutionReady:
		return checkEventJob(e.Job)
	case ExecutionExited:
		return checkEventJob(e.Job)
	case CheckpointTaken:
		if err := checkEventJob(e.Job); err != nil {
			return err
		}
		if err := checkID("checkpoint from", e.From); err != nil {
			return fmt.Errorf("%w: %v", ErrBadEvent, err)
		}
		if err := e.Checkpoint.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadEvent, err)
		}
	case PeerLost:
		if e.Node == "" {
			return fmt.Errorf("%w: PeerLost without a node", ErrBadEvent)
		}
	}
	return nil
}

func checkEventJob(id string) error {
	if err := ValidateJobID(id); err != nil {
		return fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	return nil
}

// handle dispatches a validated message to the side it is for.
func (n *Node) handle(m Message) error {
	switch p := m.Payload.(type) {
	case *BidRequest:
		return n.sup.onBidRequest(m.From, p, m.To == Broadcast)
	case *Award:
		return n.sup.onAward(m.From, p)
	case *Release:
		return n.sup.onRelease(m.From, p)
	case *Start:
		return n.sup.onStart(m.From, p)
	case *RenewalAck:
		return n.sup.onRenewalAck(m.From, p)
	case *Stop:
		return n.sup.onStop(m.From, p)
	case *EndAck:
		return n.sup.onEndAck(m.From, p)
	case *Bid:
		return n.coord.onBid(m.From, p)
	case *Decline:
		return n.coord.onDecline(m.From, p)
	case *Accept:
		return n.coord.onAccept(m.From, p)
	case *Reject:
		return n.coord.onReject(m.From, p)
	case *Renewal:
		return n.coord.onRenewal(m.From, p)
	case *AttemptEnded:
		return n.coord.onAttemptEnded(m.From, p)
	case *Superseded:
		return n.coord.onSuperseded(m.From, p)
	case *Moving:
		return n.coord.onMoving(m.From, p)
	case *ProbeRequest:
		return fmt.Errorf("%w: a probe request from %s: node answers those, not the market", ErrRefused, m.From)
	}
	return fmt.Errorf("%w: unknown payload %T", ErrBadMessage, m.Payload)
}

// send queues a message; one to this node itself is handled within Step,
// and a broadcast goes both out and to this node.
func (n *Node) send(to string, p Payload) {
	m := Message{From: n.cfg.ID, To: to, Payload: p}
	if to == n.cfg.ID || to == Broadcast {
		n.local = append(n.local, m)
	}
	if to != n.cfg.ID {
		n.msgs = append(n.msgs, m)
	}
}

// HasReady reports whether Ready would return anything.
func (n *Node) HasReady() bool {
	return len(n.msgs) > 0 || len(n.starts) > 0 || len(n.stops) > 0 || len(n.notes) > 0 ||
		len(n.dirtyJobs) > 0 || len(n.dirtyAttempts) > 0 || n.adDirty || n.pendingAd != nil || n.coord.track.hasReady()
}

// Ready returns what the node has decided since the last Advance. Calling
// it again without Advance returns the same and more.
func (n *Node) Ready() Ready {
	rd := Ready{Messages: n.msgs, Start: n.starts, Stop: n.stops, Notifications: n.notes}
	if len(n.dirtyJobs) > 0 {
		rd.Jobs = make([]JobRecord, len(n.dirtyJobs))
		for i, j := range n.dirtyJobs {
			rd.Jobs[i] = j.record(n.cfg.ID)
		}
	}
	if len(n.dirtyAttempts) > 0 {
		rd.Attempts = make([]Attempt, len(n.dirtyAttempts))
		for i, a := range n.dirtyAttempts {
			rd.Attempts[i] = a.rec
			rd.Attempts[i].Cards = slices.Clone(a.rec.Cards)
		}
	}
	if n.adDirty {
		n.adDirty = false
		if offers := n.sup.ad(); !slices.Equal(offers, n.lastAd) || n.adSeq == 0 {
			n.adSeq++
			n.lastAd = offers
			n.pendingAd = &Ad{Node: n.cfg.ID, Seq: n.adSeq, Offers: slices.Clone(offers)}
		}
	}
	rd.Ad = n.pendingAd
	n.coord.track.ready(&rd)
	return rd
}

// Advance acknowledges that rd, from Ready, has been handled. Anything
// decided after that Ready stays for the next one.
func (n *Node) Advance(rd Ready) {
	n.msgs = dropFront(n.msgs, len(rd.Messages))
	n.starts = dropFront(n.starts, len(rd.Start))
	n.stops = dropFront(n.stops, len(rd.Stop))
	n.notes = dropFront(n.notes, len(rd.Notifications))
	// Ready lists the dirty jobs and attempts in order and Step only
	// appends to those lists, so rd's entries line up with their front.
	keepJobs := n.dirtyJobs[:0]
	for i, j := range n.dirtyJobs {
		if i < len(rd.Jobs) && rd.Jobs[i].Version == j.version {
			j.dirty = false
			continue
		}
		keepJobs = append(keepJobs, j)
	}
	n.dirtyJobs = keepJobs
	keepAttempts := n.dirtyAttempts[:0]
	for i, a := range n.dirtyAttempts {
		if i < len(rd.Attempts) && rd.Attempts[i].Version == a.rec.Version {
			a.dirty = false
			continue
		}
		keepAttempts = append(keepAttempts, a)
	}
	n.dirtyAttempts = keepAttempts
	if rd.Ad != nil && n.pendingAd != nil && rd.Ad.Seq == n.pendingAd.Seq {
		n.pendingAd = nil
	}
	n.coord.track.advance(&rd)
}

// dropFront removes the first k elements, reusing nothing the caller holds.
func dropFront[T any](s []T, k int) []T {
	if k >= len(s) {
		return nil
	}
	return slices.Clone(s[k:])
}

// Job returns the record of a job this node coordinates.
func (n *Node) Job(id string) (JobRecord, bool) {
	j := n.coord.jobs[id]
	if j == nil {
		return JobRecord{}, false
	}
	return j.record(n.cfg.ID), true
}

// Jobs returns the records of every job this node coordinates, by ID.
func (n *Node) Jobs() []JobRecord {
	out := make([]JobRecord, 0, len(n.coord.jobs))
	for _, j := range n.coord.jobs {
		out = append(out, j.record(n.cfg.ID))
	}
	slices.SortFunc(out, func(a, b JobRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// LiveJobs returns the records of the jobs this node coordinates that have
// not ended, by ID: unlike Jobs, it builds no record of a job that ended.
func (n *Node) LiveJobs() []JobRecord {
	var out []JobRecord
	for _, j := range n.coord.jobs {
		if !j.state.Terminal() {
			out = append(out, j.record(n.cfg.ID))
		}
	}
	slices.SortFunc(out, func(a, b JobRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// JobCounts counts the jobs this node coordinates, by state, without
// building their records.
func (n *Node) JobCounts() map[JobState]int {
	out := map[JobState]int{}
	for _, j := range n.coord.jobs {
		out[j.state]++
	}
	return out
}

// Forget drops a job that has ended and holds no cards, once node has
// persisted its record. It fails for an unknown job (ErrUnknownJob) and
// for a job still going.
func (n *Node) Forget(id string) error {
	j := n.coord.jobs[id]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	if !j.state.Terminal() || len(j.live) > 0 {
		return fmt.Errorf("job %s is %s with %d live attempts: only ended jobs are forgotten", id, j.state, len(j.live))
	}
	delete(n.coord.jobs, id)
	delete(n.coord.active, id)
	return nil
}

// TrackRecords returns the track record this node keeps, as a
// coordinator, of each supplier it has seen run attempts, by node, with
// losses and run time decayed to the latest event's time.
func (n *Node) TrackRecords() []TrackRecord { return n.coord.track.records() }

// Cards returns this node's cards and what each is doing.
func (n *Node) Cards() []CardStatus { return n.sup.status() }

// EachCardState calls fn with the ID and state of each of this node's
// cards, in the order Cards lists them, copying nothing: what a driver
// checks on every turn.
func (n *Node) EachCardState(fn func(id string, state CardState)) {
	for _, c := range n.sup.cards {
		fn(c.card.ID, c.state())
	}
}

// NumCards is how many cards Cards lists.
func (n *Node) NumCards() int { return len(n.sup.cards) }

// EachCard calls fn with each of this node's cards and its state, in the
// order Cards lists them, without the rest of a CardStatus: what an ad of
// the node's supply needs, with no slice of every card's status made. fn
// must neither keep nor change card.
func (n *Node) EachCard(fn func(card *device.Card, state CardState)) {
	for _, c := range n.sup.cards {
		fn(&c.card, c.state())
	}
}

// CardsVersion changes whenever CardsChanged replaces this node's cards
// (a card's identity, health or evidence); between two equal versions,
// what Cards reports of each card but its state and work is unchanged.
func (n *Node) CardsVersion() uint64 { return n.sup.cardsVersion }

// Ad returns this node's current capacity ad (what Ready.Ad last carried,
// or would carry now).
func (n *Node) Ad() Ad {
	return Ad{Node: n.cfg.ID, Seq: n.adSeq, Offers: n.sup.ad()}
}

// Lease is the lease of an attempt this node runs: its coordinator last
// acknowledged it at AckedAt, and places the share elsewhere about
// Config.LostAfter after it last heard from the runner. A node that cannot
// stop the attempt itself by then (frozen, dead) has it killed by its
// fence keeper (node/fence).
type Lease struct {
	Job     string
	Share   int
	Epoch   uint64
	AckedAt time.Time
}

// Leases returns the leases of the attempts whose processes this node runs
// or stops, in job, share and epoch order.
func (n *Node) Leases() []Lease { return n.sup.leaseList() }

// LostAfter is Config.LostAfter.
func (n *Node) LostAfter() time.Duration { return n.cfg.LostAfter }

// Attempts returns the attempts this node runs, for inspection.
func (n *Node) Attempts() []Attempt {
	out := make([]Attempt, 0, len(n.sup.attempts))
	for _, a := range n.sup.attempts {
		out = append(out, a.rec)
	}
	slices.SortFunc(out, func(a, b Attempt) int {
		if c := cmp.Compare(a.Job, b.Job); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Share, b.Share); c != 0 {
			return c
		}
		return cmp.Compare(a.Epoch, b.Epoch)
	})
	return out
}

// Attempt returns the attempt this node runs (or ran, until its end is
// forgotten) of job's share under epoch.
func (n *Node) Attempt(job string, share int, epoch uint64) (Attempt, bool) {
	k := attemptKey{job, share, epoch}
	if a := n.sup.attempts[k]; a != nil {
		return a.rec, true
	}
	if a := n.sup.ended[k]; a != nil {
		return a.rec, true
	}
	return Attempt{}, false
}

// Placement returns the placement of job's share under epoch and the
// job's owner, for a job this node coordinates.
func (n *Node) Placement(job string, share int, epoch uint64) (p Placement, owner string, ok bool) {
	j := n.coord.jobs[job]
	if j == nil {
		return Placement{}, "", false
	}
	pl := j.byAttempt[shareEpoch{share, epoch}]
	if pl == nil {
		return Placement{}, "", false
	}
	return pl.Placement, j.spec.Owner, true
}

// SetBillOnlyReceipts changes Config.BillOnlyReceipts (node turns it off
// when it cannot sign receipts).
func (n *Node) SetBillOnlyReceipts(on bool) { n.cfg.BillOnlyReceipts = on }
