package node

import (
	"bytes"
	"errors"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/receipts"
	"github.com/prometheus/client_golang/prometheus"
)

// Receipts on the wire (node/receipts): a runner's renewals carry a signed
// receipt every receipts.DefaultInterval and its end report one always; the
// coordinator checks and countersigns each before the market sees it, keeps
// it when the market bills it, and sends the countersignature back with the
// acknowledgement. A receipt that fails a check is taken off its message
// (the renewal still renews the lease; its usage is not billed), counted in
// gpumesh_receipts_rejected_total and logged. Everything here runs on the
// driver, and what it stores joins the driver's turn (Node.turn.ops): it
// is written with the decisions of that turn, before any message of the
// turn leaves, and the driver never waits for the disk.

// receiptState is the node's receipts subsystem.
type receiptState struct {
	issuer   *receipts.Issuer
	acceptor *receipts.Acceptor
	store    *receipts.Store
	// cosigs are countersignatures to send with the next acknowledgement
	// of an attempt's report.
	cosigs map[receipts.Attempt][]byte
	// counted by role and result; rejected by reason.
	counts   *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

// startReceipts makes the subsystem; without an ed25519 identity (never, in
// practice) there is none and usage is billed from renewals as before.
func (n *Node) startReceipts() *receiptState {
	key, err := receipts.PrivateKey(n.mesh.Host().Peerstore().PrivKey(n.id))
	if err != nil {
		n.log.Warn("no usage receipts", "err", err)
		return nil
	}
	self := n.self
	st := receipts.NewStore(n.store)
	rs := &receiptState{
		store: st,
		issuer: receipts.NewIssuer(n.mesh.Network(), self, key, receipts.DefaultInterval, func(a receipts.Attempt) (receipts.Receipt, bool) {
			return st.Last(a, func(r receipts.Receipt) bool { return r.Runner == self })
		}),
		acceptor: receipts.NewAcceptor(n.mesh.Network(), self, key, func(a receipts.Attempt) (receipts.Receipt, bool) {
			return st.Last(a, func(r receipts.Receipt) bool { return r.Coordinator == self && len(r.CoordSig) > 0 })
		}),
		cosigs: map[receipts.Attempt][]byte{},
		counts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_receipts_total",
			Help: "Usage receipts: issued and countersigned (role runner), accepted into bills (role coordinator).",
		}, []string{"role", "result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_receipts_rejected_total",
			Help: "Usage receipts and countersignatures refused, by reason (malformed, bad_signature, mismatch, no_pending: a countersignature for no receipt waiting, most often a repeat, as an attempt's end is acknowledged once for each time it was reported).",
		}, []string{"reason"}),
	}
	for _, l := range [][2]string{{"runner", "issued"}, {"runner", "countersigned"}, {"coordinator", "accepted"}} {
		rs.counts.WithLabelValues(l[0], l[1])
	}
	for _, r := range []string{"malformed", "bad_signature", "mismatch", "no_pending"} {
		rs.rejected.WithLabelValues(r)
	}
	if n.obs != nil && n.obs.m != nil {
		_ = n.obs.m.Registerer().Register(rs.counts)
		_ = n.obs.m.Registerer().Register(rs.rejected)
	}
	return rs
}

// reject counts and logs a refused receipt.
func (rs *receiptState) reject(n *Node, err error, from string, what string) {
	reason := "mismatch"
	switch {
	case errors.Is(err, receipts.ErrMalformed):
		reason = "malformed"
	case errors.Is(err, receipts.ErrBadSignature):
		reason = "bad_signature"
	case errors.Is(err, receipts.ErrNoPending):
		reason = "no_pending"
	}
	rs.rejected.WithLabelValues(reason).Inc()
	n.log.Info("usage receipt refused", "what", what, "from", from, "err", err)
}

// receiptsOut attaches receipts and countersignatures to the market's
// outgoing messages as a turn decides them (drain): it returns msgs with
// the payloads it changed copied (the market's own are not touched).
func (n *Node) receiptsOut(msgs []market.Message) []market.Message {
	rs := n.trust.receipts
	if rs == nil {
		return msgs
	}
	var out []market.Message
	set := func(i int, p market.Payload) {
		if out == nil {
			out = append([]market.Message(nil), msgs...)
		}
		out[i].Payload = p
	}
	now := time.Now()
	for i, m := range msgs {
		switch p := m.Payload.(type) {
		case *market.Renewal:
			a := receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}
			if !p.Started || !rs.issuer.Due(a, p.CardSeconds, now) {
				continue
			}
			if b := n.issue(a, m.To, p.Term, p.CardSeconds, false, now); b != nil {
				cp := *p
				cp.Receipt = b
				set(i, &cp)
			}
		case *market.AttemptEnded:
			if p.CardSeconds <= 0 {
				continue
			}
			a := receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}
			if b := n.issue(a, m.To, 0, p.CardSeconds, true, now); b != nil {
				cp := *p
				cp.Receipt = b
				set(i, &cp)
			}
		case *market.RenewalAck:
			a := receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}
			if sig := rs.cosigs[a]; sig != nil {
				delete(rs.cosigs, a)
				cp := *p
				cp.Countersig = sig
				set(i, &cp)
			}
		case *market.EndAck:
			a := receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}
			if sig := rs.cosigs[a]; sig != nil {
				delete(rs.cosigs, a)
				cp := *p
				cp.Countersig = sig
				set(i, &cp)
			}
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// issue makes and returns the next receipt of attempt a for coordinator
// to (term 0: the attempt's own), written with this turn, or nil when the
// attempt is unknown (the report then goes without one).
func (n *Node) issue(a receipts.Attempt, to string, term uint64, cardSeconds float64, final bool, now time.Time) []byte {
	rs := n.trust.receipts
	at, ok := n.mk.Attempt(a.Job, a.Share, a.Epoch)
	if !ok {
		return nil
	}
	if term == 0 {
		term = at.Term
	}
	r := rs.issuer.Issue(a, receipts.Terms{Owner: at.Owner, Coordinator: to, Term: term, Cards: len(at.Cards), PriceCNY: at.PriceCNY},
		cardSeconds, final, now)
	n.turn.ops = append(n.turn.ops, receipts.Ops(r)...)
	rs.counts.WithLabelValues("runner", "issued").Inc()
	return r.Marshal()
}

// receiptsIn checks the receipt or countersignature a message carries
// before the market steps it; it returns what to do once it has.
func (n *Node) receiptsIn(msg *market.Message) (after func()) {
	rs := n.trust.receipts
	if rs == nil {
		return nil
	}
	switch p := msg.Payload.(type) {
	case *market.Renewal:
		if len(p.Receipt) > 0 {
			cp := *p
			msg.Payload = &cp
			return n.checkReceipt(msg.From, &cp.Receipt, receipts.Expect{
				Attempt: receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}, Runner: msg.From,
				Term: p.Term, CardSeconds: p.CardSeconds})
		}
	case *market.AttemptEnded:
		if len(p.Receipt) > 0 {
			cp := *p
			msg.Payload = &cp
			return n.checkReceipt(msg.From, &cp.Receipt, receipts.Expect{
				Attempt: receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}, Runner: msg.From,
				CardSeconds: p.CardSeconds, Final: true})
		}
	case *market.RenewalAck:
		n.countersigned(msg.From, receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}, p.Countersig)
	case *market.EndAck:
		a := receipts.Attempt{Job: p.Job, Share: p.Share, Epoch: p.Epoch}
		n.countersigned(msg.From, a, p.Countersig)
		return func() { rs.issuer.Forget(a) }
	}
	return nil
}

// checkReceipt checks the receipt at *b, which came from runner with a
// report e, against the placement this node coordinates: a good one is
// replaced by its countersigned form, a bad one taken off. After the
// market stepped the report, a receipt it billed is accepted: stored, and
// its countersignature queued for the acknowledgement.
func (n *Node) checkReceipt(runner string, b *[]byte, e receipts.Expect) func() {
	rs := n.trust.receipts
	pl, owner, ok := n.mk.Placement(e.Job, e.Share, e.Epoch)
	if !ok {
		*b = nil // not an attempt of a job held here: the market answers it
		return nil
	}
	e.Owner, e.Cards, e.PriceCNY = owner, len(pl.Cards), pl.PriceCNY
	r, err := rs.acceptor.Check(*b, e)
	if err != nil {
		*b = nil
		rs.reject(n, err, runner, "receipt")
		return nil
	}
	signed := r.Marshal()
	*b = signed
	return func() {
		pl, _, ok := n.mk.Placement(e.Job, e.Share, e.Epoch)
		if !ok || !bytes.Equal(pl.Receipt, signed) {
			return // not billed (a stale attempt, usage over what the cards could run)
		}
		if len(rs.cosigs) >= 4096 {
			clear(rs.cosigs) // acknowledgements that never went (stale attempts)
		}
		// A repeat (the report came again: its acknowledgement was lost
		// or is late) is countersigned again and written nowhere.
		rs.cosigs[e.Attempt] = r.CoordSig
		if !rs.acceptor.Accepted(r) {
			return
		}
		n.turn.ops = append(n.turn.ops, receipts.Ops(r)...) // before the acknowledgement leaves
		rs.counts.WithLabelValues("coordinator", "accepted").Inc()
	}
}

// countersigned stores this node's receipt that coordinator's
// countersignature sig accepts.
func (n *Node) countersigned(coordinator string, a receipts.Attempt, sig []byte) {
	if len(sig) == 0 {
		return
	}
	rs := n.trust.receipts
	r, err := rs.issuer.Countersigned(a, coordinator, sig)
	if err != nil {
		rs.reject(n, err, coordinator, "countersignature")
		return
	}
	n.turn.ops = append(n.turn.ops, receipts.Ops(r)...)
	rs.counts.WithLabelValues("runner", "countersigned").Inc()
}
