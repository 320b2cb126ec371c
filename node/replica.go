package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/jobstate"
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

// replicaRetry is how often records that missed a replica are sent again:
// a replica cut off by a partition (the old coordinator among them, which
// yields when it gets a record of a higher term) gets the record once the
// partition heals, even if the job does not change again; and a decision
// waiting for its record to commit (commit.go) goes out soon after a
// replica that refused a dial for a moment answers again.
const replicaRetry = 250 * time.Millisecond

// replicaBatches bounds the batches of records in flight at once (each
// one call per replica it goes to), and maxReplicaBatch the records of a
// batch: a record waits at most for the batches before it to be answered,
// and goes with every record queued by then.
const (
	replicaBatches  = 4
	maxReplicaBatch = 64
)

// replicateLoop sends queued records to their replicas until the node
// closes — each job's newest, one at a time per job, the records of many
// jobs together in one call per replica (replicateMany), at most
// replicaBatches calls' worth at once — and sends again, every
// replicaRetry, the records of the jobs it still coordinates whose last
// replication missed a replica. A record every replica acknowledged
// commits (commit.go). Under load the records that queue while the
// batches in flight are answered go together in the next: one stream and
// one write at each replica for many jobs.
func (n *Node) replicateLoop() {
	defer n.wg.Done()
	retry := time.NewTicker(replicaRetry)
	defer retry.Stop()
	slots := make(chan struct{}, replicaBatches)
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-retry.C:
			for _, id := range n.repl.TakeFailed() {
				// A job that ended is sent again too while an owner's
				// change (a cancel) waits for it: its replicas may
				// change meanwhile (a lost one leaves the list).
				if rec, ok := n.view.Job(id); ok && rec.Coordinator == n.self && (jobstate.Settling(rec) || n.gate.Awaited(id)) {
					n.repl.Enqueue(rec)
				} else {
					n.gate.Drop(id)
				}
			}
			n.dropStaleHeld(now)
		case <-n.repl.Wake(): // a record queued, or a replication ended
		}
		for len(slots) < cap(slots) {
			recs := n.repl.Take(maxReplicaBatch)
			if len(recs) == 0 {
				break
			}
			slots <- struct{}{}
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				defer func() { <-slots; n.repl.Nudge() }()
				acked := n.replicateMany(n.ctx, recs)
				for i, rec := range recs {
					if acked[i] {
						n.committed(rec)
					} else {
						n.repl.Missed(rec.ID)
					}
					n.repl.Done(rec.ID) // after: as when each job had a call of its own
				}
			}()
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
const replicaAckWait = 3 * time.Second

// replicateForAck waits until rec's job's replicas — the members after
// this node in its HRW list; fewer when the mesh has fewer
// coordinator-eligible members than Config.Replicas — hold rec or a later
// record of the job (it commits), or replicaAckWait (or ctx) passes. The
// replicate loop sends it, with the records of every other job in
// flight, and again every replicaRetry to a replica that missed it;
// waiting for its commit rather than sending rec once more here halves
// what a submission costs the replicas. It returns the replicas that did
// not confirm.
func (n *Node) replicateForAck(ctx context.Context, rec market.JobRecord) []peer.ID {
	need := jobstate.MarkOf(rec)
	committed := n.gate.Await(rec.ID, need) // persist queued rec (or a later record) for the loop
	ctx, cancel := context.WithTimeout(ctx, replicaAckWait)
	defer cancel()
	select {
	case <-committed:
		return nil
	case <-ctx.Done():
	}
	n.gate.Unwait(rec.ID, committed)
	var missing []peer.ID
	for _, t := range n.replicaTargets(rec.ID) {
		if !n.repl.Holds(rec.ID, t, need) {
			missing = append(missing, t)
		}
	}
	select {
	case <-committed: // it committed as the wait ended
		return nil
	default:
	}
	if len(missing) == 0 {
		// Each confirmed, but not in one round: the loop commits it on
		// its next round, which asks them all again.
		missing = n.replicaTargets(rec.ID)
	}
	return missing
}

// holdsChange tells whether a replica that holds held has the change that
// made sent: held is sent's coordinator's record of the job at sent's
// term, as new as sent or newer (a record's versions only add changes).
func holdsChange(held, sent market.JobRecord) bool {
	return held.ID == sent.ID && held.Coordinator == sent.Coordinator && held.Term == sent.Term && held.Version >= sent.Version
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
	res := n.storeReplicas(from, []market.JobRecord{rec})
	return res[0].top, res[0].err
}

// replicaResult is what a replica holder answers for one record: stored
// (both nil), superseded by top, or refused with err.
type replicaResult struct {
	top *market.JobRecord
	err error
}

// storeReplicas is serveReplicate for records of several jobs from one
// coordinator (replicateMany): each is checked on its own, and those to
// store are written in one transaction, before any is acknowledged.
//
// A record the view holds already, or an older version of it, is not
// written again; but the write that brought it may still be on its way
// to the disk (a retry that crossed the first send, or two senders of one
// record). Records are taken into the view and queued for the disk under
// heldMu, in one order, and an answer waits for the transaction that
// holds its own writes, or for a barrier queued behind every write
// queued before: nothing is acknowledged before it is on disk.
func (n *Node) storeReplicas(from peer.ID, recs []market.JobRecord) []replicaResult {
	res := make([]replicaResult, len(recs))
	var ops []store.Op
	var stored, taken []int
	var yields []market.JobRecord
	n.heldMu.Lock()
	for i, rec := range recs {
		top, write, yield, err := n.checkReplica(from, rec)
		res[i] = replicaResult{top: top, err: err}
		switch {
		case write:
			ops = append(ops, store.Put(store.Jobs, rec.ID, rec))
			stored = append(stored, i)
		case top == nil && err == nil:
			taken = append(taken, i)
		}
		if yield {
			yields = append(yields, rec)
		}
	}
	var wait func() error
	var err error
	if len(stored)+len(taken) > 0 {
		wait, err = n.store.Queue(ops) // no ops: a barrier
	}
	n.heldMu.Unlock()
	for _, rec := range yields {
		// This node coordinates the job too, at a lower term
		// (outranking let rec through): it yields, on its driver.
		n.postWait(func() { n.yieldTo(rec) })
	}
	if wait == nil && err == nil {
		return res
	}
	if err == nil {
		err = wait()
	}
	n.noteWrite(err, len(ops))
	if err != nil {
		for _, i := range append(stored, taken...) {
			res[i].err = fmt.Errorf("replica of %s not stored: %w", recs[i].ID, err)
		}
		return res
	}
	for _, i := range stored {
		n.settleClaim(recs[i])
	}
	return res
}

// hold takes rec into the view when it is newer than the copy held
// (jobstate.Newer) and writes it, ordered with the replicas stored
// (storeReplicas): whatever the view holds of a job not coordinated here
// is on disk, or on its way there ahead of any acknowledgement of it.
func (n *Node) hold(rec market.JobRecord) { n.takeAndWrite(rec, false) }

// takeAndWrite takes rec into the view when it is newer than the copy
// held, and writes it when it was, or always, ordered with the replicas
// stored (under heldMu).
func (n *Node) takeAndWrite(rec market.JobRecord, always bool) {
	n.heldMu.Lock()
	if !n.view.PutNewer(rec) && !always {
		n.heldMu.Unlock()
		return
	}
	ops := []store.Op{store.Put(store.Jobs, rec.ID, rec)}
	wait, err := n.store.Queue(ops)
	n.heldMu.Unlock()
	if err == nil {
		err = wait()
	}
	n.noteWrite(err, len(ops))
	if err != nil {
		n.log.Warn("cannot store a job's record", "job", rec.ID, "err", err)
	}
}

// checkReplica decides what a replica holder does with rec from from:
// answer with the record that outranks it (top), refuse it (err), or take
// it into its view, and write it when write is set (a record it holds
// already, or an older version of it, is acknowledged unwritten). yield
// tells that this node coordinates the job at a lower term and yields to
// rec. The caller holds heldMu.
func (n *Node) checkReplica(from peer.ID, rec market.JobRecord) (top *market.JobRecord, write, yield bool, err error) {
	if err := market.ValidateJobID(rec.ID); err != nil {
		return nil, false, false, api.Errorf(http.StatusBadRequest, "replica: %v", err)
	}
	if rec.Coordinator != from.String() {
		return nil, false, false, api.Errorf(http.StatusForbidden, "replica of %s sent by %s, not its coordinator %s", rec.ID, from.ShortString(), rec.Coordinator)
	}
	if top, ok := n.outranking(rec); ok {
		n.log.Info("refused a replica from an outranked coordinator", "job", rec.ID, "from", from.ShortString(), "term", rec.Term, "coordinator", top.Coordinator, "its_term", top.Term)
		return &top, false, false, nil
	}
	if b, ok := n.claimOutranking(rec); ok && !jobstate.Ended(rec) {
		// A would-be successor claimed the job and has not sent its
		// record yet: nothing the sender decides may take effect now
		// (commit.go). It lets the job go once the claimant's record is
		// here to answer with; it tries again meanwhile.
		return nil, false, false, api.Errorf(http.StatusConflict, "replica of %s at term %d refused: %s claimed the job at term %d", rec.ID, rec.Term, b.Coordinator, b.Term)
	}
	// The yield goes to the driver; otherwise the replica needs nothing
	// of the driver, whose queue may be long.
	own, ok := n.ownRecord(rec.ID)
	yield = ok && jobstate.Settling(own)
	// The same record again, or an older version of it (a retry
	// overtaken by the next change), is not written: this node holds one
	// at least as new from the same coordinator and term (outranking
	// refused the others).
	return nil, n.view.PutNewer(rec), yield, nil
}

// outranking returns a record that rec must not replace: the record of
// this node's own coordination when it outranks rec's coordinator, a
// record of the job's end when rec does not show it, or a record held of
// a coordinator that outranks rec's — alive or not: a record that took
// effect there (commit.go) must not be overwritten by an older
// coordinator's, and the sender lets the job go (onSuperseding) to the
// succession that the holders of the newer record run.
//
// This node's own coordination is read as its driver decided it
// (jobstate.Decided), not from the driver itself: a replica is stored
// without waiting behind the driver's queue, which under load is the
// longest wait a submission has.
func (n *Node) outranking(rec market.JobRecord) (market.JobRecord, bool) {
	if own, ok := n.ownRecord(rec.ID); ok && jobstate.Settling(own) && market.Outranks(own.Term, n.self, rec.Term, rec.Coordinator) {
		return own, true
	}
	held, ok := n.view.Job(rec.ID)
	switch {
	case !ok, jobstate.Ended(rec) && !jobstate.Ended(held):
		return market.JobRecord{}, false // an end is never refused
	case jobstate.Ended(held) && !jobstate.Ended(rec):
		return held, true // the job ended: whoever sends it going resumed a stale copy
	case market.Outranks(held.Term, held.Coordinator, rec.Term, rec.Coordinator):
		return held, true
	}
	return market.JobRecord{}, false
}

// onSuperseding handles a replica holder's answer that a coordinator
// outranking this one holds the job: this node lets it go.
func (n *Node) onSuperseding(from peer.ID, sent market.JobRecord, data []byte) error {
	var top market.JobRecord
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("superseding record: %v", err)
	}
	if top.ID == sent.ID && jobstate.Ended(top) && !jobstate.Ended(sent) {
		// The job ended under another coordinator while this one ran a
		// stale copy (it resumed after a restart without hearing of it).
		n.postWait(func() { n.endCopy(top, from) })
		return nil
	}
	if top.ID != sent.ID || !market.Outranks(top.Term, top.Coordinator, sent.Term, sent.Coordinator) {
		return fmt.Errorf("superseding record of %s at term %d does not outrank term %d", top.ID, top.Term, sent.Term)
	}
	n.log.Info("a replica holder knows a coordinator that outranks this one", "job", sent.ID, "replica", from.ShortString(), "coordinator", top.Coordinator, "term", top.Term)
	n.hold(top)
	n.postWait(func() { n.yieldTo(top) })
	return nil
}

// endCopy stops this node's copy of a job that ended elsewhere: it ends
// here as it ended there (market.JobEnded), its attempts stop. It runs on
// the driver.
func (n *Node) endCopy(end market.JobRecord, from peer.ID) {
	if own, mine := n.mk.Job(end.ID); mine && !own.State.Terminal() {
		n.log.Warn("a replica holder says the job ended; stopping this copy", "job", end.ID, "replica", from.ShortString(), "state", end.State, "coordinator", end.Coordinator)
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
	if !mine || !jobstate.Settling(own) || !market.Outranks(rec.Term, rec.Coordinator, own.Term, n.self) {
		return
	}
	n.log.Info("a coordinator of a higher term holds the job; letting it go", "job", rec.ID, "term", own.Term, "coordinator", rec.Coordinator, "its_term", rec.Term)
	// The job's attempts that run on this node follow the new coordinator
	// rather than stop (market: onSuperseded).
	n.step(market.MessageReceived{Now: time.Now(), Message: market.Message{
		From: rec.Coordinator, To: n.self,
		Payload: &market.Superseded{Job: rec.ID, Term: rec.Term, Coordinator: rec.Coordinator},
	}})
}

// resumeOwn adopts again the jobs this node coordinated before it
// restarted — unless the job moved on or ended while it was away. Its
// record may be stale: a successor may have taken the job over, placed it
// again, even cancelled it or seen it end. So it never acts on its own
// record before it has claimed the job from the job's group and the next
// two members (claim.go), who hold the records of successors chosen while
// this node was gone, and it adopts the newest record they hold; it waits
// until a majority of the group grants the claim.
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
		n.resumeOne(rec)
	}
}

// resumeOne claims and adopts again one job this node coordinated before
// it restarted, trying every second until a majority of the job's group
// answers.
func (n *Node) resumeOne(rec market.JobRecord) {
	for !n.adopting.Begin(rec.ID) {
		select { // the audit is claiming it now
		case <-n.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer n.adopting.End(rec.ID)
	// A successor that took the job over meanwhile chose a term of at
	// most rec.Term+1+Replicas (adoptUnlessHeld); resuming above it means
	// the two never share a term, so never an epoch range.
	for {
		adopt, term, res := n.claimToAdopt(rec, rec.Term+2+uint64(n.cfg.Replicas), "")
		switch res {
		case claimLost:
			return
		case claimWon:
			n.postWait(func() {
				if _, mine := n.mk.Job(adopt.ID); mine {
					n.releaseLater(adopt.ID, term, "")
					return
				}
				if err := n.mk.Step(market.JobAdopted{Now: time.Now(), Record: adopt, Term: term}); err != nil {
					n.log.Warn("cannot resume job", "job", adopt.ID, "err", err)
					return
				}
				n.log.Info("resumed job after restart", "job", adopt.ID, "term", term, "record_term", adopt.Term, "record_version", adopt.Version)
			})
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// keep stores a record learnt from another member in place of this node's
// own, in the view and on disk, so that a later restart does not resume
// the job either.
func (n *Node) keep(rec market.JobRecord) { n.takeAndWrite(rec, true) }

// answered reports whether a call's error came from the peer (it is
// reachable) rather than from trying to reach it.
func answered(err error) bool {
	var he *api.HTTPError
	return err == nil || errors.Is(err, gossip.ErrRemote) || errors.As(err, &he)
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
