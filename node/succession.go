package node

import (
	"context"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
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
	for _, rec := range n.view.coordinatedBy(lost.String()) {
		if !settling(rec) {
			continue
		}
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
	for _, rec := range n.view.all() {
		c, err := peer.Decode(rec.Coordinator)
		if err != nil || seen[c] || !settling(rec) {
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
	n.events.publish(api.Event{Type: "takeover", At: now, Job: rec.ID, Peer: n.id.String(), Reason: "coordinator " + lost.ShortString() + " lost"})
}

// successorAsk bounds the question to a member ranked above this node.
const successorAsk = 500 * time.Millisecond

// adoptUnlessHeld asks the live members ranked above this node for the
// job's record, and adopts the job if none of them holds it. Each member
// passed over raises the term by one more, so that if it takes the job
// over after all, the two coordinators do not share a term: the lower one
// yields when they meet. Before adopting it asks the job's other HRW
// members for their record: this node's replica may be stale (it got it
// from a coordinator cut off with it while the other side took the job
// over at a higher term), and adopting a stale record would give out its
// epochs a second time. A higher term coordinated by a live member wins;
// a higher term whose coordinator is gone is adopted instead.
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
// hold the job.
func (n *Node) takeOver(rec market.JobRecord, lost peer.ID, ahead []peer.ID, orphan bool) {
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
	newest, reached, back := n.newestOf(rec.ID, lost)
	if need := n.quorumOthers(); reached < need {
		// Too few of the job's group answered: this node may be the one
		// cut off (a runner holding its job's replica, alone behind a
		// partition), and adopting would keep its own attempt running
		// while the rest of the mesh places the share again. Its runner
		// fences instead; the side that can reach the group takes over.
		n.log.Info("cannot reach a majority of the job's coordinators; not taking it over", "job", rec.ID, "reached", reached, "need", need)
		return
	}
	if back && !orphan {
		// The lost coordinator answered: it is reachable again (a restart,
		// a healed link). It either still coordinates the job (it resumes
		// it at a term above any this node would take: resumeOwn) or let
		// it go to a coordinator that outranks it; either way the job has
		// a coordinator, and adopting this node's replica, which may be
		// stale, would only move its shares.
		n.log.Info("lost coordinator answers again; not taking the job over", "job", rec.ID, "coordinator", lost.ShortString())
		return
	}
	if newer(newest, rec) {
		if c, err := peer.Decode(newest.Coordinator); err == nil && c != lost && c != n.id {
			if m, ok := n.mesh.Member(c); ok && m.State == mesh.StateAlive {
				n.view.putNewer(newest)
				n.log.Info("job coordinated at a higher term elsewhere; not taking it over", "job", rec.ID, "coordinator", c.ShortString(), "term", newest.Term)
				return
			}
		}
		rec = newest
	}
	if n.ctx.Err() != nil {
		return
	}
	term := rec.Term + 1 + uint64(len(ahead))
	n.postWait(func() {
		if _, mine := n.mk.Job(rec.ID); mine {
			return
		}
		if held, ok := n.view.job(rec.ID); ok && newer(held, rec) && held.Coordinator != lost.String() {
			return // taken over meanwhile
		}
		n.adopt(rec, lost, term)
	})
}

// newestOf asks the job's other HRW members and the lost coordinator, all
// at once, for their record, and returns the newest record of another
// member (zero if none answered), how many of the other members answered
// (a record or an error of their own: they are reachable), and whether the
// lost coordinator answered: it is back.
func (n *Node) newestOf(job string, lost peer.ID) (best market.JobRecord, reached int, back bool) {
	ask := []peer.ID{lost}
	for _, id := range n.coordinators(job, n.cfg.Replicas+1) {
		if id != n.id && id != lost {
			ask = append(ask, id)
		}
	}
	return n.askRecords(job, ask, successorAsk, lost)
}

// askRecords asks ids, all at once and each for at most wait, for their
// record of job. It returns the newest record among the answers of all but
// skip, how many of those answered (a record or an error of their own:
// they are reachable), and whether skip answered.
func (n *Node) askRecords(job string, ids []peer.ID, wait time.Duration, skip peer.ID) (best market.JobRecord, reached int, skipAnswered bool) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(n.ctx, wait)
			defer cancel()
			got, err := n.call(ctx, id, kindGet, job)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case id == skip:
				skipAnswered = answered(err)
			case answered(err):
				reached++
				if err == nil && got.ID == job && (best.ID == "" || newer(got, best)) {
					best = got
				}
			}
		}()
	}
	wg.Wait()
	return best, reached, skipAnswered
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
	if len(n.view.coordinatedBy(p.String())) == 0 {
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
