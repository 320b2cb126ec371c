package market

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
)

// Track records: what this node, as a coordinator, saw of each supplier's
// attempts with its own eyes. A supplier's advertised MTBF is its own
// claim; the track record can only lower it (rank.go). Nothing in a record
// comes from what other nodes say: memberlist and gossip are not
// Byzantine-tolerant, so a shared reputation would let any peer smear any
// other. The cost is that each coordinator learns on its own.
//
// What counts:
//
//   - a loss: an attempt this coordinator accepted or heard renew that it
//     declared lost (no renewal for LostAfter, or silent for HintGrace after
//     a PeerLost hint), or whose runner reported it fenced (it could not
//     renew) or its card lost;
//   - a clean end: an attempt that ended by a reported exit, a stop the
//     coordinator asked for (cancel, scale-down, a drain, a gang restart),
//     the supplier's time limit or a preemption;
//   - run time: the time between an attempt's renewals (and from its last
//     renewal to a clean end), in attempt-seconds. Not card-seconds: an
//     8-card share's hour is one hour of the node staying up, and a node
//     that goes takes all its attempts with it, so run time and losses
//     both count per attempt and their ratio is the node's MTBF.
//
// Neither counts: an award rejected or unanswered, an attempt taken over
// from another coordinator that never renewed here, one that ended without
// a final report after a stop, and a loss of an attempt not heard from
// since this coordinator was itself frozen (a gap of FenceAfter/2 between
// its ticks): its runners went silent or fenced because of it.

// TrackRecord is one coordinator's record of one supplier: what node
// persists, and restores through Config.TrackRecords.
type TrackRecord struct {
	// Node is the supplier's peer ID.
	Node string `json:"node"`
	// Lost and Ended count the attempts seen to end lost and to end
	// cleanly (see the package README), never decayed.
	Lost  int `json:"lost"`
	Ended int `json:"ended"`
	// Losses and RunSeconds are the losses and the attempt-seconds of run
	// time, each halved every Config.TrackHalfLife, as of At.
	Losses     float64 `json:"losses"`
	RunSeconds float64 `json:"run_seconds"`
	// At is when the supplier was last seen (an attempt renewed or ended).
	At time.Time `json:"at"`
	// LastLoss is when the latest loss was seen.
	LastLoss time.Time `json:"last_loss,omitzero"`
	// Probe is the supplier's latest verification verdict (verify.go).
	Probe *ProbeRecord `json:"probe,omitempty"`
}

// Validate reports what is wrong with a record read back from disk.
func (r *TrackRecord) Validate() error {
	if err := checkID("track record node", r.Node); err != nil {
		return err
	}
	finite := func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
	switch {
	case r.Lost < 0 || r.Ended < 0:
		return fmt.Errorf("track record of %s: negative counts (lost %d, ended %d)", r.Node, r.Lost, r.Ended)
	case !finite(r.Losses) || !finite(r.RunSeconds):
		return fmt.Errorf("track record of %s: losses %v and run seconds %v must be finite and not negative", r.Node, r.Losses, r.RunSeconds)
	case r.At.IsZero():
		return fmt.Errorf("track record of %s: no time", r.Node)
	}
	if r.Probe != nil {
		if err := r.Probe.validate(); err != nil {
			return fmt.Errorf("track record of %s: %w", r.Node, err)
		}
	}
	return nil
}

// maxTrackRecords bounds Config.TrackRecordLimit.
const maxTrackRecords = 1 << 20

// maxObservedMTBF caps an observed MTBF (one loss long faded divides by
// almost nothing) far above any advertised one.
const maxObservedMTBF = 100 * 365 * 24 * time.Hour

// cleanLosses is the decayed loss weight below which a record counts as
// clean when one must be evicted: four half-lives after a single loss.
const cleanLosses = 1.0 / 16

// trackBook holds the coordinator's track records, at most
// Config.TrackRecordLimit of them.
type trackBook struct {
	n       *Node
	recs    map[string]*trackEntry
	dirty   []*trackEntry // changed since the last Advance, for Ready
	dropped []string      // evicted since the last Advance, for Ready
	seq     uint64        // versions entries for Advance
}

type trackEntry struct {
	TrackRecord
	version uint64
	dirty   bool
	// advertised is the MTBF the supplier's latest bid here claimed (0:
	// none advertised), for explanations; known says there was a bid.
	advertised time.Duration
	known      bool
}

// newTrackBook returns the book restored from cfg.TrackRecords (Validate
// has checked them): the most recently seen TrackRecordLimit of them; the
// rest are reported as dropped.
func newTrackBook(n *Node) *trackBook {
	b := &trackBook{n: n, recs: map[string]*trackEntry{}}
	recs := slices.Clone(n.cfg.TrackRecords)
	slices.SortStableFunc(recs, func(x, y TrackRecord) int { return y.At.Compare(x.At) })
	for _, r := range recs {
		switch {
		case b.recs[r.Node] != nil: // a duplicate, older
		case len(b.recs) >= n.cfg.TrackRecordLimit:
			b.dropped = append(b.dropped, r.Node)
		default:
			b.recs[r.Node] = &trackEntry{TrackRecord: r}
		}
	}
	return b
}

// decay brings e's figures forward to now.
func (b *trackBook) decay(e *trackEntry, now time.Time) {
	if dt := now.Sub(e.At); dt > 0 {
		f := math.Exp2(-float64(dt) / float64(b.n.cfg.TrackHalfLife))
		e.Losses *= f
		e.RunSeconds *= f
		e.At = now
	}
}

// entry returns node's record brought forward to now, creating it (and
// evicting another when the book is full) if need be; nil when records are
// off (TrackRecordLimit 0).
func (b *trackBook) entry(node string) *trackEntry {
	now := b.n.now
	if e := b.recs[node]; e != nil {
		b.decay(e, now)
		return e
	}
	if b.n.cfg.TrackRecordLimit <= 0 {
		return nil
	}
	if len(b.recs) >= b.n.cfg.TrackRecordLimit {
		b.evict(now)
	}
	e := &trackEntry{TrackRecord: TrackRecord{Node: node, At: now}}
	b.recs[node] = e
	return e
}

// evict drops the least recently seen clean record, or, when every record
// shows losses, the least recently seen one: a bad supplier's record
// outlasts the clean ones, so a flood of new suppliers does not wash it out
// as fast.
func (b *trackBook) evict(now time.Time) {
	var oldest, oldestClean *trackEntry
	for _, e := range b.recs {
		if oldest == nil || e.At.Before(oldest.At) || e.At.Equal(oldest.At) && e.Node < oldest.Node {
			oldest = e
		}
		if b.losses(e, now) < cleanLosses && (oldestClean == nil || e.At.Before(oldestClean.At) || e.At.Equal(oldestClean.At) && e.Node < oldestClean.Node) {
			oldestClean = e
		}
	}
	victim := oldest
	if oldestClean != nil {
		victim = oldestClean
	}
	if victim == nil {
		return
	}
	delete(b.recs, victim.Node)
	if victim.dirty {
		b.dirty = slices.DeleteFunc(b.dirty, func(e *trackEntry) bool { return e == victim })
	}
	b.dropped = append(b.dropped, victim.Node)
}

// touch marks e changed, for the next Ready.
func (b *trackBook) touch(e *trackEntry) {
	b.seq++
	e.version = b.seq
	if !e.dirty {
		e.dirty = true
		b.dirty = append(b.dirty, e)
	}
}

// ran adds run time seen on node between renewals. It is persisted with
// the next end, not on every renewal.
func (b *trackBook) ran(node string, d time.Duration) {
	if d <= 0 {
		return
	}
	if e := b.entry(node); e != nil {
		e.RunSeconds += d.Seconds()
	}
}

// ended records the end of an attempt on node: lost or clean, with the
// run time since its last renewal.
func (b *trackBook) ended(node string, lost bool, d time.Duration) {
	e := b.entry(node)
	if e == nil {
		return
	}
	if d > 0 {
		e.RunSeconds += d.Seconds()
	}
	if lost {
		e.Lost++
		e.Losses++
		e.LastLoss = b.n.now
	} else {
		e.Ended++
	}
	b.touch(e)
}

// bid notes the MTBF a supplier's bid advertised, for explanations.
func (b *trackBook) bid(node string, a Availability) {
	if e := b.recs[node]; e != nil {
		e.advertised, e.known = a.MTBF.Std(), true
	}
}

// losses is e's decayed loss weight at now, e unchanged.
func (b *trackBook) losses(e *trackEntry, now time.Time) float64 {
	if e.Losses < cleanLosses {
		return e.Losses // clean already, however long ago: no need to decay
	}
	if dt := now.Sub(e.At); dt > 0 {
		return e.Losses * math.Exp2(-float64(dt)/float64(b.n.cfg.TrackHalfLife))
	}
	return e.Losses
}

// observed returns node's observed MTBF now,
//
//	(run time + UnknownMTBF) / losses     both decayed (TrackHalfLife)
//
// and false when the record shows no loss (a supplier with no losses seen
// is taken at its word).
func (b *trackBook) observed(node string) (time.Duration, *trackEntry, bool) {
	if b == nil || len(b.recs) == 0 {
		return 0, nil, false
	}
	e := b.recs[node]
	if e == nil || e.Losses <= 0 {
		return 0, nil, false
	}
	f := 1.0
	if dt := b.n.now.Sub(e.At); dt > 0 {
		f = math.Exp2(-float64(dt) / float64(b.n.cfg.TrackHalfLife))
	}
	secs := (e.RunSeconds*f + b.n.cfg.UnknownMTBF.Seconds()) / (e.Losses * f)
	if !(secs < maxObservedMTBF.Seconds()) { // also NaN, and +Inf once f underflows
		return maxObservedMTBF, e, true
	}
	return time.Duration(secs * float64(time.Second)), e, true
}

// note says, for an explanation, how node's track record changed its
// MTBF, or "" when it did not; adv is what it advertised (ok false:
// not known).
func (b *trackBook) note(node string, adv time.Duration, advKnown bool) string {
	mtbf, e, ok := b.observed(node)
	if !ok {
		return ""
	}
	if !advKnown {
		adv, advKnown = e.advertised, e.known
	}
	instead := ""
	switch {
	case !advKnown: // no bid seen since this node started: the figure is a bound
	case adv > 0 && mtbf < adv:
		instead = " instead of the advertised " + shortDuration(adv)
	case adv <= 0 && mtbf < b.n.cfg.UnknownMTBF:
		instead = " instead of the " + shortDuration(b.n.cfg.UnknownMTBF) + " assumed (none advertised)"
	default:
		return "" // the record did not lower it
	}
	var s strings.Builder
	fmt.Fprintf(&s, "track record here: %d of %s lost", e.Lost, text.Count(e.Lost+e.Ended, "attempt"))
	if !e.LastLoss.IsZero() {
		fmt.Fprintf(&s, ", the last %s ago", shortDuration(b.n.now.Sub(e.LastLoss)))
	}
	if advKnown {
		fmt.Fprintf(&s, "; MTBF taken as %s%s", shortDuration(mtbf), instead)
	} else {
		fmt.Fprintf(&s, "; MTBF taken as at most %s", shortDuration(mtbf))
	}
	return s.String()
}

// annotate appends the track-record note to the kept entries of suppliers
// whose MTBF their record lowered. lots are the round's bids (their
// Availability is what clearing weighed), lotBy their index by node.
func (b *trackBook) annotate(e *Explanation, lots []Lot, lotBy map[string]int) {
	if b == nil || len(b.recs) == 0 {
		return
	}
	for i := range e.Entries {
		en := &e.Entries[i]
		if _, ok := b.recs[en.Node]; !ok {
			continue
		}
		var adv time.Duration
		known := false
		if k, ok := lotBy[en.Node]; ok && k < len(lots) {
			adv, known = lots[k].Availability.MTBF.Std(), true
		}
		if n := b.note(en.Node, adv, known); n != "" {
			if en.Detail != "" {
				en.Detail += "; "
			}
			en.Detail += n
		}
	}
}

// ready adds the changed and dropped records to rd.
func (b *trackBook) ready(rd *Ready) {
	if len(b.dirty) > 0 {
		rd.TrackRecords = make([]TrackRecord, len(b.dirty))
		rd.trackVersions = make([]uint64, len(b.dirty))
		for i, e := range b.dirty {
			rd.TrackRecords[i] = e.TrackRecord
			rd.trackVersions[i] = e.version
		}
	}
	if len(b.dropped) > 0 {
		rd.ForgetTrackRecords = slices.Clone(b.dropped)
	}
}

// advance forgets what rd carried that has not changed since.
func (b *trackBook) advance(rd *Ready) {
	for i, r := range rd.TrackRecords {
		if e := b.recs[r.Node]; e != nil && i < len(rd.trackVersions) && e.version == rd.trackVersions[i] {
			e.dirty = false
		}
	}
	if len(rd.TrackRecords) > 0 {
		b.dirty = slices.DeleteFunc(b.dirty, func(e *trackEntry) bool { return !e.dirty })
	}
	b.dropped = dropFront(b.dropped, len(rd.ForgetTrackRecords))
}

func (b *trackBook) hasReady() bool { return len(b.dirty) > 0 || len(b.dropped) > 0 }

// records returns every record, brought forward to now, by node.
func (b *trackBook) records() []TrackRecord {
	out := make([]TrackRecord, 0, len(b.recs))
	for _, e := range b.recs {
		r := e.TrackRecord
		if dt := b.n.now.Sub(r.At); dt > 0 {
			f := math.Exp2(-float64(dt) / float64(b.n.cfg.TrackHalfLife))
			r.Losses, r.RunSeconds, r.At = r.Losses*f, r.RunSeconds*f, b.n.now
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y TrackRecord) int { return strings.Compare(x.Node, y.Node) })
	return out
}

// Seen is what a coordinator's track record says of one supplier, for
// people (the offers a node lists): the attempts it saw end and, when it
// saw losses, the MTBF it takes the supplier at.
type Seen struct {
	Node string `json:"node"`
	// Lost and Ended count the attempts seen to end lost and cleanly.
	Lost  int `json:"lost"`
	Ended int `json:"ended"`
	// MTBF is the observed MTBF clearing weighs the supplier by when it is
	// below what the supplier advertises; 0 when the record shows no loss
	// (the supplier is taken at its word).
	MTBF time.Duration `json:"mtbf"`
	// LastLoss is when the latest loss was seen; zero if none.
	LastLoss time.Time `json:"last_loss,omitzero"`
}

// Seen returns what this node's track record says of every supplier it
// keeps one of, by node, as of the latest event's time.
func (n *Node) Seen() []Seen {
	b := n.coord.track
	out := make([]Seen, 0, len(b.recs))
	for _, e := range b.recs {
		s := Seen{Node: e.Node, Lost: e.Lost, Ended: e.Ended, LastLoss: e.LastLoss}
		if mtbf, _, ok := b.observed(e.Node); ok {
			s.MTBF = mtbf
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y Seen) int { return strings.Compare(x.Node, y.Node) })
	return out
}

// shortDuration writes d for people at the precision that matters:
// "720h", "26h", "2h13m", "40m", "35s", "0.4s".
func shortDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Hour:
		return fmt.Sprintf("%dh", int64(d.Round(time.Hour)/time.Hour))
	case d >= time.Hour:
		d = d.Round(time.Minute)
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", int64(d.Round(time.Minute)/time.Minute))
	case d >= 10*time.Second:
		return fmt.Sprintf("%ds", int64(d.Round(time.Second)/time.Second))
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}
