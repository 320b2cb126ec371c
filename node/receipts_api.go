package node

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/receipts"
	"github.com/libp2p/go-libp2p/core/peer"
)

var (
	_ api.BillReader     = tenantAPI{}
	_ api.EarningsReader = tenantAPI{}
)

// Bill implements api.BillReader for the job's owner: the record from
// whichever peer holds it, with each placement's latest receipt, and every
// receipt of the job this node holds.
func (t tenantAPI) Bill(ctx context.Context, id string) (api.Bill, error) {
	rec, err := t.own(ctx, id)
	if err != nil {
		return api.Bill{}, err
	}
	return t.Node.billOf(ctx, rec)
}

// billOf assembles rec's bill from the record and this node's receipts.
func (n *Node) billOf(ctx context.Context, rec market.JobRecord) (api.Bill, error) {
	b := api.Bill{Job: rec.ID, Owner: rec.Spec.Owner, State: rec.State, Coordinator: rec.Coordinator,
		CardSeconds: rec.CardSeconds, CostCNY: rec.CostCNY, Placements: rec.Placements, Receipts: [][]byte{}, From: n.self}
	type key struct {
		share      int
		epoch, seq uint64
	}
	byKey := map[key]receipts.Receipt{}
	add := func(r receipts.Receipt) {
		k := key{r.Share, r.Epoch, r.Seq}
		if old, ok := byKey[k]; ok && len(old.CoordSig) > 0 && len(r.CoordSig) == 0 {
			return // keep the countersigned one
		}
		byKey[k] = r
	}
	for _, p := range rec.Placements {
		if len(p.Receipt) > 0 {
			if r, err := receipts.Unmarshal(p.Receipt); err == nil {
				add(r)
			}
		}
	}
	if rs := n.trust.receipts; rs != nil {
		held, _, err := rs.store.Job(rec.ID)
		if err != nil {
			return api.Bill{}, &api.HTTPError{Status: http.StatusInternalServerError, Err: err}
		}
		for _, r := range held {
			if len(r.CoordSig) > 0 { // what a coordinator accepted, not what a runner only issued
				add(r)
			}
		}
	}
	if rec.Coordinator != n.self {
		// The coordinator holds the whole chain it accepted; without it
		// the record's receipts still prove the sums.
		for _, raw := range n.coordinatorReceipts(ctx, rec) {
			if r, err := receipts.Unmarshal(raw); err == nil && r.Job == rec.ID && len(r.CoordSig) > 0 {
				add(r)
			}
		}
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y key) int {
		return cmp.Or(cmp.Compare(x.share, y.share), cmp.Compare(x.epoch, y.epoch), cmp.Compare(x.seq, y.seq))
	})
	for _, k := range keys {
		r := byKey[k]
		b.Receipts = append(b.Receipts, r.Marshal())
	}
	return b, nil
}

// ReceiptEarnings implements api.EarningsReader: what this node's attempts
// are owed since since, by owner and job, from their receipts, beside what
// the earnings ledger counts.
func (t tenantAPI) ReceiptEarnings(ctx context.Context, since time.Time) (api.ReceiptEarnings, error) {
	n := t.Node
	out := api.ReceiptEarnings{Node: n.self, Since: since, ByOwner: []api.OwnerEarned{}, ByJob: []api.JobEarned{}}
	if err := n.do(ctx, func() {
		if s := n.ledger.summary(time.Now()); s != nil {
			out.Ledger = s.Total
		}
	}); err != nil {
		return out, err
	}
	rs := n.trust.receipts
	if rs == nil {
		return out, nil
	}
	earned, err := rs.store.Issued(n.self, since)
	if err != nil {
		return out, &api.HTTPError{Status: http.StatusInternalServerError, Err: err}
	}
	jobs := map[string]*api.JobEarned{}
	owners := map[string]*api.OwnerEarned{}
	for _, e := range earned {
		r := e.Newest
		j := jobs[r.Job]
		if j == nil {
			j = &api.JobEarned{Job: r.Job, Owner: r.Owner}
			jobs[r.Job] = j
		}
		o := owners[r.Owner]
		if o == nil {
			o = &api.OwnerEarned{Owner: r.Owner}
			owners[r.Owner] = o
		}
		acc := api.Earned{}
		if e.Accepted.Seq > 0 {
			acc = api.Earned{CNY: e.Accepted.CostCNY(), CardSeconds: e.Accepted.CardSeconds}
		}
		unconf := api.Earned{CNY: r.CostCNY() - acc.CNY, CardSeconds: r.CardSeconds - acc.CardSeconds}
		j.Attempts++
		j.Earned, j.Unconfirmed = j.Earned.Add(acc), j.Unconfirmed.Add(unconf)
		if r.At.After(j.Last) {
			j.Last = r.At
		}
		o.Earned, o.Unconfirmed = o.Earned.Add(acc), o.Unconfirmed.Add(unconf)
		out.Total, out.Unconfirmed = out.Total.Add(acc), out.Unconfirmed.Add(unconf)
	}
	for _, j := range jobs {
		out.ByJob = append(out.ByJob, *j)
	}
	for _, o := range owners {
		o.Jobs = 0
		for _, j := range jobs {
			if j.Owner == o.Owner {
				o.Jobs++
			}
		}
		out.ByOwner = append(out.ByOwner, *o)
	}
	slices.SortFunc(out.ByJob, func(x, y api.JobEarned) int {
		return cmp.Or(cmp.Compare(y.Earned.CNY+y.Unconfirmed.CNY, x.Earned.CNY+x.Unconfirmed.CNY), cmp.Compare(x.Job, y.Job))
	})
	slices.SortFunc(out.ByOwner, func(x, y api.OwnerEarned) int {
		return cmp.Or(cmp.Compare(y.Earned.CNY+y.Unconfirmed.CNY, x.Earned.CNY+x.Unconfirmed.CNY), cmp.Compare(x.Owner, y.Owner))
	})
	return out, nil
}

// kindReceipts asks a job's coordinator for the receipts it accepted: a
// job ID (a JSON string) → the encoded receipts (a JSON list).
const kindReceipts = "receipts.job"

// coordinatorReceipts asks rec's coordinator for the receipts it holds of
// the job; none when it cannot be asked within 3 s.
func (n *Node) coordinatorReceipts(ctx context.Context, rec market.JobRecord) [][]byte {
	to, err := peer.Decode(rec.Coordinator)
	if err != nil {
		return nil
	}
	data, _ := json.Marshal(rec.ID)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out [][]byte
	err = n.direct.Call(ctx, to, kindReceipts, data, func(m gossip.Message) error {
		var part [][]byte
		if err := json.Unmarshal(m.Data, &part); err != nil {
			return err
		}
		if len(out)+len(part) > maxBillReceipts {
			return fmt.Errorf("over %d receipts", maxBillReceipts)
		}
		out = append(out, part...)
		return nil
	})
	if err != nil {
		n.log.Info("the coordinator's receipts could not be fetched; the bill rests on the record's", "job", rec.ID, "err", err)
	}
	return out
}

// maxBillReceipts bounds the receipts a bill gathers from a coordinator.
const maxBillReceipts = 200_000

// receiptsPerFrame is how many receipts one reply frame carries (about
// 300 bytes each, within the direct protocol's frame limit).
const receiptsPerFrame = 4096

// serveReceipts answers kindReceipts with the countersigned receipts this
// node holds of a job. Receipts are no more private than the job's record,
// which its replicas hold: like a record, they are served to members.
func (n *Node) serveReceipts(req gossip.Message, reply func(string, []byte) error) error {
	var id string
	if err := strictJSON(req.Data, &id); err != nil || market.ValidateJobID(id) != nil {
		return asCallError(api.Errorf(http.StatusBadRequest, "receipts: want a job ID"))
	}
	rs := n.trust.receipts
	if rs == nil {
		return reply(kindReceipts, []byte("[]"))
	}
	held, _, err := rs.store.Job(id)
	if err != nil {
		return err
	}
	var frame [][]byte
	flush := func() error {
		b, err := json.Marshal(frame)
		if err != nil {
			return err
		}
		frame = frame[:0]
		return reply(kindReceipts, b)
	}
	for _, r := range held {
		if len(r.CoordSig) == 0 {
			continue
		}
		frame = append(frame, r.Marshal())
		if len(frame) == receiptsPerFrame {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
