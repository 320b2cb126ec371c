package node

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Succession: when a job's coordinator is lost (a disconnect this node
// could not repair, or membership's dead for a coordinator of jobs it
// holds records of), the first member of the job's HRW list that holds
// the record and reaches a majority of the group adopts the job under a
// higher term. See replica.go for how the records get there.
// succeed adopts the jobs whose coordinator was lost and for which this
// node is now first in the HRW order among the live members that hold the
// job's record. It runs on the driver; when live members rank above this
// node, they are asked off the driver whether they hold the record: one
// that does not (a replica that could not reach it, a node that became a
// coordinator since the record was replicated) would never take the job
// over, so it is passed over.
func (n *Node) succeed(lost peer.ID) {
	for _, rec := range n.view.SettlingCoordinatedBy(lost.String()) {
		if _, mine := n.mk.Job(rec.ID); mine {
			continue
		}
		ahead, listed := n.liveAhead(rec.ID, lost)
		switch {
		case !listed:
		default:
			n.wg.Add(1)
			go n.adoptUnlessHeld(rec, lost, ahead)
		}
	}
}

// succeedDeadCoordinators runs succeed again for the coordinators, other
// than except, of the jobs this node holds records of that membership
// declares dead or gone: the group of their jobs changed. It runs on the
// driver.
func (n *Node) succeedDeadCoordinators(except peer.ID) {
	seen := map[peer.ID]bool{except: true, n.id: true}
	for _, rec := range n.view.Settling() {
		c, err := peer.Decode(rec.Coordinator)
		if err != nil || seen[c] {
			continue
		}
		seen[c] = true
		if m, ok := n.mesh.Member(c); ok && (m.State == mesh.StateDead || m.State == mesh.StateLeft) {
			n.succeed(c)
		}
	}
}

// adopt makes this node the job's coordinator under term.
func (n *Node) adopt(rec market.JobRecord, lost peer.ID, term uint64) {
	now := time.Now()
	if err := n.mk.Step(market.JobAdopted{Now: now, Record: rec, Term: term}); err != nil {
		n.log.Warn("cannot take over job", "job", rec.ID, "from", lost.ShortString(), "err", err)
		return
	}
	n.log.Info("took over job from a lost coordinator", "job", rec.ID, "from", lost.ShortString(), "term", term,
		"record_term", rec.Term, "record_version", rec.Version, "live", livePlacements(rec))
	n.events.publish(api.Event{Type: "takeover", At: now, Job: rec.ID, Peer: n.self, Reason: "coordinator " + lost.ShortString() + " lost", Owner: rec.Spec.Owner})
}

// successorAsk bounds the question to a member ranked above this node.
const successorAsk = 500 * time.Millisecond

// adoptUnlessHeld asks the live members ranked above this node for the
// job's record, and takes the job over if none of them holds it. Each
// member passed over raises the term by one more, so that if it takes the
// job over after all, the two coordinators do not share a term: the lower
// one yields when they meet.
func (n *Node) adoptUnlessHeld(rec market.JobRecord, lost peer.ID, ahead []peer.ID) {
	defer n.wg.Done()
	n.takeOver(rec, lost, ahead, false)
}

// adoptOrphan is adoptUnlessHeld for a job whose coordinator answers but
// no longer holds it (audit.go): that it answers is no reason to wait.
func (n *Node) adoptOrphan(rec market.JobRecord, coord peer.ID, ahead []peer.ID) {
	defer n.wg.Done()
	n.takeOver(rec, coord, ahead, true)
}

// takeOver is adoptUnlessHeld's work; orphan says lost answers but does not
// hold the job. Before it adopts, it asks the lost coordinator once more
// (one that answers is back and keeps the job), then claims the job from
// its group (claim.go) and adopts the newest record the group holds: this
// node's replica may be stale, and adopting it would give out its epochs
// again, place shares that run, or run a job that ended.
func (n *Node) takeOver(rec market.JobRecord, lost peer.ID, ahead []peer.ID, orphan bool) {
	if !n.adopting.Begin(rec.ID) {
		return // this node is claiming it already
	}
	defer n.adopting.End(rec.ID)
	for _, id := range ahead {
		ctx, cancel := context.WithTimeout(n.ctx, successorAsk)
		got, err := n.call(ctx, id, kindGet, rec.ID)
		cancel()
		if n.ctx.Err() != nil {
			return
		}
		if err == nil && got.ID == rec.ID {
			return // it holds the record: the job is its to take
		}
		n.log.Info("successor ranked above does not hold the job; passing it over", "job", rec.ID, "member", id.ShortString(), "err", err)
	}
	if !orphan {
		// The lost coordinator may be reachable again (a restart, a
		// healed link): it either still coordinates the job (it resumes
		// it: resumeOwn) or let it go to a coordinator that outranks it;
		// either way the job has a coordinator, and a claim would only
		// hold it back.
		ctx, cancel := context.WithTimeout(n.ctx, successorAsk)
		_, err := n.call(ctx, lost, kindGet, rec.ID)
		cancel()
		if n.ctx.Err() != nil {
			return
		}
		if answered(err) {
			n.log.Info("lost coordinator answers again; not taking the job over", "job", rec.ID, "coordinator", lost.ShortString())
			return
		}
	}
	adopt, term, res := n.claimToAdopt(rec, rec.Term+1+uint64(len(ahead)), lost)
	if res != claimWon {
		// Too few of the group answered: this node may be the one cut
		// off (a runner holding its job's replica, alone behind a
		// partition), and adopting would keep its own attempt running
		// while the rest of the mesh places the share again. Its runner
		// fences instead; the side that can reach the group takes over.
		return
	}
	n.postWait(func() {
		if _, mine := n.mk.Job(adopt.ID); mine {
			n.releaseLater(adopt.ID, term, lost) // adopted meanwhile, by another path
			return
		}
		if held, ok := n.view.Job(adopt.ID); ok && jobstate.Newer(held, adopt) && held.Coordinator != lost.String() {
			n.releaseLater(adopt.ID, term, lost) // taken over meanwhile
			return
		}
		n.adopt(adopt, lost, term)
	})
}

// quorumOthers is how many other members of a job's coordinator group
// (the coordinator and its Replicas successors, as many as the mesh has
// coordinator-eligible and standby members it has not seen leave; see
// coordinators) a successor must
// reach before it adopts the job: with itself, a majority. A group of two
// cannot tell a crash from a partition; its survivor adopts alone.
func (n *Node) quorumOthers() int {
	eligible := 0
	for _, m := range n.mesh.Members() {
		if m.State != mesh.StateLeft && (m.Self && (n.coordNow.Load() || n.standby.Load()) || !m.Self && (m.Coordinator || m.Standby)) {
			eligible++
		}
	}
	group := min(n.cfg.Replicas+1, eligible)
	if group <= 2 {
		return 0
	}
	return group / 2
}

// liveAhead returns the members ranked above this node in the job's HRW
// list that are alive, the lost coordinator aside; listed is false when
// this node is not on the list.
func (n *Node) liveAhead(job string, lost peer.ID) (ahead []peer.ID, listed bool) {
	for _, id := range n.coordinators(job, n.cfg.Replicas+1) {
		if id == lost {
			continue
		}
		if id == n.id {
			return ahead, true
		}
		if m, ok := n.mesh.Member(id); ok && m.State == mesh.StateAlive {
			ahead = append(ahead, id)
		}
	}
	return nil, false
}

// probeLost checks a peer this node lost its connection to: when it cannot
// be reached again within a short time, its jobs are taken over. A dial
// that fails is this node's own observation, not a third party's claim.
func (n *Node) probeLost(p peer.ID) {
	if len(n.view.SettlingCoordinatedBy(p.String())) == 0 {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, 500*time.Millisecond)
		defer cancel()
		n.dialable(p)
		err := n.mesh.Host().Connect(ctx, peer.AddrInfo{ID: p})
		if err == nil || n.ctx.Err() != nil {
			return
		}
		n.log.Info("coordinator unreachable after a disconnect", "peer", p.ShortString(), "err", err)
		n.postWait(func() { n.succeed(p) })
	}()
}
