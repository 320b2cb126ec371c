package node

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/receipts"
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
	return t.Node.billOf(rec)
}

// billOf assembles rec's bill from the record and this node's receipts.
func (n *Node) billOf(rec market.JobRecord) (api.Bill, error) {
	b := api.Bill{Job: rec.ID, Owner: rec.Spec.Owner, State: rec.State, Coordinator: rec.Coordinator,
		CardSeconds: rec.CardSeconds, CostCNY: rec.CostCNY, Placements: rec.Placements, Receipts: [][]byte{}, From: n.id.String()}
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
	out := api.ReceiptEarnings{Node: n.id.String(), Since: since, ByOwner: []api.OwnerEarned{}, ByJob: []api.JobEarned{}}
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
	earned, err := rs.store.Issued(n.id.String(), since)
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
