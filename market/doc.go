// Package market holds every decision gpumesh makes about jobs and cards —
// the auction that places jobs, the job lifecycle, leases, fencing and
// billing — as one pure state machine per node. It has no goroutines,
// network, clock, randomness of its own or disk: events go in through Step,
// decisions come out through Ready, in the style of etcd raft's RawNode.
// Time arrives in every event; the only randomness is seeded from job IDs.
//
// A Node is both sides of the market on one peer: the supplier of its own
// cards (reserving them for bids, running the shares it wins, renewing
// their leases) and the coordinator of the jobs handed to it (asking for
// bids, clearing, awarding, watching leases, re-placing lost shares,
// billing). Which node coordinates a job is decided outside, by
// rendezvous hashing over the members (Coordinators).
//
// The driving loop, owned by one goroutine in node (STYLE.md item 1):
//
//	n, err := market.New(cfg) // cfg := market.DefaultConfig(peerID); cfg.Cards = ...; cfg.Book = book
//	ticker := time.NewTicker(50 * time.Millisecond)
//	for {
//		select {
//		case <-ctx.Done():
//			return
//		case <-ticker.C:
//			n.Step(market.Tick{Now: time.Now()})
//		case ev := <-events: // messages, submissions, adoptions, cancels, PeerLost, executor reports
//			if err := n.Step(ev); err != nil {
//				log.Debug("market step", "err", err) // stale or refused input changes nothing
//			}
//		}
//		for n.HasReady() {
//			rd := n.Ready()
//			persist(rd.Jobs, rd.Attempts)    // before anything leaves the node
//			persist(rd.ForgetTrackRecords, rd.TrackRecords) // restored via cfg.TrackRecords
//			send(rd.Messages)                 // To "" means the broadcast topic
//			executor.Stop(rd.Stop)            // each reports ExecutionExited when gone
//			executor.Start(rd.Start)          // each reports ExecutionStarted
//			notify(rd.Notifications)
//			if rd.Ad != nil {
//				publish(rd.Ad)                // and book.Put(rd.Ad.Node, rd.Ad.Offers)
//			}
//			n.Advance(rd)
//		}
//	}
//
// Job specs are signed by their owners (SignSpec, package owner): with
// Config.RequireSigned a coordinator takes only specs whose signature
// verifies for Config.Network, and a supplier runs only the signed spec an
// Award carries. A supplier's Policy (owners allowed and denied, the longest
// run, the most network, caps on the memory, pids and CPU weight a job
// declares in its Resources) decides which BidRequests it bids for; it
// declines the others with the reason, which the job's Explanation keeps.
//
// A coordinator keeps a track record of every supplier it watched run
// attempts (losses, clean ends, run time; TrackRecords), from what it saw
// itself only, and clearing takes a supplier that lost shares here at a
// lower MTBF than it advertises (see the README).
//
// The Book (BookView) is the coordinator's read-only view of the mesh's
// free capacity; node folds the capacity ads it hears into a *Book with
// Put and Remove between Steps.
//
// Package markettest wires many Nodes together in one process with a
// virtual clock and a lossy in-memory network, for tests and benchmarks.
// The README in this directory draws the lifecycle and the message flow
// and states the term and epoch rules.
package market
