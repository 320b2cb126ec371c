package node

import (
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cardclaims"
)

// book is the market's view of the mesh's capacity: the offers folded from
// the capacity ads this node hears, and whether it has heard every live
// member yet (market.CompletenessView). Only the driver goroutine touches
// it.
type book struct {
	*market.Book
	complete bool
	checked  time.Time
	// claims holds back peers whose ads claim one card (node/cardclaims);
	// claimsOf returns what a peer's latest ad claims.
	claims   *cardclaims.Index
	claimsOf func(node string) []string
}

// Put replaces node's offers, as market.Book.Put, each marked held back
// when a card its ad claims is claimed by another peer too; the offers of
// the peers whose conflicts that changes are marked again.
func (b *book) Put(node string, offers []market.Offer) {
	var touched []string
	if b.claims != nil && b.claimsOf != nil {
		touched = b.claims.Set(node, b.claimsOf(node))
	}
	b.Book.Put(node, b.mark(node, offers))
	b.remark(touched)
}

// Remove forgets node's offers and claims: a peer it held back may be
// asked again.
func (b *book) Remove(node string) {
	b.Book.Remove(node)
	if b.claims != nil {
		b.remark(b.claims.Remove(node))
	}
}

// mark sets the offers' HeldBack from the claims (offers is the caller's).
func (b *book) mark(node string, offers []market.Offer) []market.Offer {
	why := ""
	if b.claims != nil {
		why = b.claims.Conflict(node)
	}
	for i := range offers {
		offers[i].HeldBack = why
	}
	return offers
}

// remark marks the offers of peers again.
func (b *book) remark(peers []string) {
	for _, p := range peers {
		if offers := b.Book.Node(p); len(offers) > 0 {
			b.Book.Put(p, b.mark(p, slices.Clone(offers)))
		}
	}
}

var _ market.CompletenessView = (*book)(nil)

// Complete reports whether every live member's ad was in the book at the
// last check: until then, jobs the book cannot satisfy wait rather than fail.
func (b *book) Complete() bool { return b.complete }

// checkBook recomputes whether the book has an ad from every live member
// (suspects included: they were alive a moment ago, so they have one). It
// runs every second and after news (foldPending), so it reads the cheap
// list of live peers, not a full membership snapshot.
func (n *Node) checkBook(now time.Time) {
	n.book.checked = now
	gb := n.gossip.Book()
	for _, p := range n.mesh.AlivePeers() {
		if !gb.Has(p, now) {
			n.book.complete = false
			return
		}
	}
	n.book.complete = true
}
