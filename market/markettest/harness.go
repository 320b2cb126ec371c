// Package markettest wires market Nodes together in one process for tests
// and benchmarks: an in-memory message queue with latency, loss,
// duplication and reordering, a virtual clock that ticks every node, a
// shared Book fed by the nodes' ads, and a simulated executor whose
// processes start, run and exit in virtual time. Everything each node's
// Ready produced is recorded for assertions.
//
// The harness is deterministic for a given Options.Seed: the same test
// replays the same interleaving. It is not safe for concurrent use.
package markettest

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// Options configure a Harness. The zero value is a fault-free mesh with
// 1ms latency and 10ms ticks.
type Options struct {
	// Seed seeds every random choice of the harness (latency jitter, loss,
	// duplication).
	Seed uint64
	// Start is the virtual time at which the harness starts. Default
	// 2026-01-01T00:00:00Z.
	Start time.Time
	// TickEvery is how often every node gets a Tick. Default 10ms.
	TickEvery time.Duration
	// Latency is the base one-way delay of a message; Jitter adds a uniform
	// random delay in [0, Jitter), which reorders messages. Default 1ms, 0.
	Latency, Jitter time.Duration
	// Loss and Duplicate are the probabilities that a message is dropped or
	// delivered twice (the copy with its own jitter).
	Loss, Duplicate float64
	// BookDelay is how long an ad takes to reach the shared Book (gossip).
	// Default 0: at once.
	BookDelay time.Duration
	// StopDelay is how long the simulated executor takes to stop a process.
	// Default 0.
	StopDelay time.Duration
	// Run says how an execution behaves once started: it exits by itself
	// with code after d, or (forever true) runs until stopped. Default:
	// runs until stopped.
	Run func(e market.Execution) (d time.Duration, code int, forever bool)
	// NoBook leaves Config.Book nil on every node: every request is
	// broadcast (the naive baseline).
	NoBook bool
}

// Harness is an in-memory mesh of market Nodes.
type Harness struct {
	opts  Options
	Now   time.Time
	rng   *rand.Rand
	peers map[string]*Peer
	order []string
	queue events
	seq   uint64
	// Book is the mesh's book as every node sees it.
	Book *market.Book
	// Errors counts what Step returned, by error text's sentinel.
	Errors map[string]int
	// Violations lists invariant breaks the harness itself observes (an
	// execution started on a card another process still holds).
	Violations []string
	// Delivered counts messages delivered; Sent counts messages sent.
	Delivered, Sent int
	// Trace, when not nil, receives a line for every delivery and drop.
	Trace func(line string)
	// OnReady, when set, sees every Ready before it is applied.
	OnReady func(p *Peer, rd market.Ready)
	// AfterStep, when set, is called after every Step of a node and the
	// handling of its Ready: a place to check invariants.
	AfterStep func(p *Peer)

	rules    []*Rule
	nextTick time.Time
	coords   map[string]string // job → the node it was submitted to
}

// Peer is one node in the harness and what its Readies produced.
type Peer struct {
	ID   string
	Node *market.Node
	// Down: the node neither ticks nor sends nor receives (crashed or
	// stopped); its state is kept and it may come back.
	Down bool
	// Cut: the node ticks but its messages are lost both ways (a network
	// partition).
	Cut bool
	// Everything the node's Readies produced, in order.
	Starts        []market.Execution
	Stops         []market.StopExecution
	Notifications []market.Notification
	// Jobs and Attempts hold the latest persisted record of each.
	Jobs     map[string]market.JobRecord
	Attempts map[AttemptKey]market.Attempt
	// TrackRecords holds the latest persisted track record of each
	// supplier the node has coordinated attempts on.
	TrackRecords map[string]market.TrackRecord
	// Running are the executions whose simulated process is alive.
	Running map[AttemptKey]*Process
}

// AttemptKey names one attempt of one share.
type AttemptKey struct {
	Job   string
	Share int
	Epoch uint64
}

// Process is a simulated process of the executor.
type Process struct {
	Exec    market.Execution
	Started time.Time
	exitAt  time.Time // zero: runs until stopped
}

// New returns an empty harness.
func New(opts Options) *Harness {
	if opts.Start.IsZero() {
		opts.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if opts.TickEvery <= 0 {
		opts.TickEvery = 10 * time.Millisecond
	}
	if opts.Latency <= 0 {
		opts.Latency = time.Millisecond
	}
	return &Harness{
		opts: opts, Now: opts.Start, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		peers: map[string]*Peer{}, Book: market.NewBook(), Errors: map[string]int{}, coords: map[string]string{},
		nextTick: opts.Start.Add(opts.TickEvery),
	}
}

// Add creates a node with cfg (cfg.Book is set to the harness's book) and
// publishes its first ad.
func (h *Harness) Add(cfg market.Config) (*Peer, error) {
	if h.peers[cfg.ID] != nil {
		return nil, fmt.Errorf("markettest: node %s exists", cfg.ID)
	}
	if !h.opts.NoBook {
		cfg.Book = h.Book
	}
	n, err := market.New(cfg)
	if err != nil {
		return nil, err
	}
	p := &Peer{ID: cfg.ID, Node: n, Jobs: map[string]market.JobRecord{}, Attempts: map[AttemptKey]market.Attempt{},
		TrackRecords: map[string]market.TrackRecord{}, Running: map[AttemptKey]*Process{}}
	h.peers[cfg.ID] = p
	h.order = append(h.order, cfg.ID)
	h.drain(p)
	return p, nil
}

// MustAdd is Add that panics on error, for tests.
func (h *Harness) MustAdd(cfg market.Config) *Peer {
	p, err := h.Add(cfg)
	if err != nil {
		panic(err)
	}
	return p
}

// MustAddSupplier adds node id with the default config and the simulated
// cards of spec ("a100-80g:2", as MustCards), for tests.
func (h *Harness) MustAddSupplier(id, spec string) *Peer {
	cfg := market.DefaultConfig(id)
	cfg.Cards = MustCards(id, spec)
	return h.MustAdd(cfg)
}

// Peer returns the node with id, or nil.
func (h *Harness) Peer(id string) *Peer { return h.peers[id] }

// Peers returns every node in the order added.
func (h *Harness) Peers() []*Peer {
	out := make([]*Peer, len(h.order))
	for i, id := range h.order {
		out[i] = h.peers[id]
	}
	return out
}

// Members returns every node ID in the order added.
func (h *Harness) Members() []string { return slices.Clone(h.order) }

// Step applies ev to node id now and handles its Ready. It returns Step's
// error.
func (h *Harness) Step(id string, ev market.Event) error {
	p := h.peers[id]
	if p == nil {
		return fmt.Errorf("markettest: no node %s", id)
	}
	err := p.Node.Step(ev)
	h.count(err)
	h.drain(p)
	return err
}

// Submit hands spec to the node that coordinates it (HRW over every node)
// and returns that node's ID.
func (h *Harness) Submit(spec market.JobSpec) (string, error) {
	coord := market.Coordinators(spec.ID, h.order, 1)[0]
	return coord, h.SubmitAt(coord, spec)
}

// SubmitAt hands spec to node coord, which coordinates it from then on.
func (h *Harness) SubmitAt(coord string, spec market.JobSpec) error {
	if h.peers[coord] == nil {
		return fmt.Errorf("markettest: no node %s", coord)
	}
	h.coords[spec.ID] = coord
	return h.Step(coord, market.JobSubmitted{Now: h.Now, Spec: spec})
}

// Adopt makes node the coordinator of the job in rec (a replica of its
// record) under term, as a successor does when the coordinator is gone.
func (h *Harness) Adopt(node string, rec market.JobRecord, term uint64) error {
	if h.peers[node] == nil {
		return fmt.Errorf("markettest: no node %s", node)
	}
	h.coords[rec.ID] = node
	return h.Step(node, market.JobAdopted{Now: h.Now, Record: rec, Term: term})
}

// Coordinator returns the ID of the node that coordinates job: where it
// was submitted, or else the top HRW member.
func (h *Harness) Coordinator(job string) string {
	if c, ok := h.coords[job]; ok {
		return c
	}
	return market.Coordinators(job, h.order, 1)[0]
}

// Job returns the job's record from its coordinator.
func (h *Harness) Job(id string) (market.JobRecord, bool) {
	return h.peers[h.Coordinator(id)].Node.Job(id)
}

// LiveCards counts the cards of a job's running placements.
func LiveCards(r market.JobRecord) int {
	n := 0
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning {
			n += len(p.Cards)
		}
	}
	return n
}

func (h *Harness) count(err error) {
	if err == nil {
		return
	}
	for _, s := range []error{market.ErrStale, market.ErrUnknownJob, market.ErrRefused, market.ErrJobExists, market.ErrJobEnded,
		market.ErrNotElastic, market.ErrBadMessage, market.ErrBadEvent, market.ErrInvalidSpec} {
		if errors.Is(err, s) {
			h.Errors[s.Error()]++
			return
		}
	}
	h.Errors[err.Error()]++
}

// drain handles p's Ready until it has none.
func (h *Harness) drain(p *Peer) {
	if h.AfterStep != nil {
		defer h.AfterStep(p)
	}
	for p.Node.HasReady() {
		rd := p.Node.Ready()
		if h.OnReady != nil {
			h.OnReady(p, rd)
		}
		for _, j := range rd.Jobs {
			p.Jobs[j.ID] = j
		}
		for _, a := range rd.Attempts {
			k := AttemptKey{a.Job, a.Share, a.Epoch}
			if a.State == market.AttemptClosed {
				delete(p.Attempts, k)
			} else {
				p.Attempts[k] = a
			}
		}
		for _, node := range rd.ForgetTrackRecords {
			delete(p.TrackRecords, node)
		}
		for _, r := range rd.TrackRecords {
			p.TrackRecords[r.Node] = r
		}
		p.Notifications = append(p.Notifications, rd.Notifications...)
		for _, m := range rd.Messages {
			h.send(p, m)
		}
		if rd.Ad != nil {
			ad := *rd.Ad
			if h.opts.BookDelay > 0 {
				h.push(&item{at: h.Now.Add(h.opts.BookDelay), ad: &ad})
			} else {
				h.Book.Put(ad.Node, ad.Offers)
			}
		}
		p.Node.Advance(rd)
		for _, s := range rd.Stop {
			p.Stops = append(p.Stops, s)
			k := AttemptKey{s.Job, s.Share, s.Epoch}
			if proc := p.Running[k]; proc != nil {
				proc.exitAt = h.Now.Add(h.opts.StopDelay)
				h.push(&item{at: proc.exitAt, node: p.ID, exit: &k, code: -1})
			}
		}
		for _, e := range rd.Start {
			h.startProcess(p, e)
		}
	}
}

// startProcess runs an execution in the simulated executor, checking that
// no other process holds its cards.
func (h *Harness) startProcess(p *Peer, e market.Execution) {
	p.Starts = append(p.Starts, e)
	k := AttemptKey{e.Job, e.Share, e.Epoch}
	for _, other := range p.Running {
		for _, c := range e.Cards {
			if slices.Contains(other.Exec.Cards, c) {
				h.Violations = append(h.Violations, fmt.Sprintf("%v %s: card %s started for %s share %d epoch %d while %s share %d epoch %d still runs on it",
					h.Now.Sub(h.opts.Start), p.ID, c, e.Job, e.Share, e.Epoch, other.Exec.Job, other.Exec.Share, other.Exec.Epoch))
			}
		}
	}
	proc := &Process{Exec: e, Started: h.Now}
	p.Running[k] = proc
	h.count(p.Node.Step(market.ExecutionStarted{Now: h.Now, Job: e.Job, Share: e.Share, Epoch: e.Epoch}))
	if h.opts.Run != nil {
		if d, code, forever := h.opts.Run(e); !forever {
			proc.exitAt = h.Now.Add(d)
			h.push(&item{at: proc.exitAt, node: p.ID, exit: &k, code: code})
		}
	}
}

// Exit makes the process of an attempt exit with code now, as if it ended
// by itself.
func (h *Harness) Exit(node string, k AttemptKey, code int) error {
	return h.ExitWith(node, k, code, "")
}

// ExitWith is Exit with the runner's reason (ExecutionExited.Reason), as a
// node reports a process that did not start.
func (h *Harness) ExitWith(node string, k AttemptKey, code int, reason string) error {
	return h.ExitWithOutputs(node, k, code, reason, "")
}

// ExitWithOutputs is ExitWith for a runner that keeps what the attempt
// left in its working directory: outputs is that tree's manifest digest.
func (h *Harness) ExitWithOutputs(node string, k AttemptKey, code int, reason, outputs string) error {
	p := h.peers[node]
	if p == nil || p.Running[k] == nil {
		return fmt.Errorf("markettest: %s runs no %+v", node, k)
	}
	h.exitProcess(p, k, code, reason, outputs)
	return nil
}

func (h *Harness) exitProcess(p *Peer, k AttemptKey, code int, reason, outputs string) {
	h.endProcess(p, k, market.ExecutionExited{Now: h.Now, Job: k.Job, Share: k.Share, Epoch: k.Epoch, ExitCode: code, Reason: reason, Outputs: outputs})
}

// NotStarted ends an attempt as a node does whose image could not be
// readied (ExecutionExited.NotStarted), with its reason.
func (h *Harness) NotStarted(node string, k AttemptKey, reason string) error {
	p := h.peers[node]
	if p == nil || p.Running[k] == nil {
		return fmt.Errorf("markettest: %s runs no %+v", node, k)
	}
	h.endProcess(p, k, market.ExecutionExited{Now: h.Now, Job: k.Job, Share: k.Share, Epoch: k.Epoch, ExitCode: 127, Reason: reason, NotStarted: true})
	return nil
}

func (h *Harness) endProcess(p *Peer, k AttemptKey, ev market.ExecutionExited) {
	if p.Running[k] == nil {
		return
	}
	delete(p.Running, k)
	h.count(p.Node.Step(ev))
	h.drain(p)
}

// Rule matches messages in flight and acts on them: drop or delay.
type Rule struct {
	// Match selects the messages the rule applies to (a broadcast is
	// matched once per receiver, with To still "").
	Match func(m market.Message) bool
	// Drop drops a matching message; otherwise Delay is added to it.
	Drop  bool
	Delay time.Duration
	// Count is how many messages the rule applies to; 0 means all.
	Count int
	used  int
}

// AddRule installs r for the messages sent from now on.
func (h *Harness) AddRule(r *Rule) { h.rules = append(h.rules, r) }

// ClearRules removes every rule.
func (h *Harness) ClearRules() { h.rules = nil }

// SetFaults changes the loss and duplication probabilities and the jitter.
func (h *Harness) SetFaults(loss, dup float64, jitter time.Duration) {
	h.opts.Loss, h.opts.Duplicate, h.opts.Jitter = loss, dup, jitter
}

func (h *Harness) send(from *Peer, m market.Message) {
	h.Sent++
	if m.To == market.Broadcast { // every other node gets it, To still ""
		for _, id := range h.order {
			if id != from.ID {
				h.enqueue(m, id)
			}
		}
		return
	}
	h.enqueue(m, m.To)
}

func (h *Harness) enqueue(m market.Message, to string) {
	delay := h.opts.Latency
	for _, r := range h.rules {
		if (r.Count == 0 || r.used < r.Count) && r.Match(m) {
			r.used++
			if r.Drop {
				if h.Trace != nil {
					h.trace("drop %s", describeTo(m, to))
				}
				return
			}
			delay += r.Delay
		}
	}
	if h.opts.Loss > 0 && h.rng.Float64() < h.opts.Loss {
		return
	}
	copies := 1
	if h.opts.Duplicate > 0 && h.rng.Float64() < h.opts.Duplicate {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		d := delay
		if h.opts.Jitter > 0 {
			d += time.Duration(h.rng.Int64N(int64(h.opts.Jitter)))
		}
		h.push(&item{at: h.Now.Add(d), msg: &m, node: to})
	}
}

func (h *Harness) trace(format string, args ...any) {
	if h.Trace != nil {
		h.Trace(fmt.Sprintf(format, args...))
	}
}

// SetDown stops a node (down) or lets it go on. A down node neither ticks
// nor exchanges messages; its processes keep running.
func (h *Harness) SetDown(id string, down bool) { h.peers[id].Down = down }

// SetCut cuts a node off the network or heals it. A cut node ticks (so it
// can fence itself) but every message to or from it is lost.
func (h *Harness) SetCut(id string, cut bool) { h.peers[id].Cut = cut }

// PeerLost tells observer that node is gone (a hint).
func (h *Harness) PeerLost(observer, node string) error {
	return h.Step(observer, market.PeerLost{Now: h.Now, Node: node})
}

// SetCards replaces a node's cards (health changes, cards disappearing).
func (h *Harness) SetCards(id string, cards []device.Card) error {
	return h.Step(id, market.CardsChanged{Now: h.Now, Cards: cards})
}

// Pending returns the number of messages and timers in flight.
func (h *Harness) Pending() int { return h.queue.Len() }

// RunFor lets d of virtual time pass: messages are delivered when due and
// every node that is up ticks every TickEvery.
func (h *Harness) RunFor(d time.Duration) { h.runUntil(h.Now.Add(d), nil) }

// RunUntil runs until cond holds (checked after every delivery and tick)
// or limit of virtual time passes, and reports whether cond held.
func (h *Harness) RunUntil(cond func() bool, limit time.Duration) bool {
	return h.runUntil(h.Now.Add(limit), cond)
}

func (h *Harness) runUntil(end time.Time, cond func() bool) bool {
	if cond != nil && cond() {
		return true
	}
	for {
		next := h.nextTick
		fromQueue := h.queue.Len() > 0 && !h.queue[0].at.After(next)
		if fromQueue {
			next = h.queue[0].at
		}
		if next.After(end) {
			h.Now = end
			return cond != nil && cond()
		}
		h.Now = next
		if fromQueue {
			h.deliver(heap.Pop(&h.queue).(*item))
		} else {
			h.nextTick = h.nextTick.Add(h.opts.TickEvery)
			for _, id := range h.order {
				if p := h.peers[id]; !p.Down {
					h.count(p.Node.Step(market.Tick{Now: h.Now}))
					h.drain(p)
				}
			}
		}
		if cond != nil && cond() {
			return true
		}
	}
}

func (h *Harness) deliver(it *item) {
	switch {
	case it.ad != nil:
		h.Book.Put(it.ad.Node, it.ad.Offers)
	case it.exit != nil:
		p := h.peers[it.node]
		if proc := p.Running[*it.exit]; proc != nil && proc.exitAt.Equal(it.at) {
			h.exitProcess(p, *it.exit, it.code, "", "")
		}
	case it.msg != nil:
		m := *it.msg
		from, to := h.peers[m.From], h.peers[it.node]
		if to == nil || to.Down || to.Cut || (from != nil && (from.Down || from.Cut)) {
			if h.Trace != nil {
				h.trace("lost %s", describeTo(m, it.node))
			}
			return
		}
		h.Delivered++
		if h.Trace != nil {
			h.trace("%s", describeTo(m, it.node))
		}
		err := to.Node.Step(market.MessageReceived{Now: h.Now, Message: m})
		h.count(err)
		h.drain(to)
	}
}

type item struct {
	at   time.Time
	seq  uint64
	msg  *market.Message
	ad   *market.Ad
	node string
	exit *AttemptKey
	code int
}

func (h *Harness) push(it *item) {
	h.seq++
	it.seq = h.seq
	heap.Push(&h.queue, it)
}

type events []*item

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *events) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
