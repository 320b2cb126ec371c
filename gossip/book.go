package gossip

import (
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// pruneEvery is how often Apply sweeps expired entries and tombstones out of
// the Book's memory. Queries never see expired entries whatever the sweep.
const pruneEvery = time.Minute

// Book is one node's view of the mesh's capacity: the newest unexpired ad of
// every peer, folded from the capacity topic. Newest sequence number wins;
// an expired ad vanishes from every query at the now the caller passes in;
// Hide takes a peer's cards out of every answer at once (membership says it
// is dead) and Show puts them back (it is alive after all); Forget drops a
// peer for good (it left).
//
// A Book is safe for concurrent use. Reads take a read lock and copy what
// they return, so the market may query it while gossip applies ads.
type Book struct {
	mu        sync.RWMutex
	peers     map[peer.ID]*bookEntry
	forgotten map[peer.ID]tombstone
	lastPrune time.Time
}

type bookEntry struct {
	ad        Ad
	lastHeard time.Time // receiver's clock when the ad was applied
	signed    []byte    // the pubsub message the ad came in, for book sync; nil if unknown
	hidden    bool      // Hide: kept for CheckSeq and Show, out of every answer
}

// visible reports whether e answers queries at now: unexpired and not
// hidden.
func (e *bookEntry) visible(now time.Time) bool { return !e.hidden && !e.ad.Expired(now) }

// tombstone keeps a forgotten peer's last sequence number until its last ad
// would have expired, so that a late copy of that ad cannot bring the peer
// back. A newer ad from the peer (it was not dead after all) does.
type tombstone struct {
	seq     uint64
	expires time.Time
}

// NewBook returns an empty Book.
func NewBook() *Book {
	return &Book{peers: map[peer.ID]*bookEntry{}, forgotten: map[peer.ID]tombstone{}}
}

// Apply folds ad into the Book at time now and reports why it did not, if
// it did not: ErrExpired when the ad is void at now, ErrStale or
// ErrDuplicate when the Book holds the same or a newer sequence number from
// the peer (or forgot the peer at that sequence number). The Book keeps ad;
// the caller must not change its Cards afterwards.
func (b *Book) Apply(ad Ad, now time.Time) error { return b.applySigned(ad, nil, now) }

// applySigned is Apply, keeping signed, the pubsub message the ad came in,
// to serve book syncs.
func (b *Book) applySigned(ad Ad, signed []byte, now time.Time) error {
	if ad.Expired(now) {
		return msgErr(ReasonExpired, "ad %d of %s", ad.Seq, ad.Peer)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkSeqLocked(ad.Peer, ad.Seq, now); err != nil {
		return err
	}
	delete(b.forgotten, ad.Peer)
	// A newer ad from a hidden peer stays hidden (a copy published before
	// it died may arrive late); once its ad has expired it is not.
	prev := b.peers[ad.Peer]
	hidden := prev != nil && prev.hidden && !prev.ad.Expired(now)
	b.peers[ad.Peer] = &bookEntry{ad: ad, lastHeard: now, signed: signed, hidden: hidden}
	if now.Sub(b.lastPrune) >= pruneEvery {
		b.pruneLocked(now)
	}
	return nil
}

// CheckSeq tells whether an ad from p with sequence number seq would be new
// to the Book at now: nil, ErrStale or ErrDuplicate. Validators call it to
// drop old ads before they spread.
func (b *Book) CheckSeq(p peer.ID, seq uint64, now time.Time) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.checkSeqLocked(p, seq, now)
}

func (b *Book) checkSeqLocked(p peer.ID, seq uint64, now time.Time) error {
	held, ok := uint64(0), false
	if e, found := b.peers[p]; found && !e.ad.Expired(now) {
		held, ok = e.ad.Seq, true
	} else if t, found := b.forgotten[p]; found && now.Before(t.expires) {
		held, ok = t.seq, true
	}
	switch {
	case !ok || seq > held:
		return nil
	case seq == held:
		return msgErr(ReasonDuplicate, "seq %d of %s", seq, p)
	default:
		return msgErr(ReasonStale, "seq %d of %s, hold %d", seq, p, held)
	}
}

// Forget drops p's ad at once. Until that ad would have expired, copies of
// it and older ads from p are refused; a newer ad brings p back.
func (b *Book) Forget(p peer.ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.peers[p]
	if !ok {
		return
	}
	delete(b.peers, p)
	b.forgotten[p] = tombstone{seq: e.ad.Seq, expires: e.ad.ExpiresAt}
}

// Hide takes p's cards out of every answer of the Book at once (Get,
// FreeCount, Len, Snapshot, Query, book syncs) but keeps its ad: copies of
// it and older ads are still refused, newer ones are kept hidden, and Show
// brings the cards back without p having to advertise again. Membership
// hides a peer it declares dead, which may only be cut off by a partition
// that heals. A hidden ad still expires; a peer with no ad is not hidden.
func (b *Book) Hide(p peer.ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.peers[p]; ok {
		e.hidden = true
	}
}

// Show undoes Hide: p's ad, if unexpired, answers queries again.
func (b *Book) Show(p peer.ID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.peers[p]; ok {
		e.hidden = false
	}
}

// Get returns p's ad if the Book holds one that is unexpired at now and
// not hidden.
func (b *Book) Get(p peer.ID, now time.Time) (Ad, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	e, ok := b.peers[p]
	if !ok || !e.visible(now) {
		return Ad{}, false
	}
	return e.ad.clone(), true
}

// Has reports whether Get would find an ad of p at now, without copying
// it.
func (b *Book) Has(p peer.ID, now time.Time) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	e, ok := b.peers[p]
	return ok && e.visible(now)
}

// FreeCount returns how many free cards of model p offers at now; 0 when p
// or the model is unknown, or p's ad expired or is hidden.
func (b *Book) FreeCount(p peer.ID, model string, now time.Time) int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	e, ok := b.peers[p]
	if !ok || !e.visible(now) {
		return 0
	}
	g, _ := e.ad.Group(model)
	return g.Free
}

// Len returns the number of peers with an unexpired ad at now, hidden ones
// left out.
func (b *Book) Len(now time.Time) int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	n := 0
	for _, e := range b.peers {
		if e.visible(now) {
			n++
		}
	}
	return n
}

// PeerSummary is one peer's line in `gpumesh peers`.
type PeerSummary struct {
	Peer      peer.ID
	Region    string
	Cards     int      // all states
	FreeCards int      // free only
	Models    []string // model keys, sorted
	// Simulated are the models whose cards the ad marks simulated.
	Simulated    []string
	Seq          uint64
	LastHeard    time.Time // receiver's clock
	ExpiresAt    time.Time
	Availability Availability
}

// Snapshot summarizes every peer with an unexpired ad at now, sorted by
// peer ID; hidden peers are left out.
func (b *Book) Snapshot(now time.Time) []PeerSummary {
	b.mu.RLock()
	out := make([]PeerSummary, 0, len(b.peers))
	for p, e := range b.peers {
		if !e.visible(now) {
			continue
		}
		out = append(out, PeerSummary{
			Peer:         p,
			Region:       e.ad.Region,
			Cards:        e.ad.TotalCards(),
			FreeCards:    e.ad.FreeCards(),
			Models:       e.ad.Models(),
			Simulated:    e.ad.SimulatedModels(),
			Seq:          e.ad.Seq,
			LastHeard:    e.lastHeard,
			ExpiresAt:    e.ad.ExpiresAt,
			Availability: e.ad.Availability,
		})
	}
	b.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

// signedAds returns the signed messages of up to limit ads unexpired at now,
// hidden ones left out: a peer syncing from this node does not learn of a
// peer this node holds dead.
func (b *Book) signedAds(now time.Time, limit int) [][]byte {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out [][]byte
	for _, e := range b.peers {
		if len(out) == limit {
			break
		}
		if e.signed != nil && e.visible(now) {
			out = append(out, e.signed)
		}
	}
	return out
}

// Prune drops from memory the entries and tombstones that are void at now.
// Apply prunes by itself every minute; callers need Prune only to bound
// memory in a Book that stops receiving ads.
func (b *Book) Prune(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pruneLocked(now)
}

func (b *Book) pruneLocked(now time.Time) {
	for p, e := range b.peers {
		if e.ad.Expired(now) {
			delete(b.peers, p)
		}
	}
	for p, t := range b.forgotten {
		if !now.Before(t.expires) {
			delete(b.forgotten, p)
		}
	}
	b.lastPrune = now
}
