package node

import (
	"context"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Orphan audit. A job whose coordinator is alive but no longer holds it —
// it restarted before it persisted its adoption, or it let the job go to a
// coordinator that then lost it — would otherwise be coordinated by no one:
// membership sees nothing wrong, so no successor steps in. Every node that
// holds a job's record as one of its coordinator group (or because it let
// the job go) asks the coordinator that record names, every auditInterval,
// whether it still holds the job, and treats a coordinator that answers
// without it as lost.

// auditInterval is how often the records held of other coordinators' jobs
// are checked.
const auditInterval = 3 * time.Second

// auditLoop audits the held records until the node closes.
func (n *Node) auditLoop() {
	defer n.wg.Done()
	t := time.NewTicker(auditInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			n.audit()
		}
	}
}

// audit checks, a few at a time, the held records of jobs still needing a
// coordinator that another node coordinates and that this node would
// succeed.
func (n *Node) audit() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, rec := range n.view.Settling() {
		if rec.Coordinator == n.self {
			n.takeUp(rec)
			continue
		}
		coord, err := peer.Decode(rec.Coordinator)
		if err != nil {
			continue
		}
		ahead, listed := n.liveAhead(rec.ID, coord)
		if !listed {
			continue // not of its group: its group audits it
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n.auditOne(rec, coord, ahead)
		}()
	}
	wg.Wait()
}

// auditOne asks the coordinator named by rec whether it holds the job;
// ahead are the live members ranked above this node in the job's group.
func (n *Node) auditOne(rec market.JobRecord, coord peer.ID, ahead []peer.ID) {
	ctx, cancel := context.WithTimeout(n.ctx, successorAsk)
	got, err := n.call(ctx, coord, kindGet, rec.ID)
	cancel()
	switch {
	case n.ctx.Err() != nil:
		return
	case !answered(err):
		// Unreachable: if membership has given it up, its jobs are taken
		// over as on its death (a successor that missed that moment, or a
		// node that let the job go to it after it died).
		if m, ok := n.mesh.Member(coord); !ok || m.State == mesh.StateDead || m.State == mesh.StateLeft {
			n.postWait(func() { n.succeed(coord) })
		}
		return
	case err == nil && got.ID == rec.ID && (got.Coordinator == coord.String() && jobstate.Settling(got) || jobstate.Newer(got, rec)):
		n.hold(got) // it holds the job, or points to one that outranks it
		return
	}
	n.log.Warn("coordinator answers without the job; taking it over as if it were lost", "job", rec.ID, "coordinator", coord.ShortString(), "err", err)
	n.wg.Add(1)
	go n.adoptOrphan(rec, coord, ahead)
}

// takeUp adopts a job whose record names this node its coordinator when
// this node's market does not hold it: another coordinator let the job go
// to this node (it heard a runner or replica holder say so) before this
// node took it up, or this node restarted before it persisted the
// adoption. Like any adoption it claims the job first (claim.go): the
// record may be stale.
func (n *Node) takeUp(rec market.JobRecord) {
	n.postWait(func() {
		if _, mine := n.mk.Job(rec.ID); mine || !n.adopting.Begin(rec.ID) {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer n.adopting.End(rec.ID)
			adopt, term, res := n.claimToAdopt(rec, rec.Term+1, "")
			if res != claimWon {
				return
			}
			n.postWait(func() {
				if _, mine := n.mk.Job(adopt.ID); mine {
					n.releaseLater(adopt.ID, term, "")
					return
				}
				n.log.Warn("named coordinator of a job this node does not hold; taking it up", "job", adopt.ID, "term", term)
				n.adopt(adopt, n.id, term)
			})
		}()
	})
}

// pointerTo turns the record of a job this node let go (state JobMoved)
// into a replica of the coordinator it went to: the job's last state as
// this node knew it, under that coordinator and term, at version 0, so
// that any record that coordinator sends replaces it.
func (n *Node) pointerTo(moved market.JobRecord) market.JobRecord {
	p := moved
	if prev, ok := n.view.Job(moved.ID); ok && prev.Coordinator == n.self && prev.State != market.JobMoved {
		p = prev
	}
	p.Coordinator, p.Term, p.Version = moved.MovedTo, moved.MovedTerm, 0
	p.MovedTo, p.MovedTerm = "", 0
	if p.State == market.JobMoved {
		p.State = market.JobRunning
	}
	return p
}
