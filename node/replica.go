package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Replication and succession. A job's record lives on its coordinator and
// on the next R-1 members of its HRW list (Config.Replicas). The coordinator
// sends the record to them before it acknowledges the submission (a
// submission whose replicas do not all confirm within replicaAckWait is
// answered 503: submit it again with the same ID) and again after every
// change. When the coordinator is lost, the first live member
// of the job's HRW list that holds a replica adopts the job under a higher
// term (market.JobAdopted); runners follow the higher term. A coordinator
// that comes back yields to a higher or equal term held elsewhere.

const (
	kindReplicate  = "job.replicate" // record → ack, or superseded
	kindAck        = "ack"
	kindSuperseded = "superseded"    // the record the replica holder knows outranks the one sent
	replicateAfter = 2 * time.Second // per call
	resumeWait     = 3 * time.Second // for peers before resuming own jobs
)

// replicator batches records waiting to go to their replicas, and
// remembers the jobs whose last replication missed a replica.
type replicator struct {
	mu      sync.Mutex
	pending map[string]market.JobRecord
	failed  map[string]bool
	wake    chan struct{}
}

func newReplicator() *replicator {
	return &replicator{pending: map[string]market.JobRecord{}, failed: map[string]bool{}, wake: make(chan struct{}, 1)}
}

func (r *replicator) enqueue(rec market.JobRecord) {
	r.mu.Lock()
	r.pending[rec.ID] = rec
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *replicator) take() []market.JobRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]market.JobRecord, 0, len(r.pending))
	for _, rec := range r.pending {
		out = append(out, rec)
	}
	r.pending = map[string]market.JobRecord{}
	return out
}

func (r *replicator) missed(job string) {
	r.mu.Lock()
	r.failed[job] = true
	r.mu.Unlock()
}

func (r *replicator) takeFailed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.failed))
	for id := range r.failed {
		out = append(out, id)
	}
	clear(r.failed)
	return out
}

// replicaRetry is how often records that missed a replica are sent again:
// a replica cut off by a partition (the old coordinator among them, which
// yields when it gets a record of a higher term) gets the record once the
// partition heals, even if the job does not change again.
const replicaRetry = time.Second

// replicateLoop sends queued records to their replicas until the node
// closes, and sends again, every replicaRetry, the records of the jobs it
// still coordinates whose last replication missed a replica.
func (n *Node) replicateLoop() {
	defer n.wg.Done()
	retry := time.NewTicker(replicaRetry)
	defer retry.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-retry.C:
			for _, id := range n.repl.takeFailed() {
				if rec, ok := n.view.job(id); ok && rec.Coordinator == n.id.String() && settling(rec) {
					n.repl.enqueue(rec)
				}
			}
		case <-n.repl.wake:
			recs := n.repl.take()
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for _, rec := range recs {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					if n.replicate(n.ctx, rec) < len(n.replicaTargets(rec.ID)) {
						n.repl.missed(rec.ID)
					}
				}()
			}
			wg.Wait()
		}
	}
}

// replicaTargets are the members after this node in the job's HRW list.
func (n *Node) replicaTargets(job string) []peer.ID {
	var out []peer.ID
	for _, id := range n.coordinators(job, n.cfg.Replicas) {
		if id != n.id {
			out = append(out, id)
		}
	}
	return out
}

// replicaAckWait bounds how long a submission waits for its record to
// reach every replica (replicateForAck) before it is answered 503.
// replicaAckPause is the pause before a replica that failed at once (a
// refused dial, a reset stream) is asked again within that time.
const (
	replicaAckWait  = 3 * time.Second
	replicaAckPause = 100 * time.Millisecond
)

// replicateForAck sends rec to the job's replicas — the members after this
// node in its HRW list when the call starts; fewer when the mesh has fewer
// coordinator-eligible members than Config.Replicas — and asks again those
// that did not confirm, until every one has or replicaAckWait (or ctx) has
// passed. It returns the replicas that never confirmed.
func (n *Node) replicateForAck(ctx context.Context, rec market.JobRecord) []peer.ID {
	missing := n.replicaTargets(rec.ID)
	ctx, cancel := context.WithTimeout(ctx, replicaAckWait)
	defer cancel()
	for len(missing) > 0 {
		acked := n.replicateTo(ctx, rec, missing)
		missing = slices.DeleteFunc(missing, func(t peer.ID) bool { return acked[t] })
		if len(missing) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return missing
		case <-time.After(replicaAckPause):
		}
	}
	return missing
}

// replicate sends rec to its replicas and returns how many acknowledged.
func (n *Node) replicate(ctx context.Context, rec market.JobRecord) int {
	return len(n.replicateTo(ctx, rec, n.replicaTargets(rec.ID)))
}

// replicateTo sends rec to targets, at once, each call bounded by
// replicateAfter, and returns those that acknowledged.
func (n *Node) replicateTo(ctx context.Context, rec market.JobRecord, targets []peer.ID) map[peer.ID]bool {
	acked := map[peer.ID]bool{}
	data, err := json.Marshal(rec)
	if err != nil {
		n.log.Error("cannot encode a job record", "job", rec.ID, "err", err)
		return acked
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, replicateAfter)
			defer cancel()
			n.dialable(t)
			err := n.direct.Call(cctx, t, kindReplicate, data, func(m gossip.Message) error {
				switch m.Kind {
				case kindAck:
					mu.Lock()
					acked[t] = true
					mu.Unlock()
					return nil
				case kindSuperseded:
					return n.onSuperseding(t, rec, m.Data)
				}
				return fmt.Errorf("unexpected %q frame", m.Kind)
			})
			if err != nil && n.ctx.Err() == nil {
				n.log.Debug("replica not updated", "job", rec.ID, "replica", t.ShortString(), "err", err)
			}
		}()
	}
	wg.Wait()
	return acked
}

// serveReplicate stores a replica sent by the job's coordinator. When this
// node knows a coordinator that outranks the sender — itself, or a live
// member whose record it holds — it stores nothing and returns that
// record: the sender lets the job go (onSuperseding). Two coordinators of
// one job meet this way at the replicas they share, within one change of
// the outranked one's record, even when no runner serves them both.
func (n *Node) serveReplicate(from peer.ID, data []byte) (*market.JobRecord, error) {
	var rec market.JobRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "replica: %v", err)
	}
	if err := market.ValidateJobID(rec.ID); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "replica: %v", err)
	}
	if rec.Coordinator != from.String() {
		return nil, api.Errorf(http.StatusForbidden, "replica of %s sent by %s, not its coordinator %s", rec.ID, from.ShortString(), rec.Coordinator)
	}
	if top, ok := n.outranking(rec); ok {
		n.log.Info("refused a replica from an outranked coordinator", "job", rec.ID, "from", from.ShortString(), "term", rec.Term, "coordinator", top.Coordinator, "its_term", top.Term)
		return &top, nil
	}
	n.postWait(func() { n.yieldTo(rec) })
	if !n.view.putNewer(rec) {
		if held, ok := n.view.job(rec.ID); ok {
			n.log.Debug("replica not newer than the record held; kept that", "job", rec.ID, "term", rec.Term, "version", rec.Version,
				"held_coordinator", held.Coordinator, "held_term", held.Term, "held_version", held.Version, "held_state", held.State)
		}
		return nil, nil // we hold as new a record already
	}
	if err := n.storeApply([]store.Op{store.Put(store.Jobs, rec.ID, rec)}); err != nil {
		return nil, fmt.Errorf("replica of %s not stored: %w", rec.ID, err)
	}
	return nil, nil
}

// outranking returns the record of a coordinator that outranks rec's and
// still coordinates the job, as far as this node knows: this node itself,
// or a live member whose record it holds.
func (n *Node) outranking(rec market.JobRecord) (market.JobRecord, bool) {
	var own market.JobRecord
	var mine bool
	if err := n.do(n.ctx, func() { own, mine = n.mk.Job(rec.ID) }); err != nil {
		return market.JobRecord{}, false
	}
	if mine && settling(own) && market.Outranks(own.Term, n.id.String(), rec.Term, rec.Coordinator) {
		return own, true
	}
	held, ok := n.view.job(rec.ID)
	if ok && ended(held) && !ended(rec) {
		return held, true // the job ended: whoever sends it going resumed a stale copy
	}
	if !ok || !settling(held) || held.Coordinator == n.id.String() || !market.Outranks(held.Term, held.Coordinator, rec.Term, rec.Coordinator) {
		return market.JobRecord{}, false
	}
	c, err := peer.Decode(held.Coordinator)
	if err != nil {
		return market.JobRecord{}, false
	}
	if m, ok := n.mesh.Member(c); !ok || m.State != mesh.StateAlive {
		return market.JobRecord{}, false // its successor is this node's or another's to find
	}
	return held, true
}

// onSuperseding handles a replica holder's answer that a coordinator
// outranking this one holds the job: this node lets it go.
func (n *Node) onSuperseding(from peer.ID, sent market.JobRecord, data []byte) error {
	var top market.JobRecord
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("superseding record: %v", err)
	}
	if top.ID == sent.ID && ended(top) && !ended(sent) {
		// The job ended under another coordinator while this one ran a
		// stale copy (it resumed after a restart without hearing of it).
		n.log.Warn("a replica holder says the job ended; stopping this copy", "job", sent.ID, "replica", from.ShortString(), "state", top.State, "coordinator", top.Coordinator)
		n.postWait(func() { n.endCopy(top) })
		return nil
	}
	if top.ID != sent.ID || !market.Outranks(top.Term, top.Coordinator, sent.Term, sent.Coordinator) {
		return fmt.Errorf("superseding record of %s at term %d does not outrank term %d", top.ID, top.Term, sent.Term)
	}
	n.log.Info("a replica holder knows a coordinator that outranks this one", "job", sent.ID, "replica", from.ShortString(), "coordinator", top.Coordinator, "term", top.Term)
	n.view.putNewer(top)
	n.postWait(func() { n.yieldTo(top) })
	return nil
}

// endCopy stops this node's copy of a job that ended elsewhere: it ends
// here as it ended there (market.JobEnded), its attempts stop. It runs on
// the driver.
func (n *Node) endCopy(end market.JobRecord) {
	if own, mine := n.mk.Job(end.ID); mine && !own.State.Terminal() {
		n.step(market.JobEnded{Now: time.Now(), Record: end})
	}
}

// yieldTo lets a job go that this node still coordinates at a lower term
// than rec, a replica sent by the job's coordinator: this node was cut
// off while a successor took the job over, and the runners that would
// tell it so (market.Superseded) may have ended or never hear of it. It
// runs on the driver.
func (n *Node) yieldTo(rec market.JobRecord) {
	own, mine := n.mk.Job(rec.ID)
	if !mine || !settling(own) || !market.Outranks(rec.Term, rec.Coordinator, own.Term, n.id.String()) {
		return
	}
	n.log.Info("a coordinator of a higher term holds the job; letting it go", "job", rec.ID, "term", own.Term, "coordinator", rec.Coordinator, "its_term", rec.Term)
	// The job's attempts that run on this node follow the new coordinator
	// rather than stop (market: onSuperseded).
	n.step(market.MessageReceived{Now: time.Now(), Message: market.Message{
		From: rec.Coordinator, To: n.id.String(),
		Payload: &market.Superseded{Job: rec.ID, Term: rec.Term, Coordinator: rec.Coordinator},
	}})
}

// resumeOwn adopts again the jobs this node coordinated before it
// restarted — unless the job moved on or ended while it was away. Its
// record may be stale: a successor may have taken the job over, placed it
// again, even cancelled it. So before it resumes a job it asks the job's
// coordinator group (and the next few members, who hold the records of
// successors chosen while this node was gone), and waits until a majority
// of the group has answered: what a majority has not seen cannot have
// been acknowledged by a successor (it replicates before it acts).
func (n *Node) resumeOwn(recs []market.JobRecord) {
	defer n.wg.Done()
	deadline := time.Now().Add(resumeWait)
	for n.mesh.NumAlive() < 2 && time.Now().Before(deadline) {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, rec := range recs {
		var elsewhere market.JobRecord
		for {
			best, reached := n.newestElsewhere(rec)
			if need := n.quorumOthers(); reached >= need {
				elsewhere = best
				break
			}
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		switch {
		case elsewhere.ID == "":
		case elsewhere.State.Terminal() && elsewhere.State != market.JobMoved:
			n.log.Info("job ended while this node was away; keeping its record", "job", rec.ID, "state", elsewhere.State, "coordinator", elsewhere.Coordinator)
			n.keep(elsewhere)
			continue
		case elsewhere.Coordinator != n.id.String() && elsewhere.Term >= rec.Term:
			n.log.Info("job moved on while this node was away; keeping a replica", "job", rec.ID, "coordinator", elsewhere.Coordinator, "term", elsewhere.Term)
			n.keep(elsewhere)
			continue
		}
		// A successor that took the job over meanwhile chose a term of at
		// most rec.Term+1+Replicas (adoptUnlessHeld); resuming above it
		// means the two never share a term, so never an epoch range, and
		// the successor yields when they meet.
		term := rec.Term + 2 + uint64(n.cfg.Replicas)
		n.postWait(func() {
			if _, mine := n.mk.Job(rec.ID); mine {
				return
			}
			if err := n.mk.Step(market.JobAdopted{Now: time.Now(), Record: rec, Term: term}); err != nil {
				n.log.Warn("cannot resume job", "job", rec.ID, "err", err)
				return
			}
			n.log.Info("resumed job after restart", "job", rec.ID, "term", term)
		})
	}
	// After the resumptions: an attempt of a job this node coordinates
	// itself is reported to its own market, which must hold the job.
	n.postWait(n.reportLost)
}

// keep stores a record learnt from another member in place of this node's
// own, in the view and on disk, so that a later restart does not resume
// the job either.
func (n *Node) keep(rec market.JobRecord) {
	n.view.putNewer(rec)
	if err := n.storeApply([]store.Op{store.Put(store.Jobs, rec.ID, rec)}); err != nil {
		n.log.Warn("cannot store a job's record", "job", rec.ID, "err", err)
	}
}

// reportLost tells the coordinators of the attempts that died with this
// node's last run that they ended, so that they place them again at once
// rather than after a lease's silence. It is best effort: a coordinator
// that changed meanwhile, or a message lost, leaves the lease to decide.
// It runs on the driver.
func (n *Node) reportLost() {
	var msgs []market.Message
	for _, a := range n.lostAttempts {
		msgs = append(msgs, market.Message{From: n.id.String(), To: a.Coordinator, Payload: &market.AttemptEnded{
			Job: a.Job, Share: a.Share, Epoch: a.Epoch, Cause: market.CauseFenced, ExitCode: -1, CardSeconds: a.CardSeconds,
		}})
	}
	n.lostAttempts = nil
	var out []market.Message
	for _, m := range msgs {
		if m.To == n.id.String() {
			n.step(market.MessageReceived{Now: time.Now(), Message: m})
			continue
		}
		out = append(out, m)
	}
	n.send(out)
}

// newestElsewhere asks the job's coordinator group and the next two
// members, all at once, for their record, and returns the newest and how
// many answered.
func (n *Node) newestElsewhere(rec market.JobRecord) (best market.JobRecord, reached int) {
	var ask []peer.ID
	for _, id := range n.coordinators(rec.ID, n.cfg.Replicas+3) {
		if id != n.id {
			ask = append(ask, id)
		}
	}
	best, reached, _ = n.askRecords(rec.ID, ask, replicateAfter, "")
	return best, reached
}

// answered reports whether a call's error came from the peer (it is
// reachable) rather than from trying to reach it.
func answered(err error) bool {
	var he *api.HTTPError
	return err == nil || errors.Is(err, gossip.ErrRemote) || errors.As(err, &he)
}

// settling reports whether a job still needs a coordinator: it has not
// ended, or it ended (cancelled, say) while attempts were still stopping,
// whose ends must be heard and billed.
func settling(rec market.JobRecord) bool {
	return rec.State != market.JobMoved && (!rec.State.Terminal() || len(rec.Live()) > 0)
}

// livePlacements describes a record's live placements for a log line:
// share/epoch@node:state each.
func livePlacements(rec market.JobRecord) string {
	var parts []string
	for _, p := range rec.Live() {
		node := p.Node
		if id, err := peer.Decode(p.Node); err == nil {
			node = id.ShortString()
		}
		parts = append(parts, fmt.Sprintf("%d/%d@%s:%s", p.Share, p.Epoch, node, p.State))
	}
	return strings.Join(parts, " ")
}
