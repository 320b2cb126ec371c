package receipts

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// DefaultInterval is how often a running attempt's renewals carry a
// receipt.
const DefaultInterval = 5 * time.Second

// maxChains bounds the attempts an Issuer remembers.
const maxChains = 4096

// Attempt names one attempt: a share of a job under an epoch.
type Attempt struct {
	Job   string
	Share int
	Epoch uint64
}

// Terms is what a receipt states of its attempt besides the usage.
type Terms struct {
	Owner       string
	Coordinator string
	Term        uint64
	Cards       int
	PriceCNY    float64
}

// Issuer makes a runner's receipts: it decides which renewals carry one,
// chains them, signs them, and matches the coordinator's countersignatures.
// Not safe for concurrent use: node's driver owns it.
type Issuer struct {
	network, self string
	key           ed25519.PrivateKey
	interval      time.Duration
	// last returns the newest receipt of an attempt held on disk (a
	// restart continues the chain); may be nil.
	last   func(Attempt) (Receipt, bool)
	chains map[Attempt]*chain
}

type chain struct {
	last    Receipt   // the newest issued
	pending []Receipt // issued, not yet countersigned (newest last)
}

// NewIssuer returns the issuer of runner self on network.
func NewIssuer(network, self string, key ed25519.PrivateKey, interval time.Duration, last func(Attempt) (Receipt, bool)) *Issuer {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Issuer{network: network, self: self, key: key, interval: interval, last: last, chains: map[Attempt]*chain{}}
}

// Due reports whether a renewal of a at now with cardSeconds should carry
// a receipt: the first with usage, then one every interval.
func (is *Issuer) Due(a Attempt, cardSeconds float64, now time.Time) bool {
	if cardSeconds <= 0 {
		return false
	}
	c := is.chain(a)
	return c.last.Seq == 0 || !now.Before(c.last.At.Add(is.interval)) && cardSeconds > c.last.CardSeconds
}

// Issue makes and signs the next receipt of a: usage cardSeconds at now,
// final when the attempt ended. A final receipt asked again (the end is
// re-sent until acknowledged) is the same receipt.
func (is *Issuer) Issue(a Attempt, t Terms, cardSeconds float64, final bool, now time.Time) Receipt {
	c := is.chain(a)
	if final && c.last.Final && c.last.CardSeconds == cardSeconds {
		return c.last
	}
	r := Receipt{
		Network: is.network, Job: a.Job, Owner: t.Owner, Share: a.Share, Epoch: a.Epoch, Term: t.Term,
		Runner: is.self, Coordinator: t.Coordinator, Seq: c.last.Seq + 1, At: now.Truncate(time.Millisecond).UTC(),
		Cards: t.Cards, PriceCNY: t.PriceCNY, CardSeconds: max(cardSeconds, c.last.CardSeconds), Final: final,
	}
	if c.last.Seq > 0 {
		r.Prev = c.last.Hash()
	}
	r.Sign(is.key)
	c.last = r
	c.pending = append(c.pending, r)
	if len(c.pending) > 16 {
		c.pending = c.pending[1:] // an ack long lost: the older ones never come back
	}
	return r
}

// ErrNoPending: a countersignature for a receipt this runner does not
// hold waiting.
var ErrNoPending = errors.New("no receipt waits for this countersignature")

// Countersigned matches a countersignature from coordinator to a receipt
// of a waiting for one, and returns that receipt, accepted. It fails when
// the signature verifies for none of them.
func (is *Issuer) Countersigned(a Attempt, coordinator string, sig []byte) (Receipt, error) {
	c := is.chains[a]
	if c == nil || len(c.pending) == 0 {
		return Receipt{}, ErrNoPending
	}
	key, err := PublicKey(coordinator)
	if err != nil {
		return Receipt{}, err
	}
	for i := len(c.pending) - 1; i >= 0; i-- {
		r := c.pending[i]
		if r.Coordinator != coordinator {
			continue
		}
		r.CoordSig = sig
		if ed25519.Verify(key, r.acceptMessage(), sig) {
			c.pending = c.pending[i+1:]
			return r, nil
		}
	}
	return Receipt{}, fmt.Errorf("%w: the countersignature from %s verifies for none of the %d receipts waiting", ErrBadSignature, short(coordinator), len(c.pending))
}

// Forget drops what the issuer holds of a (its end was acknowledged).
func (is *Issuer) Forget(a Attempt) { delete(is.chains, a) }

func (is *Issuer) chain(a Attempt) *chain {
	c := is.chains[a]
	if c == nil {
		if len(is.chains) >= maxChains {
			clear(is.chains) // attempts lost without an end: reread from disk when asked
		}
		c = &chain{}
		if is.last != nil {
			if r, ok := is.last(a); ok {
				c.last = r
			}
		}
		is.chains[a] = c
	}
	return c
}
