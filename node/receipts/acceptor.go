package receipts

import (
	"crypto/ed25519"
	"errors"
	"fmt"
)

// Expect is what a coordinator knows of an attempt and its report, which a
// receipt must state.
type Expect struct {
	Attempt
	Runner      string
	Term        uint64 // the renewal's term; 0 for an end report
	CardSeconds float64
	Final       bool
	Owner       string
	Cards       int
	PriceCNY    float64
}

// Acceptor checks the receipts runners send a coordinator and countersigns
// them. Not safe for concurrent use: node's driver owns it.
type Acceptor struct {
	network, self string
	key           ed25519.PrivateKey
	keys          keyCache
	// last returns the newest receipt of an attempt this coordinator
	// accepted, from disk; may be nil.
	last     func(Attempt) (Receipt, bool)
	accepted map[Attempt]Receipt
}

// NewAcceptor returns the acceptor of coordinator self on network.
func NewAcceptor(network, self string, key ed25519.PrivateKey, last func(Attempt) (Receipt, bool)) *Acceptor {
	return &Acceptor{network: network, self: self, key: key, keys: keyCache{}, last: last, accepted: map[Attempt]Receipt{}}
}

// ErrMismatch: a receipt that verifies but does not state what it came
// with (another attempt, other usage, another price).
var ErrMismatch = errors.New("receipt does not match its report")

// Check decodes b, a receipt that came with a report e, and checks it: its
// fields, the runner's signature, that it states e, and that it follows the
// newest receipt of the attempt this coordinator accepted. It returns the
// receipt countersigned by this coordinator, not yet accepted (Accepted).
func (ac *Acceptor) Check(b []byte, e Expect) (Receipt, error) {
	r, err := Unmarshal(b)
	if err != nil {
		return Receipt{}, err
	}
	key, err := ac.keys.get(e.Runner)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	r.CoordSig = nil
	if err := r.VerifyRunner(key); err != nil {
		return Receipt{}, err
	}
	mismatch := func(what string, got, want any) error {
		return fmt.Errorf("%w: %s %v, the report says %v", ErrMismatch, what, got, want)
	}
	switch {
	case r.Network != ac.network:
		return Receipt{}, mismatch("network", r.Network, ac.network)
	case r.Runner != e.Runner:
		return Receipt{}, mismatch("runner", short(r.Runner), short(e.Runner))
	case r.Coordinator != ac.self:
		return Receipt{}, mismatch("coordinator", short(r.Coordinator), short(ac.self))
	case r.Job != e.Job || r.Share != e.Share || r.Epoch != e.Epoch:
		return Receipt{}, mismatch("attempt", fmt.Sprintf("%s/%d/%d", r.Job, r.Share, r.Epoch), fmt.Sprintf("%s/%d/%d", e.Job, e.Share, e.Epoch))
	case e.Term != 0 && r.Term != e.Term:
		return Receipt{}, mismatch("term", r.Term, e.Term)
	case r.CardSeconds != e.CardSeconds:
		return Receipt{}, mismatch("card-seconds", r.CardSeconds, e.CardSeconds)
	case r.Final != e.Final:
		return Receipt{}, mismatch("final", r.Final, e.Final)
	case r.Owner != e.Owner:
		return Receipt{}, mismatch("owner", r.Owner, e.Owner)
	case r.Cards != e.Cards:
		return Receipt{}, mismatch("cards", r.Cards, e.Cards)
	case r.PriceCNY != e.PriceCNY:
		return Receipt{}, mismatch("price", r.PriceCNY, e.PriceCNY)
	}
	if prev, ok := ac.newest(e.Attempt); ok {
		switch {
		case r.Seq <= prev.Seq && !r.Repeats(&prev):
			return Receipt{}, fmt.Errorf("%w: receipt %d after receipt %d was accepted", ErrMismatch, r.Seq, prev.Seq)
		case r.Seq == prev.Seq+1 && r.Prev != prev.Hash():
			return Receipt{}, fmt.Errorf("%w: receipt %d does not follow the receipt %d accepted", ErrMismatch, r.Seq, prev.Seq)
		case r.CardSeconds < prev.CardSeconds:
			return Receipt{}, fmt.Errorf("%w: %v card-seconds after %v were accepted", ErrMismatch, r.CardSeconds, prev.CardSeconds)
		}
	}
	r.Accept(ac.key)
	return r, nil
}

// Accepted records r as the newest receipt of its attempt accepted into
// the bill. It reports whether r is new: false for a repeat of the receipt
// accepted last (a report sent again, its acknowledgement not yet come),
// which Check lets through so that the runner gets its countersignature
// again.
func (ac *Acceptor) Accepted(r Receipt) (fresh bool) {
	a := Attempt{r.Job, r.Share, r.Epoch}
	if prev, ok := ac.newest(a); ok && r.Repeats(&prev) {
		return false
	}
	if len(ac.accepted) > 1<<16 {
		clear(ac.accepted) // reread from disk as needed
	}
	ac.accepted[a] = r
	return true
}

func (ac *Acceptor) newest(a Attempt) (Receipt, bool) {
	if r, ok := ac.accepted[a]; ok {
		return r, true
	}
	if ac.last != nil {
		if r, ok := ac.last(a); ok {
			ac.accepted[a] = r
			return r, true
		}
	}
	return Receipt{}, false
}
