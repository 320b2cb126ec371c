package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/gpumesh/gpumesh/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Claims. A node that is about to coordinate a job it did not coordinate a
// moment ago — a successor taking over from a lost coordinator
// (succession.go), a coordinator resuming its jobs after a restart
// (resumeOwn), a node taking up a job named to it (audit.go) — first
// claims the job, at the term it will coordinate under, from the job's
// group and the next two members. A member grants a claim that outranks
// (market.Outranks: the higher term, then the greater peer ID) every
// claim it granted and every record it holds of the job, and remembers it
// on disk; from then on it refuses records of the job from coordinators
// the claim outranks (serveReplicate). Every answer carries the newest
// record the member holds.
//
// The claimant adopts the newest record among the answers and its own,
// and only if a majority of the job's group granted its claim (with
// itself; quorumOthers). So:
//
//   - Two claimants never both win one term: a member grants each claim
//     once, and two majorities of one group share a member.
//   - A claimant learns every decision that took effect: a decision takes
//     effect only once every replica of the record holds it (commit.go),
//     and the claim reaches the group the replicas are drawn from.
//   - A coordinator that a claim outranks can no longer commit anything —
//     the members that granted the claim refuse its records — so it
//     starts nothing once the claimant adopts; it lets the job go as soon
//     as a member answers it with the claimant's record.
//   - A job that ended stays ended: an answer that shows the end is the
//     newest (jobstate.Newer), and the claimant keeps it instead of
//     adopting.

const (
	kindClaim   = "job.claim"   // claimRequest → claimReply
	kindRelease = "job.release" // claimRequest → ack: the claimant gave up
	kindClaimed = "claimed"     // the reply frame of a claim
)

type claimRequest struct {
	Job  string `json:"job"`
	Term uint64 `json:"term"`
}

// claimReply is a member's answer to a claim.
type claimReply struct {
	Granted bool `json:"granted"`
	// Record is the newest record of the job the member holds, if any.
	Record *market.JobRecord `json:"record,omitempty"`
	// Term and Coordinator name, on a refusal, the claim or coordinator
	// that outranks the claimant, or the member itself when it coordinates
	// the job now.
	Term        uint64 `json:"term,omitempty"`
	Coordinator string `json:"coordinator,omitempty"`
}

// claims are the claims this node granted, by job; persisted in
// store.Claims. A claim goes once a record of its claimant (or one that
// outranks it) arrives, or its claimant gives up (kindRelease).
type claims struct {
	mu sync.Mutex
	by map[string]jobstate.Ballot
}

func newClaims() *claims { return &claims{by: map[string]jobstate.Ballot{}} }

func (c *claims) get(job string) (jobstate.Ballot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.by[job]
	return b, ok
}

// loadClaims reads the claims granted before a restart.
func (n *Node) loadClaims() error {
	return n.store.ForEach(store.Claims, func(job string, raw []byte) error {
		var b jobstate.Ballot
		if err := json.Unmarshal(raw, &b); err != nil || b.Term == 0 {
			n.log.Error("unreadable claim in the state file; skipped", "job", job, "err", err)
			return nil
		}
		n.claims.by[job] = b
		return nil
	})
}

// serveClaim answers a claim on a job from a would-be coordinator.
func (n *Node) serveClaim(ctx context.Context, from peer.ID, req claimRequest) (claimReply, error) {
	if err := market.ValidateJobID(req.Job); err != nil {
		return claimReply{}, api.Errorf(http.StatusBadRequest, "claim: %v", err)
	}
	if req.Term == 0 {
		return claimReply{}, api.Errorf(http.StatusBadRequest, "claim of %s: term 0", req.Job)
	}
	want := jobstate.Ballot{Term: req.Term, Coordinator: from.String()}
	var own market.JobRecord
	var mine bool
	if err := n.do(ctx, func() { own, mine = n.mk.Job(req.Job) }); err != nil {
		return claimReply{}, err
	}
	var reply claimReply
	if mine && jobstate.Settling(own) {
		// This node coordinates the job: it is not lost. (A claimant that
		// outranks it and reaches the rest of the group wins anyway; this
		// node then lets the job go when a member refuses its record.)
		reply.Record, reply.Term, reply.Coordinator = &own, own.Term, n.self
		return reply, nil
	}
	held, ok := n.view.Job(req.Job)
	if ok {
		reply.Record = &held
		if jobstate.Ended(held) && !jobstate.Settling(held) {
			return reply, nil // nothing to coordinate: the claimant keeps the end
		}
	}
	n.claims.mu.Lock()
	defer n.claims.mu.Unlock()
	top, promised := n.claims.by[req.Job]
	if promised && !n.claimantAlive(top) {
		promised, top = false, jobstate.Ballot{}
	}
	if ok && jobstate.BallotOf(held).Outranks(top) {
		top = jobstate.BallotOf(held)
	}
	if want != top && !want.Outranks(top) {
		reply.Term, reply.Coordinator = top.Term, top.Coordinator
		return reply, nil
	}
	if want != top {
		if err := n.storeApply([]store.Op{store.Put(store.Claims, req.Job, want)}); err != nil {
			return claimReply{}, fmt.Errorf("claim of %s not stored: %w", req.Job, err)
		}
		n.claims.by[req.Job] = want
	}
	reply.Granted = true
	return reply, nil
}

// claimantAlive reports whether a claim's claimant may still adopt the job:
// it is this node, or a member not seen dead or gone. A dead claimant's
// claim no longer holds the job's other coordinators back (it replays its
// own claim, from its disk, when it restarts).
func (n *Node) claimantAlive(b jobstate.Ballot) bool {
	id, err := peer.Decode(b.Coordinator)
	if err != nil {
		return false
	}
	if id == n.id {
		return true
	}
	m, ok := n.mesh.Member(id)
	return ok && m.State != mesh.StateDead && m.State != mesh.StateLeft
}

// claimOutranking returns the claim this node granted on rec's job that
// outranks rec's coordinator, if its claimant may still adopt the job.
func (n *Node) claimOutranking(rec market.JobRecord) (jobstate.Ballot, bool) {
	n.claims.mu.Lock()
	defer n.claims.mu.Unlock()
	b, ok := n.claims.by[rec.ID]
	if !ok || b.Coordinator == rec.Coordinator || !b.Outranks(jobstate.BallotOf(rec)) || !n.claimantAlive(b) {
		// A claim holds back the job's other coordinators, not its
		// claimant's own records of a lower term.
		return jobstate.Ballot{}, false
	}
	return b, true
}

// settleClaim drops the claim granted on rec's job once rec comes from its
// claimant or from a coordinator that outranks it.
func (n *Node) settleClaim(rec market.JobRecord) {
	n.claims.mu.Lock()
	defer n.claims.mu.Unlock()
	b, ok := n.claims.by[rec.ID]
	if !ok || b.Outranks(jobstate.BallotOf(rec)) {
		return
	}
	delete(n.claims.by, rec.ID)
	if err := n.storeApply([]store.Op{store.Delete(store.Claims, rec.ID)}); err != nil {
		n.log.Warn("cannot drop a settled claim", "job", rec.ID, "err", err)
	}
}

// claimOwn records this node's own claim as one it granted: a claimant
// is a member of the job's group too, and must refuse what its claim
// outranks from then on.
func (n *Node) claimOwn(job string, term uint64) {
	own := jobstate.Ballot{Term: term, Coordinator: n.self}
	n.claims.mu.Lock()
	defer n.claims.mu.Unlock()
	if b, ok := n.claims.by[job]; ok && !own.Outranks(b) {
		return
	}
	if err := n.storeApply([]store.Op{store.Put(store.Claims, job, own)}); err != nil {
		n.log.Warn("cannot store this node's claim", "job", job, "err", err)
		return
	}
	n.claims.by[job] = own
}

// serveRelease drops the claim from a claimant that gave up.
func (n *Node) serveRelease(from peer.ID, req claimRequest) {
	n.dropClaim(from, req)
}

// dropClaim drops the claim of from on req's job, if it is the one held.
func (n *Node) dropClaim(from peer.ID, req claimRequest) {
	n.claims.mu.Lock()
	defer n.claims.mu.Unlock()
	if b, ok := n.claims.by[req.Job]; ok && b == (jobstate.Ballot{Term: req.Term, Coordinator: from.String()}) {
		delete(n.claims.by, req.Job)
		if err := n.storeApply([]store.Op{store.Delete(store.Claims, req.Job)}); err != nil {
			n.log.Warn("cannot drop a released claim", "job", req.Job, "err", err)
		}
	}
}

// claimOutcome is what a claim found.
type claimOutcome struct {
	granted int // by members of the job's group
	reached int // members of the group that answered
	// newest is the newest record among the answers (zero if none).
	newest market.JobRecord
	// top is the claim or coordinator that outranks the claim, when a
	// member refused it for one (zero otherwise).
	top jobstate.Ballot
}

// claimWait bounds how long a claimant waits for the answers to a claim.
const claimWait = successorAsk

// claim asks the job's group (coordinators(job, R+1)) and the next two
// members, all at once, to grant this node the job at term; skip (a lost
// coordinator) is not asked.
func (n *Node) claim(job string, term uint64, skip peer.ID) claimOutcome {
	group := map[peer.ID]bool{}
	for _, id := range n.coordinators(job, n.cfg.Replicas+1) {
		group[id] = true
	}
	var ask []peer.ID
	for _, id := range n.coordinators(job, n.cfg.Replicas+3) {
		if id != n.id && id != skip {
			ask = append(ask, id)
		}
	}
	n.claimOwn(job, term)
	data, _ := json.Marshal(claimRequest{Job: job, Term: term})
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out claimOutcome
	)
	for _, id := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(n.ctx, claimWait)
			defer cancel()
			n.dialable(id)
			var r claimReply
			got := false
			err := n.direct.Ask(ctx, id, kindClaim, data, func(m gossip.Message) error {
				if m.Kind != kindClaimed || got {
					return fmt.Errorf("unexpected %q frame in a claim reply", m.Kind)
				}
				got = true
				return json.Unmarshal(m.Data, &r)
			})
			if err != nil || !got {
				if n.ctx.Err() == nil {
					n.log.Debug("claim not answered", "job", job, "member", id.ShortString(), "err", err)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if group[id] {
				out.reached++
				if r.Granted {
					out.granted++
				}
			}
			if r.Record != nil && r.Record.ID == job && (out.newest.ID == "" || jobstate.Newer(*r.Record, out.newest)) {
				out.newest = *r.Record
			}
			if !r.Granted && r.Term > 0 {
				if b := (jobstate.Ballot{Term: r.Term, Coordinator: r.Coordinator}); b.Outranks(out.top) {
					out.top = b
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// release tells the members asked in a claim that this node gave it up,
// so that its claim no longer holds the job's coordinator back. Best
// effort: a member that does not hear it drops the claim once this node
// is seen dead, or once a record that outranks it arrives.
func (n *Node) release(job string, term uint64, skip peer.ID) {
	n.dropClaim(n.id, claimRequest{Job: job, Term: term})
	data, _ := json.Marshal(claimRequest{Job: job, Term: term})
	var wg sync.WaitGroup
	for _, id := range n.coordinators(job, n.cfg.Replicas+3) {
		if id == n.id || id == skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(n.ctx, claimWait)
			defer cancel()
			_ = n.direct.Ask(ctx, id, kindRelease, data, func(gossip.Message) error { return nil })
		}()
	}
	wg.Wait()
}

// releaseLater releases a claim won but not used (the job was adopted by
// another path meanwhile), off the driver.
func (n *Node) releaseLater(job string, term uint64, skip peer.ID) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.release(job, term, skip)
	}()
}

// claimTries bounds how often a claimant raises its term past claims of
// claimants that died before they adopted.
const claimTries = 3

// claimResult says how a claim to adopt a job ended.
type claimResult int

const (
	claimWon         claimResult = iota // adopt the record returned
	claimLost                           // the job ended, or a live member coordinates or claims it
	claimUnreachable                    // too few of the group granted the claim: try again later
)

// claimToAdopt claims job for this node, starting at term, and returns the
// record to adopt and the term won. It gives up, having released its
// claim, when the newest record shows the job ended with nothing left to
// stop (the record is kept, so that this node never resumes the job
// either), when a live member other than skip coordinates or claims the
// job (claimLost), or when too few of the group grant the claim
// (claimUnreachable). own is the record this node holds; skip is a lost
// coordinator, not asked.
func (n *Node) claimToAdopt(own market.JobRecord, term uint64, skip peer.ID) (market.JobRecord, uint64, claimResult) {
	log := n.log.With("job", own.ID)
	lost := func(msg string, args ...any) (market.JobRecord, uint64, claimResult) {
		log.Info(msg, args...)
		n.release(own.ID, term, skip)
		return market.JobRecord{}, 0, claimLost
	}
	for try := 0; try < claimTries; try++ {
		out := n.claim(own.ID, term, skip)
		if n.ctx.Err() != nil {
			return market.JobRecord{}, 0, claimLost
		}
		rec := own
		if out.newest.ID != "" && jobstate.Newer(out.newest, rec) {
			rec = out.newest
		}
		if jobstate.Ended(rec) && !jobstate.Settling(rec) {
			n.keep(rec)
			return lost("job ended, as a member of its group holds; not taking it over", "state", rec.State, "coordinator", rec.Coordinator, "term", rec.Term)
		}
		// A job that ended with shares still stopping is taken over like
		// one that runs: its coordinator tells them to stop again and
		// settles their ends. Adopting it starts nothing (market.JobAdopted
		// places nothing for an ended job), and without it the shares
		// would show "stopping" for good.
		if c := rec.Coordinator; c != own.Coordinator && c != n.self && c != skip.String() && n.claimantAlive(jobstate.BallotOf(rec)) {
			n.hold(rec)
			return lost("job coordinated by a live member now; not taking it over", "coordinator", c, "term", rec.Term)
		}
		top := out.top
		if b := jobstate.BallotOf(rec); b.Outranks(top) {
			top = b
		}
		if top.Outranks(jobstate.Ballot{Term: term, Coordinator: n.self}) {
			if top.Coordinator != n.self && top.Coordinator != skip.String() && n.claimantAlive(top) {
				return lost("job claimed or coordinated at a higher term by a live member; not taking it over", "term", term, "by", top.Coordinator, "its_term", top.Term)
			}
			// A claimant that died before it adopted, the lost
			// coordinator's own later term, or this node's own earlier
			// claim: claim above it.
			term = top.Term + 1
			continue
		}
		if need := n.quorumOthers(); out.granted < need {
			log.Info("too few of the job's group granted the claim; not taking it over now", "term", term, "granted", out.granted, "reached", out.reached, "need", need)
			n.release(own.ID, term, skip)
			return market.JobRecord{}, 0, claimUnreachable
		}
		return rec, term, claimWon
	}
	return lost("claims of members that died kept outranking this node's; not taking the job over", "term", term)
}
