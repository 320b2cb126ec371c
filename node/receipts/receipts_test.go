package receipts

import (
	"crypto/ed25519"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// party is a peer with its identity key, from a fixed seed.
type party struct {
	id  string
	key ed25519.PrivateKey
}

func newParty(t testing.TB, seed byte) party {
	t.Helper()
	k := ed25519.NewKeyFromSeed(make32(seed))
	pk, err := crypto.UnmarshalEd25519PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return party{id: id.String(), key: k}
}

func make32(b byte) []byte {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = b
	}
	return s
}

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// attemptBill runs attempts of one share as a runner and a coordinator
// would: each attempt renews for its duration, a receipt every interval
// countersigned, the last final; the bill's placements and totals are
// what the coordinator billed.
type attemptRun struct {
	runner  party
	epoch   uint64
	start   time.Time
	seconds int // of usage, one card
	final   bool
}

func runBill(t testing.TB, coord party, runs []attemptRun) Bill {
	t.Helper()
	b := Bill{Job: "j1"}
	acc := NewAcceptor("lab", coord.id, coord.key, nil)
	for _, run := range runs {
		is := NewIssuer("lab", run.runner.id, run.runner.key, 5*time.Second, nil)
		a := Attempt{"j1", 0, run.epoch}
		terms := Terms{Owner: "o1owner", Coordinator: coord.id, Term: 1, Cards: 1, PriceCNY: 18}
		p := market.Placement{Share: 0, Epoch: run.epoch, Node: run.runner.id, Cards: []string{"c0"}, PriceCNY: 18, AwardedAt: run.start}
		for s := 1; s <= run.seconds; s++ {
			now := run.start.Add(time.Duration(s) * time.Second)
			final := run.final && s == run.seconds
			if !final && !is.Due(a, float64(s), now) {
				continue
			}
			r := is.Issue(a, terms, float64(s), final, now)
			e := Expect{Attempt: a, Runner: run.runner.id, Term: 1, CardSeconds: float64(s), Final: final, Owner: "o1owner", Cards: 1, PriceCNY: 18}
			if final {
				e.Term = 0
			}
			got, err := acc.Check(r.Marshal(), e)
			if err != nil {
				t.Fatalf("epoch %d receipt %d: %v", run.epoch, r.Seq, err)
			}
			acc.Accepted(got)
			if _, err := is.Countersigned(a, coord.id, got.CoordSig); err != nil {
				t.Fatal(err)
			}
			b.Receipts = append(b.Receipts, got)
			p.CardSeconds, p.CostCNY = got.CardSeconds, got.CostCNY()
		}
		b.Placements = append(b.Placements, p)
		b.CardSeconds += p.CardSeconds
		b.CostCNY += p.CostCNY
	}
	return b
}

func TestABillAcrossARerouteVerifies(t *testing.T) {
	coord, r1, r2 := newParty(t, 1), newParty(t, 2), newParty(t, 3)
	b := runBill(t, coord, []attemptRun{
		{runner: r1, epoch: 1, start: t0, seconds: 33},                                    // lost: no final receipt
		{runner: r2, epoch: 2, start: t0.Add(40 * time.Second), seconds: 61, final: true}, // ran to its end
	})
	rep := Verify(b)
	if !rep.OK() {
		t.Fatalf("problems: %v", rep.Problems)
	}
	// Receipts at 1, 6, 11 ... 31 s of the first; 1 ... 56 and the final 61 of the second.
	if rep.Receipts != 7+13 || rep.Signatures != 2*rep.Receipts {
		t.Errorf("%d receipts, %d signatures checked", rep.Receipts, rep.Signatures)
	}
	if rep.CardSeconds != 31+61 || math.Abs(rep.CostCNY-(31+61)*18.0/3600) > 1e-12 {
		t.Errorf("receipts add up to %v card-seconds, %v CNY", rep.CardSeconds, rep.CostCNY)
	}
}

func TestAReceiptAlteredByOneByteFailsVerify(t *testing.T) {
	coord, r1 := newParty(t, 1), newParty(t, 2)
	good := runBill(t, coord, []attemptRun{{runner: r1, epoch: 1, start: t0, seconds: 30, final: true}})
	wire := good.Receipts[2].Marshal()
	for i := range wire {
		bad := Bill{Job: good.Job, Placements: good.Placements, CardSeconds: good.CardSeconds, CostCNY: good.CostCNY}
		altered := append([]byte(nil), wire...)
		altered[i] ^= 0x01
		r, err := Unmarshal(altered)
		if err != nil {
			continue // did not even decode: refused with a reason
		}
		bad.Receipts = append(append(append([]Receipt(nil), good.Receipts[:2]...), r), good.Receipts[3:]...)
		if Verify(bad).OK() {
			t.Fatalf("byte %d altered: the bill still verifies", i)
		}
	}
}

func TestAReceiptFromASupersededEpochFailsVerify(t *testing.T) {
	coord, r1, r2 := newParty(t, 1), newParty(t, 2), newParty(t, 3)
	b := runBill(t, coord, []attemptRun{
		{runner: r1, epoch: 1, start: t0, seconds: 20},
		{runner: r2, epoch: 2, start: t0.Add(30 * time.Second), seconds: 20, final: true},
	})
	b.Placements[1].AwardedAt = t0.Add(30 * time.Second)
	// The first runner went on after it was replaced and got a late
	// receipt countersigned (a coordinator that colluded, or one that was
	// cut off): it is dated ten minutes after epoch 2 took the share.
	late := Receipt{Network: "lab", Job: "j1", Owner: "o1owner", Share: 0, Epoch: 1, Term: 1, Runner: r1.id, Coordinator: coord.id,
		Seq: 9, At: t0.Add(10 * time.Minute), Cards: 1, PriceCNY: 18, CardSeconds: 600}
	late.Sign(r1.key)
	late.Accept(coord.key)
	b.Receipts = append(b.Receipts, late)
	rep := Verify(b)
	if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), "superseded epoch") {
		t.Fatalf("problems %v: want the superseded epoch named", rep.Problems)
	}
}

func TestVerifyNamesWhatIsWrong(t *testing.T) {
	coord, r1, mallory := newParty(t, 1), newParty(t, 2), newParty(t, 4)
	base := func() Bill {
		return runBill(t, coord, []attemptRun{{runner: r1, epoch: 1, start: t0, seconds: 30, final: true}})
	}
	for name, c := range map[string]struct {
		mut  func(*Bill)
		want string
	}{
		"bill over its receipts": {func(b *Bill) { b.CostCNY += 1; b.Placements[0].CostCNY += 1 }, "its receipts say"},
		"not countersigned":      {func(b *Bill) { b.Receipts[1].CoordSig = nil }, "not countersigned"},
		"signed by another runner": {func(b *Bill) {
			r := &b.Receipts[1]
			r.Runner = mallory.id
			r.Sign(mallory.key)
			r.Accept(coord.key)
		}, "ran the attempt"},
		"an epoch never placed": {func(b *Bill) { b.Receipts[0].Epoch = 7 }, "never placed"},
	} {
		b := base()
		c.mut(&b)
		rep := Verify(b)
		if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), c.want) {
			t.Errorf("%s: problems %v, want one naming %q", name, rep.Problems, c.want)
		}
	}
}

func TestAReceiptLeftOutIsNamedNotCounted(t *testing.T) {
	coord, r1 := newParty(t, 1), newParty(t, 2)
	b := runBill(t, coord, []attemptRun{{runner: r1, epoch: 1, start: t0, seconds: 30, final: true}})
	b.Receipts = append(b.Receipts[:2:2], b.Receipts[3:]...)
	rep := Verify(b)
	if !rep.OK() || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "receipts 3 to 3 of share 0 epoch 1 are not in the bill") {
		t.Fatalf("problems %v, notes %v: the newest receipt still proves the sum; the gap is named", rep.Problems, rep.Notes)
	}
}

func TestTheCoordinatorRefusesBadReceipts(t *testing.T) {
	coord, r1, mallory := newParty(t, 1), newParty(t, 2), newParty(t, 4)
	acc := NewAcceptor("lab", coord.id, coord.key, nil)
	is := NewIssuer("lab", r1.id, r1.key, 5*time.Second, nil)
	a := Attempt{"j1", 0, 1}
	terms := Terms{Owner: "o1owner", Coordinator: coord.id, Term: 1, Cards: 1, PriceCNY: 18}
	e := Expect{Attempt: a, Runner: r1.id, Term: 1, CardSeconds: 5, Owner: "o1owner", Cards: 1, PriceCNY: 18}
	r := is.Issue(a, terms, 5, false, t0)
	for name, c := range map[string]struct {
		b    []byte
		e    Expect
		want error
	}{
		"truncated":          {r.Marshal()[:40], e, ErrMalformed},
		"garbage":            {[]byte("garbage"), e, ErrMalformed},
		"more usage claimed": {r.Marshal(), func() Expect { x := e; x.CardSeconds = 4; return x }(), ErrMismatch},
		"another price":      {r.Marshal(), func() Expect { x := e; x.PriceCNY = 9; return x }(), ErrMismatch},
		"sent by another":    {r.Marshal(), func() Expect { x := e; x.Runner = mallory.id; return x }(), ErrBadSignature},
	} {
		if _, err := acc.Check(c.b, c.e); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	good, err := acc.Check(r.Marshal(), e)
	if err != nil {
		t.Fatal(err)
	}
	acc.Accepted(good)
	// A receipt that does not follow the accepted one: refused.
	other := NewIssuer("lab", r1.id, r1.key, 5*time.Second, nil)
	other.Issue(a, terms, 1, false, t0)
	fork := other.Issue(a, terms, 10, false, t0.Add(5*time.Second)) // seq 2, chained to another seq 1
	if _, err := acc.Check(fork.Marshal(), func() Expect { x := e; x.CardSeconds = 10; return x }()); !errors.Is(err, ErrMismatch) {
		t.Errorf("a forked chain: %v, want ErrMismatch", err)
	}
	// A countersignature of something else: the runner refuses it.
	if _, err := is.Countersigned(a, coord.id, make([]byte, 64)); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a bad countersignature: %v", err)
	}
}

func isMalformed(err error) bool { return errors.Is(err, ErrMalformed) }

// A report sent again carries the receipt the coordinator accepted last:
// it is countersigned again (the runner may not have the first
// countersignature) but is not new; the runner takes the countersignature
// once, and a repeat finds no receipt waiting.
func TestARepeatedReceiptIsCountersignedAgainButNotNew(t *testing.T) {
	r1, coord := newParty(t, 1), newParty(t, 2)
	is := NewIssuer("lab", r1.id, r1.key, 5*time.Second, nil)
	acc := NewAcceptor("lab", coord.id, coord.key, nil)
	a := Attempt{Job: "j", Share: 0, Epoch: 1}
	terms := Terms{Owner: "owner", Coordinator: coord.id, Term: 1, Cards: 1, PriceCNY: 2}
	e := Expect{Attempt: a, Runner: r1.id, CardSeconds: 5, Final: true, Owner: "owner", Cards: 1, PriceCNY: 2}
	r := is.Issue(a, terms, 5, true, time.Unix(1000, 0))
	first, err := acc.Check(r.Marshal(), e)
	if err != nil {
		t.Fatal(err)
	}
	if !acc.Accepted(first) {
		t.Fatal("the first acceptance is not new")
	}
	again, err := acc.Check(r.Marshal(), e)
	if err != nil {
		t.Fatalf("the repeated report's receipt: %v", err)
	}
	if acc.Accepted(again) {
		t.Error("the repeated receipt was taken as new")
	}
	if _, err := is.Countersigned(a, coord.id, first.CoordSig); err != nil {
		t.Fatalf("the countersignature: %v", err)
	}
	if _, err := is.Countersigned(a, coord.id, again.CoordSig); !errors.Is(err, ErrNoPending) {
		t.Errorf("the repeated countersignature: %v, want ErrNoPending", err)
	}
}
