package node

import (
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// book is the market's view of the mesh's capacity: the offers folded from
// the capacity ads this node hears, and whether it has heard every live
// member yet (market.CompletenessView). Only the driver goroutine touches
// it.
type book struct {
	*market.Book
	complete bool
	checked  time.Time
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
