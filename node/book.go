package node

import (
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
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

// checkBook recomputes whether the book has an ad from every live member.
func (n *Node) checkBook(now time.Time) {
	n.book.checked = now
	gb := n.gossip.Book()
	for _, m := range n.mesh.Members() {
		if m.Self || m.State != mesh.StateAlive {
			continue
		}
		if _, ok := gb.Get(m.ID, now); !ok {
			n.book.complete = false
			return
		}
	}
	n.book.complete = true
}
