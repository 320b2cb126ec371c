package receipts

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Run: go test -run '^$' -bench Verify10000 -benchtime 5x ./node/receipts/
//
// A bill of 10,000 receipts (20 attempts of 500 receipts each: 41 hours
// of one card at one receipt per 5 s, or 20 cards for 2 hours), every
// signature and link checked. Target: under 1 s.
func BenchmarkVerify10000(b *testing.B) {
	coord := newParty(b, 1)
	var runs []attemptRun
	for i := range 20 {
		runs = append(runs, attemptRun{runner: newParty(b, byte(10+i)), epoch: uint64(i + 1), start: t0.Add(time.Duration(i) * time.Hour), seconds: 499*5 + 1, final: true})
	}
	bill := runBill(b, coord, runs)
	for i := range bill.Placements {
		bill.Placements[i].AwardedAt = t0.Add(time.Duration(i) * time.Hour)
	}
	if len(bill.Receipts) != 10000 {
		b.Fatalf("%d receipts", len(bill.Receipts))
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		if rep := Verify(bill); !rep.OK() || rep.Signatures != 20000 {
			b.Fatalf("%v", rep.Problems[:min(3, len(rep.Problems))])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/bill")
	// CPU time says what the wall time would be on idle cores: the shared
	// machine's load stretches the wall time.
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/bill")
}

// Run: go test -run '^$' -bench LeaseBytes -benchtime 1x ./node/receipts/
//
// The bytes a one-card attempt's lease costs for an hour — a renewal every
// 200 ms and its acknowledgement, each a market message in a gossip
// envelope as it goes on the stream — with a receipt every 5 s in a
// renewal and the countersignature in its acknowledgement, against the
// same without them. Target: receipts add at most 5%.
func BenchmarkLeaseBytes(b *testing.B) {
	coord, runner := newParty(b, 1), newParty(b, 2)
	cid, rid := mustPeer(b, coord.id), mustPeer(b, runner.id)
	job, err := market.NewJobID(make([]byte, 16))
	if err != nil {
		b.Fatal(err)
	}
	a := Attempt{job, 0, 1}
	terms := Terms{Owner: "o1" + fmt.Sprintf("%058d", 7), Coordinator: coord.id, Term: 1, Cards: 1, PriceCNY: 17.5}
	envelope := func(from peer.ID, m market.Message) int {
		data, err := market.EncodeMessage(m)
		if err != nil {
			b.Fatal(err)
		}
		env, err := gossip.EncodeMessage(gossip.Message{Sender: from, Seq: uint64(t0.UnixMicro()), IssuedAt: t0, ExpiresAt: t0.Add(time.Minute),
			Nonce: make([]byte, gossip.NonceSize), Kind: "market", Data: data})
		if err != nil {
			b.Fatal(err)
		}
		return len(env)
	}
	var with, without, receiptBytes int
	for b.Loop() {
		is := NewIssuer("gpumesh", runner.id, runner.key, DefaultInterval, nil)
		with, without, receiptBytes = 0, 0, 0
		for i := 1; i <= 5*3600; i++ {
			now := t0.Add(time.Duration(i) * 200 * time.Millisecond)
			usage := float64(i) * 0.2
			ren := &market.Renewal{Job: job, Term: 1, Share: 0, Epoch: 1, Started: true, CardSeconds: usage}
			ack := &market.RenewalAck{Job: job, Term: 1, Share: 0, Epoch: 1}
			plain := envelope(rid, market.Message{From: runner.id, To: coord.id, Payload: ren}) +
				envelope(cid, market.Message{From: coord.id, To: runner.id, Payload: ack})
			without += plain
			if is.Due(a, usage, now) {
				r := is.Issue(a, terms, usage, false, now)
				r.Accept(coord.key)
				ren.Receipt, ack.Countersig = r.Marshal(), r.CoordSig
			}
			n := envelope(rid, market.Message{From: runner.id, To: coord.id, Payload: ren}) +
				envelope(cid, market.Message{From: coord.id, To: runner.id, Payload: ack})
			with += n
			receiptBytes += n - plain
		}
	}
	b.ReportMetric(100*float64(receiptBytes)/float64(with), "%receipts")
	b.ReportMetric(float64(without)/3600, "B/s-lease")
	b.ReportMetric(float64(receiptBytes)/3600, "B/s-receipts")
}

func mustPeer(b *testing.B, s string) peer.ID {
	p, err := peer.Decode(s)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
