package gossip

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Book repair. A member that comes back after the mesh declared it dead (a
// partition healed, a frozen machine resumed) has its ad shown again from
// the Book (Book.Show) while the ad lives. When it has expired meanwhile,
// the node asks that member for its Book (SyncFrom): one stream between two
// nodes brings the member's own ad and what its side of a partition
// advertised. The alternative, every node publishing its own ad again
// whenever any member rejoins, costs the mesh N ads to N nodes for every
// rejoin: under CPU starvation members flap, and that traffic kept a
// 40-node mesh starved after the burst that started it had ended.
const (
	// repairQueue bounds the repairs waiting; more are dropped (the next
	// rejoin asks again).
	repairQueue = 64
	// repairSpacing is the least time between two repair syncs.
	repairSpacing = time.Second
)

// Repair asks for a sync from p, once p's ad is missing from the Book: a
// goroutine of the Gossip makes one repair at a time, at least
// repairSpacing apart, from each peer at most once per syncServeInterval
// (a peer serves no more often). It never blocks.
func (g *Gossip) Repair(p peer.ID) {
	if p == g.self {
		return
	}
	select {
	case g.repairs <- p:
	default: // full: dropped
	}
}

// repairLoop serves Repair until Close.
func (g *Gossip) repairLoop() {
	defer close(g.repairDone)
	last := map[peer.ID]time.Time{}
	for {
		var p peer.ID
		select {
		case <-g.ctx.Done():
			return
		case p = <-g.repairs:
		}
		now := time.Now()
		for q, at := range last {
			if now.Sub(at) >= syncServeInterval {
				delete(last, q)
			}
		}
		if _, recent := last[p]; recent || g.cfg.Book.Has(p, now) {
			continue
		}
		last[p] = now
		sent, applied, err := g.SyncFrom(g.ctx, p)
		if err != nil {
			g.log.Debug("book repair", "peer", p, "err", err)
		} else {
			g.log.Debug("book repaired", "peer", p, "sent", sent, "new", applied)
		}
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(repairSpacing):
		}
	}
}
