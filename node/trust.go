package node

import (
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cardclaims"
	"github.com/libp2p/go-libp2p/core/peer"
)

// What keeps an open mesh honest, wired in: cards claimed by two peers
// held back (node/cardclaims), signed usage receipts (node/receipts) and the
// verification probe (node/probe). Each lives in its own package; this
// file only connects them to the driver, the book and the send path.

// trust is the node's state of those subsystems. The driver owns it.
type trust struct {
	receipts *receiptState // nil: usage is billed from renewals alone
	probes   *probeState
	// ownClaims are what this node's cards claim, as of the market's
	// cards at ownClaimsAt (market.Node.CardsVersion): every capacity ad
	// of this node asks for them, and they change only with its cards.
	// Driver only.
	ownClaims   []string
	ownClaimsAt uint64
}

// trustMarket returns the market configuration hook that sets what these
// subsystems need of the market, then runs user's (Config.Market).
func (n *Node) trustMarket(user func(*market.Config)) func(*market.Config) {
	return func(c *market.Config) {
		c.BillOnlyReceipts = true // receipts_wire.go attaches them
		c.Verify = n.verifyMode()
		if user != nil {
			user(c)
		}
	}
}

// wireTrust connects the subsystems once the market is made.
func (n *Node) wireTrust() {
	n.trust.receipts = n.startReceipts()
	n.trust.probes = n.startProbes()
	if n.trust.receipts == nil {
		n.mk.SetBillOnlyReceipts(false)
	}
	n.book.claims = cardclaims.New()
	n.book.claimsOf = n.claimsOf
	// The market advertised this node's cards as it started: index them.
	self := n.self
	n.book.Put(self, slices.Clone(n.book.Node(self)))
}

// claimsOf is what node's latest ad claims of hardware: this node's own
// cards, or a peer's signed evidence as gossip holds it. Driver only.
func (n *Node) claimsOf(node string) []string {
	if node == n.self {
		if v := n.mk.CardsVersion(); n.trust.ownClaims == nil || v != n.trust.ownClaimsAt {
			n.trust.ownClaims, n.trust.ownClaimsAt = n.ownClaims(), v
		}
		return n.trust.ownClaims
	}
	p, err := peer.Decode(node)
	if err != nil {
		return nil
	}
	ad, ok := n.gossip.Book().Get(p, time.Now())
	if !ok {
		return nil
	}
	return ad.Claims()
}

// ownClaims is what this node's cards claim (never nil). Driver only.
func (n *Node) ownClaims() []string {
	own := n.mk.Cards()
	cards := make([]device.Card, 0, len(own))
	for _, st := range own {
		if st.State != market.CardGone {
			cards = append(cards, st.Card)
		}
	}
	if claims := gossip.CardClaims(cards); claims != nil {
		return claims
	}
	return []string{}
}
