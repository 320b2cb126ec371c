package node

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/receipts"
	dto "github.com/prometheus/client_model/go"
)

// A job's bill is the sum of its signed receipts, across a reroute: the
// first runner is lost (its receipts up to then stand), the share runs
// again elsewhere, and the bill any node serves verifies.
func TestBillIsTheSumOfItsReceiptsAcrossAReroute(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1], sm.nodes[2])
	sm.waitBook(coord, 2)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "billed", Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, spec.ID, 20*time.Second, market.JobRunning)
	first, _ := livePlacement(rec)
	receipted := func(epoch uint64) bool {
		r, err := coord.Job(ctx, spec.ID)
		for _, p := range r.Placements {
			if p.Epoch == epoch && len(p.Receipt) > 0 && p.CardSeconds > 0 {
				return err == nil
			}
		}
		return false
	}
	eventually(t, 15*time.Second, "the first attempt's usage is receipted", func() bool { return receipted(first.Epoch) })

	if err := sm.net.Crash(sm.byID(first.Node).ID()); err != nil {
		t.Fatal(err)
	}
	var second market.Placement
	eventually(t, 30*time.Second, "the share runs again on the other node", func() bool {
		r, err := coord.Job(ctx, spec.ID)
		p, ok := livePlacement(r)
		second = p
		return err == nil && ok && p.Epoch > first.Epoch && p.Node != first.Node
	})
	eventually(t, 15*time.Second, "the second attempt's usage is receipted", func() bool { return receipted(second.Epoch) })
	if _, err := coord.Cancel(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the second attempt's end is billed", func() bool {
		r, _ := coord.Job(ctx, spec.ID)
		for _, p := range r.Placements {
			if p.Epoch == second.Epoch && p.State == market.PlacementStopped && len(p.Receipt) > 0 {
				rr, err := receipts.Unmarshal(p.Receipt)
				return err == nil && rr.Final
			}
		}
		return false
	})

	rec, err := coord.Job(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	bill, err := coord.billOf(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	b := receipts.Bill{Job: bill.Job, Coordinator: bill.Coordinator, Placements: bill.Placements, CardSeconds: bill.CardSeconds, CostCNY: bill.CostCNY}
	epochs := map[uint64]bool{}
	for _, raw := range bill.Receipts {
		r, err := receipts.Unmarshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		b.Receipts = append(b.Receipts, r)
		epochs[r.Epoch] = true
	}
	if !epochs[first.Epoch] || !epochs[second.Epoch] {
		t.Fatalf("receipts of epochs %v, want both attempts'", epochs)
	}
	rep := receipts.Verify(b)
	if !rep.OK() {
		t.Fatalf("the bill does not verify: %v", rep.Problems)
	}
	if rec.CostCNY <= 0 || math.Abs(rep.CostCNY-rec.CostCNY) > 1e-9 || math.Abs(rep.CardSeconds-rec.CardSeconds) > 1e-9 {
		t.Fatalf("receipts add up to %.6f CNY / %.3f card-seconds, the bill says %.6f / %.3f", rep.CostCNY, rep.CardSeconds, rec.CostCNY, rec.CardSeconds)
	}
	// Asked of a node that does not coordinate the job, the bill holds
	// the coordinator's whole chain too, and verifies the same.
	other, err := sm.byID(second.Node).billOf(ctx, rec)
	if err != nil || len(other.Receipts) != len(bill.Receipts) {
		t.Fatalf("the bill through the runner: %d receipts (%v), the coordinator's %d", len(other.Receipts), err, len(bill.Receipts))
	}
	// The runner that ran the second attempt holds it countersigned, once
	// the acknowledgement of its end reaches it (the coordinator sends it
	// when the job's replicas hold the record that billed it).
	runner := sm.byID(second.Node)
	var got []receipts.Earned
	eventually(t, 10*time.Second, "the runner holds its final receipt countersigned", func() bool {
		got, err = runner.trust.receipts.store.Issued(runner.id.String(), time.Time{})
		return err == nil && len(got) == 1 && got[0].Accepted.Seq > 0 && got[0].Accepted.Final
	})
}

// A renewal whose receipt is malformed, or signed by someone else, renews
// the lease but bills nothing; the receipt is counted as refused.
func TestABadReceiptIsRefusedAndCountedAndBillsNothing(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(runner)
	sm.waitBook(coord, 1)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "forged", Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "300"}}
	if _, err := coord.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, spec.ID, 20*time.Second, market.JobRunning)
	p, _ := livePlacement(rec)

	// A receipt signed with the coordinator's own key, claiming an hour.
	key, err := receipts.PrivateKey(coord.mesh.Host().Peerstore().PrivKey(coord.id))
	if err != nil {
		t.Fatal(err)
	}
	forged := receipts.Receipt{Network: coord.mesh.Network(), Job: spec.ID, Owner: rec.Spec.Owner, Share: p.Share, Epoch: p.Epoch, Term: rec.Term,
		Runner: runner.id.String(), Coordinator: coord.id.String(), Seq: 1000, At: time.Now(), Cards: 1, PriceCNY: p.PriceCNY, CardSeconds: 3600}
	forged.Sign(key)
	for name, raw := range map[string][]byte{"malformed": []byte("not a receipt"), "bad_signature": forged.Marshal()} {
		before := counterValue(t, coord, name)
		data, err := market.EncodeMessage(market.Message{From: runner.id.String(), To: coord.id.String(),
			Payload: &market.Renewal{Job: spec.ID, Term: rec.Term, Share: p.Share, Epoch: p.Epoch, Started: true, CardSeconds: 3600, Receipt: raw}})
		if err != nil {
			t.Fatal(err)
		}
		coord.receive(gossip.Message{Sender: runner.id, Kind: kindMarket, Data: data})
		eventually(t, 5*time.Second, "the refused receipt is counted as "+name, func() bool { return counterValue(t, coord, name) == before+1 })
	}
	rec, err = coord.Job(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.CardSeconds >= 3600 || rec.State != market.JobRunning {
		t.Fatalf("after forged receipts the job is %s with %.1f card-seconds billed", rec.State, rec.CardSeconds)
	}
}

// counterValue reads gpumesh_receipts_rejected_total{reason} of n.
func counterValue(t *testing.T, n *Node, reason string) float64 {
	t.Helper()
	var v float64
	if err := n.do(context.Background(), func() {
		var m dto.Metric
		if err := n.trust.receipts.rejected.WithLabelValues(reason).Write(&m); err == nil {
			v = m.GetCounter().GetValue()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// An attempt's end is reported until it is acknowledged, and under load a
// report goes again before its acknowledgement comes. The repeat carries
// the receipt the coordinator accepted: it is countersigned again but not
// counted as accepted again, and the runner, which took the
// countersignature the first time, counts the repeat as no_pending, not
// as a bad signature. (A burst of cancels on 40 nodes counted 250 bad
// signatures, every one of them such a repeat.)
func TestARepeatedEndReportIsNeitherAcceptedTwiceNorABadSignature(t *testing.T) {
	sm := newSimMesh(t, "", "a100-80g:1")
	runner := sm.nodes[1]
	ctx := context.Background()
	const id = "repeat"
	_, coord, _ := runOnTheRunner(t, sm, id)
	if _, err := coord.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	var final market.Placement
	eventually(t, 20*time.Second, "the attempt's end is billed", func() bool {
		r, _ := coord.Job(ctx, id)
		for _, p := range r.Placements {
			if p.State == market.PlacementStopped && len(p.Receipt) > 0 {
				rr, err := receipts.Unmarshal(p.Receipt)
				final = p
				return err == nil && rr.Final
			}
		}
		return false
	})
	eventually(t, 10*time.Second, "the runner holds its final receipt countersigned", func() bool {
		got, err := runner.trust.receipts.store.Issued(runner.id.String(), time.Time{})
		return err == nil && len(got) == 1 && got[0].Accepted.Final
	})
	r, err := receipts.Unmarshal(final.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	accepted := receiptCount(t, coord, "coordinator", "accepted")
	bad, noPending := counterValue(t, runner, "bad_signature"), counterValue(t, runner, "no_pending")

	data, err := market.EncodeMessage(market.Message{From: runner.id.String(), To: coord.id.String(),
		Payload: &market.AttemptEnded{Job: id, Share: final.Share, Epoch: final.Epoch, Cause: market.CauseStopped,
			CardSeconds: r.CardSeconds, Receipt: final.Receipt}})
	if err != nil {
		t.Fatal(err)
	}
	coord.receive(gossip.Message{Sender: runner.id, Kind: kindMarket, Data: data})
	eventually(t, 10*time.Second, "the runner got the repeated countersignature", func() bool {
		return counterValue(t, runner, "no_pending") == noPending+1
	})
	if got := counterValue(t, runner, "bad_signature"); got != bad {
		t.Errorf("the runner counted %v bad signatures, was %v", got, bad)
	}
	if got := receiptCount(t, coord, "coordinator", "accepted"); got != accepted {
		t.Errorf("the coordinator counted %v receipts accepted after the repeat, %v before", got, accepted)
	}
}

// receiptCount reads gpumesh_receipts_total{role, result} of n.
func receiptCount(t *testing.T, n *Node, role, result string) float64 {
	t.Helper()
	var v float64
	if err := n.do(context.Background(), func() {
		var m dto.Metric
		if err := n.trust.receipts.counts.WithLabelValues(role, result).Write(&m); err == nil {
			v = m.GetCounter().GetValue()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return v
}
