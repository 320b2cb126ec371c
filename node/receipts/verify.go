package receipts

import (
	"cmp"
	"crypto/ed25519"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Bill is what Verify checks: a job's placements and totals as its
// coordinator's record states them, and the receipts that prove them.
type Bill struct {
	Job string
	// Coordinator is the coordinator the record names.
	Coordinator string
	Placements  []market.Placement
	CardSeconds float64
	CostCNY     float64
	Receipts    []Receipt
}

// Report is Verify's finding.
type Report struct {
	// Receipts is the number checked; Signatures the signatures verified.
	Receipts, Signatures int
	// CardSeconds and CostCNY are what the receipts add up to: the newest
	// receipt of every attempt, and the usage of shares the coordinator
	// ran on its own cards (Unreceipted of them: its word alone).
	CardSeconds, CostCNY float64
	Unreceipted          float64
	// Problems lists what is wrong, one line each; none: the bill holds.
	Problems []string
	// Notes say what the bill rests on without being wrong: receipts of
	// an attempt not held by the node that answered (its sums rest on the
	// newest, which covers them), shares billed on their coordinator's own
	// cards (no one but the coordinator signs for those).
	Notes []string
}

// OK reports whether the bill holds.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// supersededGrace is how long after a share's next epoch was awarded a
// receipt of the earlier one may still be dated (the runner's clock may
// run ahead of the coordinator's).
const supersededGrace = time.Minute

// centsEps is the tolerance of sums of money and usage: floating-point
// rounding, far below a fen.
const centsEps = 1e-6

// Verify checks a bill from its receipts alone: every receipt decodes and
// carries a valid runner signature and coordinator countersignature (the
// peer IDs it names are the keys); the receipts of each attempt form a
// chain (consecutive numbers name each other's hashes, usage never falls,
// the terms never change); each is of an attempt the job placed, signed by
// that placement's runner, and not dated after the share's next epoch was
// awarded (epoch fencing); and each placement's usage and cost, and the
// job's, equal the newest receipts'. Signatures are checked in parallel.
func Verify(b Bill) Report {
	var rep Report
	problem := func(format string, args ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...)) }
	note := func(format string, args ...any) { rep.Notes = append(rep.Notes, fmt.Sprintf(format, args...)) }
	rs := slices.Clone(b.Receipts)
	slices.SortStableFunc(rs, func(x, y Receipt) int {
		return cmp.Or(cmp.Compare(x.Share, y.Share), cmp.Compare(x.Epoch, y.Epoch), cmp.Compare(x.Seq, y.Seq))
	})
	rep.Receipts = len(rs)
	name := func(r *Receipt) string {
		return fmt.Sprintf("receipt %d of share %d epoch %d", r.Seq, r.Share, r.Epoch)
	}

	// Signatures, in parallel.
	errs := make([]error, len(rs))
	keys := map[string]any{} // peer ID → ed25519.PublicKey or error
	for _, r := range rs {
		for _, id := range []string{r.Runner, r.Coordinator} {
			if _, ok := keys[id]; !ok {
				if k, err := PublicKey(id); err != nil {
					keys[id] = err
				} else {
					keys[id] = k
				}
			}
		}
	}
	var wg sync.WaitGroup
	workers := max(1, runtime.GOMAXPROCS(0))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(rs); i += workers {
				r := &rs[i]
				rk, ck := keys[r.Runner], keys[r.Coordinator]
				if err, ok := rk.(error); ok {
					errs[i] = err
					continue
				}
				if err, ok := ck.(error); ok {
					errs[i] = err
					continue
				}
				errs[i] = r.VerifyAccepted(rk.(ed25519.PublicKey), ck.(ed25519.PublicKey))
			}
		}()
	}
	wg.Wait()
	for i := range rs {
		if errs[i] != nil {
			problem("%s: %v", name(&rs[i]), errs[i])
		} else {
			rep.Signatures += 2
		}
	}

	placements := map[[2]uint64]*market.Placement{}
	nextAward := map[[2]uint64]time.Time{} // a share's epoch → when its next epoch was awarded
	byShare := map[int][]*market.Placement{}
	for i := range b.Placements {
		p := &b.Placements[i]
		placements[[2]uint64{uint64(p.Share), p.Epoch}] = p
		byShare[p.Share] = append(byShare[p.Share], p)
	}
	for share, ps := range byShare {
		slices.SortFunc(ps, func(x, y *market.Placement) int { return cmp.Compare(x.Epoch, y.Epoch) })
		for i := 0; i+1 < len(ps); i++ {
			nextAward[[2]uint64{uint64(share), ps[i].Epoch}] = ps[i+1].AwardedAt
		}
	}

	// Chains, fencing.
	newest := map[[2]uint64]*Receipt{}
	for i := range rs {
		r := &rs[i]
		if r.Job != b.Job {
			problem("%s: of job %s, not %s", name(r), r.Job, b.Job)
			continue
		}
		k := [2]uint64{uint64(r.Share), r.Epoch}
		p := placements[k]
		switch {
		case p == nil:
			problem("%s: the job never placed share %d under epoch %d", name(r), r.Share, r.Epoch)
		case p.Node != r.Runner:
			problem("%s: signed by %s, but %s ran the attempt", name(r), short(r.Runner), short(p.Node))
		case r.PriceCNY != p.PriceCNY || r.Cards != len(p.Cards):
			problem("%s: %d cards at %.4f CNY per card-hour, the placement %d at %.4f", name(r), r.Cards, r.PriceCNY, len(p.Cards), p.PriceCNY)
		}
		if next, ok := nextAward[k]; ok && r.At.After(next.Add(supersededGrace)) {
			problem("%s: from a superseded epoch: signed %s, after epoch %d was replaced at %s", name(r),
				r.At.UTC().Format(time.RFC3339), r.Epoch, next.UTC().Format(time.RFC3339))
		}
		prev := newest[k]
		if prev != nil {
			switch {
			case r.Seq == prev.Seq:
				problem("%s: two receipts with this number", name(r))
			case r.Seq == prev.Seq+1 && r.Prev != prev.Hash():
				problem("%s: does not follow receipt %d (its hash differs)", name(r), prev.Seq)
			case r.Seq > prev.Seq+1:
				note("receipts %d to %d of share %d epoch %d are not in the bill; receipt %d covers them", prev.Seq+1, r.Seq-1, r.Share, r.Epoch, r.Seq)
			case r.CardSeconds < prev.CardSeconds:
				problem("%s: %.3f card-seconds after %.3f", name(r), r.CardSeconds, prev.CardSeconds)
			case prev.Final:
				problem("%s: after the attempt's final receipt", name(r))
			case r.Owner != prev.Owner || r.Runner != prev.Runner || r.PriceCNY != prev.PriceCNY || r.Cards != prev.Cards:
				problem("%s: its owner, runner, cards or price differ from receipt %d's", name(r), prev.Seq)
			}
		} else if r.Seq > 1 {
			note("receipts 1 to %d of share %d epoch %d are not in the bill; receipt %d covers them", r.Seq-1, r.Share, r.Epoch, r.Seq)
		}
		newest[k] = r
	}

	// Sums.
	for _, p := range b.Placements {
		k := [2]uint64{uint64(p.Share), p.Epoch}
		r := newest[k]
		switch {
		case r == nil && p.CardSeconds > 0 && p.Node == b.Coordinator:
			note("share %d epoch %d ran on its coordinator's own cards: its %.3f card-seconds are the coordinator's word, with no receipt", p.Share, p.Epoch, p.CardSeconds)
			rep.CardSeconds += p.CardSeconds
			rep.CostCNY += p.CostCNY
			rep.Unreceipted += p.CardSeconds
		case r == nil && p.CardSeconds > 0:
			problem("share %d epoch %d: billed %.3f card-seconds with no receipt", p.Share, p.Epoch, p.CardSeconds)
		case r == nil:
		case math.Abs(r.CardSeconds-p.CardSeconds) > centsEps:
			problem("share %d epoch %d: billed %.3f card-seconds, its receipts say %.3f", p.Share, p.Epoch, p.CardSeconds, r.CardSeconds)
		case math.Abs(r.CostCNY()-p.CostCNY) > centsEps*max(1, p.CostCNY):
			problem("share %d epoch %d: billed %.6f CNY, its receipts say %.6f", p.Share, p.Epoch, p.CostCNY, r.CostCNY())
		}
	}
	for _, r := range newest {
		rep.CardSeconds += r.CardSeconds
		rep.CostCNY += r.CostCNY()
	}
	if math.Abs(rep.CardSeconds-b.CardSeconds) > centsEps*max(1, b.CardSeconds) {
		problem("the bill says %.3f card-seconds, the receipts add up to %.3f", b.CardSeconds, rep.CardSeconds)
	}
	if math.Abs(rep.CostCNY-b.CostCNY) > centsEps*max(1, b.CostCNY) {
		problem("the bill says %.6f CNY, the receipts add up to %.6f", b.CostCNY, rep.CostCNY)
	}
	return rep
}
