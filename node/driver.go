package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/gpumesh/gpumesh/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

// startMarket builds the market for this node and restores what the state
// file holds: the jobs it coordinated are adopted again under a higher term
// (those still going, and those that ended with attempts still stopping);
// attempts it ran whose processes died with the node are recorded as lost
// (their coordinators place them again when the leases lapse); the track
// records it kept of suppliers are handed back to the market.
func (n *Node) startMarket(cards []device.Card) error {
	n.book = &book{Book: market.NewBook()}
	mcfg := market.DefaultConfig(n.self)
	mcfg.Cards = cards
	mcfg.Region = n.cfg.Region
	mcfg.Availability = n.cfg.Availability
	mcfg.Prices.PerModel = n.cfg.Prices
	mcfg.Book = n.book
	mcfg.Network, mcfg.RequireSigned, mcfg.Policy = n.mesh.Network(), true, n.cfg.Policy
	mcfg.CheckpointKeep = n.cfg.CheckpointKeep
	if caps := n.exec.Capabilities(); caps.Runtime == "" && mcfg.Policy.NoImages == "" {
		// No bid for a job in an image, with the reason in its --explain.
		mcfg.Policy.NoImages = caps.ImagesReason
	}
	if caps := n.exec.Capabilities(); !caps.PrivateNet && mcfg.Policy.NoPrivateNet == "" {
		// No bid for a gang across nodes that needs a private network.
		mcfg.Policy.NoPrivateNet = caps.PrivateNetReason
	}
	if n.cfg.Market != nil {
		n.cfg.Market(&mcfg)
	}
	recs, err := n.readTrackRecords()
	if err != nil {
		return err
	}
	mcfg.TrackRecords = recs
	if mcfg.EndedAttempts, err = n.readAttempts(mcfg.ReportTTL); err != nil {
		return err
	}
	if err := n.loadEarnings(mcfg.EndedAttempts); err != nil {
		return fmt.Errorf("node: reading earnings: %w", err)
	}
	mk, err := market.New(mcfg)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.mk = mk
	n.lostAfter = mcfg.LostAfter
	n.reserveSettle = n.cfg.ReserveSettle
	if n.reserveSettle == 0 {
		n.reserveSettle = mcfg.BidWindow + mcfg.AwardTimeout
	}

	if err := n.loadTombstones(); err != nil {
		return fmt.Errorf("node: reading tombstones: %w", err)
	}
	var restored, ended int
	var superseded []store.Op
	err = n.store.ForEach(store.Jobs, func(id string, raw []byte) error {
		var rec market.JobRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			n.log.Error("unreadable job record in the state file; skipped", "job", id, "err", err)
			return nil
		}
		if _, gone := n.view.Dropped(id); gone {
			// Its tombstone is kept instead (a write of the record that
			// came after the drop).
			superseded = append(superseded, store.Delete(store.Jobs, id))
			return nil
		}
		n.view.Put(rec)
		if !jobstate.Settling(rec) || rec.Coordinator != n.self {
			ended++
			return nil
		}
		n.resume = append(n.resume, rec) // adopted again once peers can be asked (resumeOwn)
		restored++
		return nil
	})
	if err != nil {
		return fmt.Errorf("node: reading jobs: %w", err)
	}
	if restored+ended > 0 {
		n.log.Info("state restored", "jobs_to_resume", restored, "other_records", ended, "attempts_ended", len(mcfg.EndedAttempts))
	}
	n.drain()
	t := n.turn // before the driver starts: written and carried out here
	n.turn = turn{}
	if err := n.storeApply(append(t.ops, superseded...)); err != nil {
		return fmt.Errorf("node: writing the restored state: %w", err)
	}
	for _, rd := range t.effects {
		n.effects(rd)
	}
	return nil
}

// readAttempts reads back the attempts this node ran before it
// restarted, for the market to keep (market.Config.EndedAttempts): those
// that had ended, and those that were running, whose processes died with
// the node (ended now, cause fenced: their coordinators place them again
// as soon as they hear). Ends older than ttl are dropped from the state
// file.
func (n *Node) readAttempts(ttl time.Duration) ([]market.Attempt, error) {
	var out []market.Attempt
	var ops []store.Op
	now := time.Now()
	err := n.store.ForEach(store.Attempts, func(key string, raw []byte) error {
		var a market.Attempt
		if err := json.Unmarshal(raw, &a); err != nil {
			n.log.Error("unreadable attempt in the state file; dropped", "attempt", key, "err", err)
			ops = append(ops, store.Delete(store.Attempts, key))
			return nil
		}
		switch a.State {
		case market.AttemptClosed:
			ops = append(ops, store.Delete(store.Attempts, key))
			return nil
		case market.AttemptDone:
			if a.EndedAt.IsZero() || now.Sub(a.EndedAt) > ttl {
				ops = append(ops, store.Delete(store.Attempts, key))
				return nil
			}
		default:
			a.State, a.Cause, a.ExitCode, a.EndedAt, a.Acked = market.AttemptDone, market.CauseFenced, -1, now, false
			ops = append(ops, store.Put(store.Attempts, key, a))
			n.log.Warn("attempt lost with the node's last run", "job", a.Job, "share", a.Share, "epoch", a.Epoch)
		}
		if err := a.ValidateEnded(); err != nil {
			n.log.Error("unusable attempt in the state file; dropped", "attempt", key, "err", err)
			ops = append(ops, store.Delete(store.Attempts, key))
			return nil
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("node: reading attempts: %w", err)
	}
	if err := n.storeApply(ops); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return out, nil
}

// readTrackRecords reads the suppliers' track records back from the state
// file; one that cannot be read, or fails market's check, is logged and
// left out (the supplier starts afresh).
func (n *Node) readTrackRecords() ([]market.TrackRecord, error) {
	var recs []market.TrackRecord
	err := n.store.ForEach(store.TrackRecords, func(node string, raw []byte) error {
		var r market.TrackRecord
		err := json.Unmarshal(raw, &r)
		if err == nil {
			err = r.Validate()
		}
		if err == nil && r.Node != node {
			err = fmt.Errorf("stored under %q", node)
		}
		if err != nil {
			n.log.Error("unreadable track record in the state file; skipped", "supplier", node, "err", err)
			return nil
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("node: reading track records: %w", err)
	}
	return recs, nil
}

// drive is the one goroutine that owns the market: it feeds it time,
// messages, membership changes and API calls, and carries out what it
// decides.
func (n *Node) drive() {
	defer n.wg.Done()
	defer close(n.persister.driverGone)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	quiet := false // ticking every IdleTickInterval
	for {
		if q := n.mk.Quiet(); q != quiet {
			quiet = q
			every := n.cfg.TickInterval
			if quiet {
				every = n.cfg.IdleTickInterval
			}
			ticker.Reset(every)
		}
		// What is on disk is carried out first: a decision written waits
		// for no other input.
		select {
		case ts := <-n.persister.done:
			n.carryOut(ts)
			n.drain()
			n.endTurn()
			continue
		default:
		}
		select {
		case <-n.ctx.Done():
			return
		case ts := <-n.persister.done:
			n.carryOut(ts)
		case now := <-ticker.C:
			n.updateCoordinatorFlag()
			n.flushMeta(now)
			n.settleSupply(now)
			n.refreshStatus(now)
			if now.Sub(n.book.checked) > time.Second {
				n.checkBook(now)
				n.stages.Sweep(now)
			}
			n.step(market.Tick{Now: time.Now()})
			n.armFences(time.Now())
		case f := <-n.inputs:
			f()
			n.takeQueued()
		case <-n.wake:
			n.foldPending()
		}
		n.drain()
		n.endTurn()
	}
}

// maxTurnInputs bounds the inputs one driver turn takes before it writes
// what they decided: enough that a burst shares one transaction (one
// fsync), few enough that a tick is not held back long.
const maxTurnInputs = 64

// takeQueued runs the inputs already waiting, up to a turn's worth, so
// that the turn's drain persists what all of them decided at once (group
// commit) rather than an input at a time. Driver only.
func (n *Node) takeQueued() {
	for range maxTurnInputs - 1 {
		select {
		case f := <-n.inputs:
			f()
		default:
			return
		}
	}
}

// afterTurn runs f on the driver once this turn's decisions are on disk
// and carried out. Driver only.
func (n *Node) afterTurn(f func()) { n.turn.after = append(n.turn.after, f) }

// endTurn hands the turn's writes and effects to the persister. Driver
// only.
func (n *Node) endTurn() {
	t := n.turn
	n.turn = turn{}
	if len(t.ops) == 0 && len(t.effects) == 0 && len(t.after) == 0 {
		return
	}
	n.persister.push(t)
}

// step applies one event; expected refusals (stale, unknown job) are
// logged at debug and change nothing.
func (n *Node) step(ev market.Event) error {
	err := n.mk.Step(ev)
	if err != nil {
		level := slogDebug
		if errors.Is(err, market.ErrBadMessage) || errors.Is(err, market.ErrRefused) {
			level = slogInfo
		}
		n.log.Log(n.ctx, level, "market refused input", "event", fmt.Sprintf("%T", ev), "err", err)
	}
	return err
}

// drain takes everything the market has decided and carries it out in
// the order Ready documents — persist, send, stop, start, notify,
// advertise — without the driver waiting for the disk: the writes go into
// this turn's batch, which the persister commits (with the batches of the
// turns before it that are still waiting, in one transaction) while the
// driver goes on; the rest of each Ready (its effects) runs on the driver
// once the write that decided it is on disk, in the order decided
// (persister.go). What may start an attempt or acknowledge an end waits,
// further, until the job's replicas hold the record that decided it
// (commit.go).
func (n *Node) drain() {
	for n.mk.HasReady() {
		rd := n.mk.Ready()
		for _, rec := range rd.Jobs {
			n.decided.Note(n.self, rec)
		}
		n.turn.ops = append(n.turn.ops, n.persist(rd)...)
		n.mk.Advance(rd)
		// Receipts go with the reports that carry them, decided and
		// written in this turn: what a message carries is on disk before
		// it leaves, and the driver never waits for a write of its own.
		rd.Messages = n.receiptsOut(rd.Messages)
		n.turn.effects = append(n.turn.effects, rd)
	}
}

// effects carries out a Ready whose writes are on disk. Driver only.
func (n *Node) effects(rd market.Ready) {
	for _, rec := range rd.Jobs {
		if rec.State == market.JobMoved && rec.MovedTo != "" {
			n.view.PutNewer(n.pointerTo(rec))
			continue
		}
		n.view.Put(rec) // the API shows what is on disk
		n.decided.Written(rec)
		if rec.Coordinator != n.self {
			n.forgetBill(rec.ID)
			continue
		}
		n.repl.Enqueue(rec) // its replicas get what this node holds
		n.observeBill(rec)
		if rec.Version == 1 || rec.State.Terminal() {
			n.settleClaim(rec) // this node's own claim, once it coordinates or the job ended
		}
	}
	n.sendCommitted(rd.Messages)
	for _, s := range rd.Stop {
		n.stopExecution(s)
	}
	for _, e := range rd.Start {
		n.startExecution(e)
	}
	for _, note := range rd.Notifications {
		n.notify(note)
	}
	n.notifyAttempts(rd)
	if rd.Ad != nil {
		n.advertise(*rd.Ad)
	} else if n.supplyChanged() {
		n.publishSupply()
	}
}

// persist returns the writes of a Ready: the changed job records and
// attempts, and what the attempts earned. Driver only.
func (n *Node) persist(rd market.Ready) []store.Op {
	var ops []store.Op
	for _, node := range rd.ForgetTrackRecords { // before TrackRecords: one may be dropped and seen again
		ops = append(ops, store.Delete(store.TrackRecords, node))
	}
	for _, r := range rd.TrackRecords {
		ops = append(ops, store.Put(store.TrackRecords, r.Node, r))
	}
	for _, rec := range rd.Jobs {
		if rec.State == market.JobMoved && rec.MovedTo != "" {
			// This node let the job go: it keeps the job, as a replica of
			// the coordinator it yielded to, so that it notices if that
			// one is lost or never took the job up (audit.go).
			rec = n.pointerTo(rec)
		}
		ops = append(ops, store.Put(store.Jobs, rec.ID, rec))
	}
	now := time.Now()
	for _, a := range rd.Attempts {
		n.earn(now, a)
		key := attemptName(a.Job, a.Share, a.Epoch)
		if a.State == market.AttemptClosed {
			ops = append(ops, store.Delete(store.Attempts, key))
		} else {
			ops = append(ops, store.Put(store.Attempts, key, a))
		}
	}
	if len(rd.Attempts) > 0 {
		ops = append(ops, n.ledger.ops(now)...) // what was counted goes with the attempts it was counted of
	}
	return ops
}

// onAd is gossip's callback for a new capacity ad: it records the newest
// ad per peer and wakes the driver, without blocking.
func (n *Node) onAd(ad gossip.Ad) {
	n.pendingMu.Lock()
	n.pendingAds[ad.Peer] = ad
	n.pendingMu.Unlock()
	n.nudge()
}

func (n *Node) nudge() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// pumpMembers moves membership events to the driver.
func (n *Node) pumpMembers(sub *mesh.Subscription) {
	defer n.wg.Done()
	defer sub.Close()
	for {
		select {
		case <-n.ctx.Done():
			return
		case ev, ok := <-sub.C:
			if !ok {
				return
			}
			n.pendingMu.Lock()
			n.pendingMembers = append(n.pendingMembers, ev)
			n.pendingMu.Unlock()
			n.nudge()
		}
	}
}

// foldPending applies the ads and membership events gathered since the
// last call.
func (n *Node) foldPending() {
	n.pendingMu.Lock()
	ads := n.pendingAds
	n.pendingAds = map[peer.ID]gossip.Ad{}
	members := n.pendingMembers
	n.pendingMembers = nil
	n.pendingMu.Unlock()

	now := time.Now()
	if len(members) > 0 || !n.book.complete {
		// Only membership news can make a complete book incomplete (a
		// new member without an ad yet); an ad can only complete it. The
		// driver's ticker catches ads that expire.
		defer n.checkBook(now)
	}
	for p, ad := range ads {
		if p == n.id {
			continue // the market knows its own cards
		}
		if m, ok := n.mesh.Member(p); ok && (m.State == mesh.StateDead || m.State == mesh.StateLeft) {
			continue
		}
		n.book.Put(p.String(), offersOf(ad, now))
	}
	regroup := false
	defer func() {
		if regroup {
			n.replicateAll() // a member's role changed: it joins or leaves some jobs' groups
		}
	}()
	for _, ev := range members {
		n.events.publish(memberEvent(ev))
		if ev.Kind != mesh.EventUpdate && ev.Kind != mesh.EventDisconnect {
			n.obs.flaps.Changed(ev.Peer.String(), ev.Time)
			n.obs.m.CountMemberChange(ev.Kind.String())
		}
		switch ev.Kind {
		case mesh.EventDead, mesh.EventLeft:
			n.book.Remove(ev.Peer.String())
			if ev.Kind == mesh.EventLeft {
				n.gossip.Book().Forget(ev.Peer)
				n.step(market.PeerLost{Now: now, Node: ev.Peer.String()})
			} else {
				// A member that left said so; one declared dead may only
				// be frozen or cut off. Its cards leave gossip's Book at
				// once too, but the Book keeps its ad (hidden, until it
				// expires), so that when it comes back its cards return
				// at once (EventJoin below): it has no reason to
				// advertise again, never having seen this node go.
				n.gossip.Book().Hide(ev.Peer)
			}
			// memberlist declares a member dead within about a second
			// of silence: a node frozen for 2 s (SIGSTOP, a paused VM)
			// is dead to it, yet its jobs run and it renews when it
			// resumes. That is no hint to move its shares; the lease
			// (LostAfter) decides, and a dropped connection (a process
			// that died) is the early hint.
			n.succeed(ev.Peer)
			// Members lost with a coordinator (a rack's power cut) leave
			// its jobs' groups only as membership declares them dead, one
			// after another: a successor that could not reach a majority
			// of the group when the coordinator went may reach one now,
			// before the runners' fencing deadline.
			n.succeedDeadCoordinators(ev.Peer)
			n.replicateAll() // its replicas move to the next members
		case mesh.EventDisconnect:
			n.step(market.PeerLost{Now: now, Node: ev.Peer.String()})
			n.probeLost(ev.Peer)
		case mesh.EventJoin, mesh.EventUpdate:
			if m, ok := n.mesh.Member(ev.Peer); ok {
				if role := n.roleOf(m); role != n.roles[ev.Peer] {
					regroup = regroup || ev.Kind == mesh.EventUpdate
					n.roles[ev.Peer] = role
				}
			}
			if ev.Kind == mesh.EventJoin {
				n.clearBackoff(ev.Peer)
				n.replicateAll() // it may rank among some jobs' replicas
				// A member back after it was declared dead (a partition
				// healed): its ad was hidden then. Show it again while
				// gossip keeps it, else ask the member for its book
				// (gossip's repair: one sync between two nodes, not an ad
				// from every node to every node on every rejoin, which
				// under CPU starvation kept members flapping). The member
				// does the same for this node's ad if it lost it.
				n.gossip.Book().Show(ev.Peer)
				if ad, ok := n.gossip.Book().Get(ev.Peer, now); ok {
					n.book.Put(ev.Peer.String(), offersOf(ad, now))
				} else {
					n.gossip.Repair(ev.Peer)
				}
			}
			// Learn its addresses now, so that the first message to it
			// need not wait for a lookup.
			if m, ok := n.mesh.Member(ev.Peer); ok && len(m.Addrs) > 0 {
				n.mesh.Host().Peerstore().AddAddrs(ev.Peer, m.Addrs, addrTTL)
			}
		}
	}
}

// memberRole is what a member's metadata says of its coordinating.
type memberRole uint8

const (
	roleNone memberRole = iota
	roleStandby
	roleCoordinator
)

// roleOf is m's role: for this node its own flags, for another what its
// metadata says (none while it leaves).
func (n *Node) roleOf(m mesh.Member) memberRole {
	switch {
	case m.Self && n.coordNow.Load() || !m.Self && m.Coordinator && !m.Leaving:
		return roleCoordinator
	case m.Self && n.standby.Load() || !m.Self && m.Standby && !m.Leaving:
		return roleStandby
	}
	return roleNone
}

// replicateAll queues every live job this node coordinates for
// replication, after membership changed who holds the replicas.
func (n *Node) replicateAll() {
	for _, rec := range n.mk.LiveJobs() {
		n.repl.Enqueue(rec)
	}
}

// pumpHealth moves card health changes to the market.
func (n *Node) pumpHealth() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case ev, ok := <-n.devices.Events():
			if !ok {
				return
			}
			n.log.Warn("card health changed", "card", ev.CardID, "healthy", ev.Health.Healthy, "reason", ev.Health.Reason)
			cards := n.devices.Cards()
			n.postWait(func() {
				n.step(market.CardsChanged{Now: time.Now(), Cards: cards})
				n.updateMeta()
			})
		}
	}
}

// postWait queues f for the driver, waiting for room; it gives up only when
// the node closes.
func (n *Node) postWait(f func()) {
	select {
	case n.inputs <- f:
	case <-n.ctx.Done():
	}
}

// updateCoordinatorFlag advertises this node as a coordinator once it has
// been up for CoordinatorAfter in auto mode, and as a standby before that
// (see coordinators).
func (n *Node) updateCoordinatorFlag() {
	auto := n.cfg.Coordinator == CoordinatorAuto && !n.draining.Load()
	want := auto && time.Since(n.started) >= n.cfg.CoordinatorAfter
	standby := auto && !want
	if want != n.coordNow.Load() || standby != n.standby.Load() {
		n.coordNow.Store(want)
		n.standby.Store(standby)
		n.updateMeta()
		n.replicateAll() // this node's own place in the jobs' groups changed
	}
}

// updateMeta refreshes what memberlist tells peers about this node: at
// once when its cards, models, region or coordinator flag changed; when
// only the free count did, at most every Config.MetaFreeEvery (the ticker
// sends a change held back: flushMeta). Every update is an alive message
// that memberlist gossips to every member, and the capacity ads already
// carry the free cards at once; the membership's count is only the
// fallback of `gpumesh peers` for a member whose ad is missing. Without the
// limit each placement would start a membership wave from every supplier
// it touches. Driver only.
func (n *Node) updateMeta() {
	free := -1
	if n.mk != nil {
		free = n.freeCards()
	}
	healthy, models := n.devices.Healthy()
	meta := metaOf(n.cfg.Region, healthy, models, free, n.coordNow.Load(), n.standby.Load())
	if !n.metaSentAt.IsZero() && sameSummary(meta, n.metaSent) {
		if meta.FreeCards == n.metaSent.FreeCards {
			n.metaHeld = false
			return
		}
		if time.Since(n.metaSentAt) < n.cfg.MetaFreeEvery {
			n.metaHeld = true
			return
		}
	}
	if err := n.mesh.UpdateMeta(meta); err != nil {
		n.log.Warn("cannot update node metadata", "err", err)
		return
	}
	n.metaSent, n.metaSentAt, n.metaHeld = meta, time.Now(), false
}

// flushMeta sends a free-count change updateMeta held back, once
// Config.MetaFreeEvery has passed. Driver only.
func (n *Node) flushMeta(now time.Time) {
	if n.metaHeld && now.Sub(n.metaSentAt) >= n.cfg.MetaFreeEvery {
		n.updateMeta()
	}
}

// SetCoordinator changes whether this node coordinates jobs from now on;
// the jobs it already coordinates stay with it.
func (n *Node) SetCoordinator(ctx context.Context, mode CoordinatorMode) error {
	if _, err := ParseCoordinatorMode(string(mode)); err != nil {
		return err
	}
	return n.do(ctx, func() {
		n.cfg.Coordinator = mode
		n.updateCoordinatorFlag()
	})
}
