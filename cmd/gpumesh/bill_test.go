package main

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/receipts"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// signer is a peer ID with its key, from a fixed seed.
func signer(t *testing.T, seed byte) (string, ed25519.PrivateKey) {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	k := ed25519.NewKeyFromSeed(s)
	pk, err := crypto.UnmarshalEd25519PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return id.String(), k
}

// signedBill is a job run for 12 s by one runner, its receipts issued
// every 5 s and at the end, each countersigned.
func signedBill(t *testing.T) api.Bill {
	t.Helper()
	coord, ck := signer(t, 1)
	runner, rk := signer(t, 2)
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	is := receipts.NewIssuer("gpumesh", runner, rk, 5*time.Second, nil)
	a := receipts.Attempt{Job: "j1", Share: 0, Epoch: 1}
	p := market.Placement{Share: 0, Epoch: 1, Node: runner, Cards: []string{"c0", "c1"}, Model: "a100-80g", State: market.PlacementExited,
		PriceCNY: 18, AwardedAt: t0}
	b := api.Bill{Job: "j1", Owner: "o1aliceaaaaaaaaaaaaaa", State: market.JobSucceeded, Coordinator: coord, From: coord}
	for _, s := range []int{1, 6, 11, 12} {
		r := is.Issue(a, receipts.Terms{Owner: b.Owner, Coordinator: coord, Term: 1, Cards: 2, PriceCNY: 18}, float64(2*s), s == 12, t0.Add(time.Duration(s)*time.Second))
		r.Accept(ck)
		b.Receipts = append(b.Receipts, r.Marshal())
		p.CardSeconds, p.CostCNY = r.CardSeconds, r.CostCNY()
	}
	b.Placements = []market.Placement{p}
	b.CardSeconds, b.CostCNY = p.CardSeconds, p.CostCNY
	return b
}

func TestBillVerifies(t *testing.T) {
	n := newFakeNode(t)
	n.b.SetBill(signedBill(t))
	code, out, errOut := n.run("bill", "j1", "--verify")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	t.Logf("gpumesh bill j1 --verify:\n%s", out)
	for _, want := range []string{"BILL 0.12 CNY (24.0 card-seconds), 1 placement, 4 receipts",
		"VERIFIED 4 receipts, 8 signatures: the bill is the sum of its receipts (0.12 CNY, 24.0 card-seconds)", "#4", "final"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = n.run("bill", "j1", "--verify", "--json")
	var got struct {
		Decoded []receipts.Receipt `json:"decoded_receipts"`
		Verify  *receipts.Report   `json:"verify"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Decoded) != 4 || got.Verify == nil || !got.Verify.OK() {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}
}

func TestBillAlteredByOneByteFailsVerify(t *testing.T) {
	n := newFakeNode(t)
	b := signedBill(t)
	// The node bills one more card-second than its receipts say.
	b.Placements[0].CardSeconds++
	b.CardSeconds++
	n.b.SetBill(b)
	code, out, _ := n.run("bill", "j1", "--verify")
	if code != 1 || !strings.Contains(out, "NOT VERIFIED") || !strings.Contains(out, "its receipts say 24.000") {
		t.Fatalf("exit %d, want 1 naming the difference:\n%s", code, out)
	}
	// A receipt with one byte changed (its usage) does not verify.
	b = signedBill(t)
	raw := b.Receipts[1]
	r, _ := receipts.Unmarshal(raw)
	body := len(r.Body())
	raw[body-2] ^= 0x40 // inside card_seconds
	n.b.SetBill(b)
	code, out, _ = n.run("bill", "j1", "--verify")
	if code != 1 || !strings.Contains(out, "signature does not verify") {
		t.Fatalf("exit %d, want 1 naming the bad signature:\n%s", code, out)
	}
	// Without --verify it shows the bill and exits 0.
	if code, _, _ := n.run("bill", "j1"); code != 0 {
		t.Errorf("without --verify: exit %d", code)
	}
}

func TestEarningsFromReceipts(t *testing.T) {
	n := newFakeNode(t)
	n.b.SetEarnings(api.ReceiptEarnings{Node: nodeA,
		Total: api.Earned{CNY: 36, CardSeconds: 7200}, Unconfirmed: api.Earned{CNY: 0.05, CardSeconds: 10},
		ByOwner: []api.OwnerEarned{{Owner: "o1alice0000000000000", Jobs: 1, Earned: api.Earned{CNY: 36, CardSeconds: 7200}, Unconfirmed: api.Earned{CNY: 0.05, CardSeconds: 10}}},
		ByJob:   []api.JobEarned{{Job: "j1", Owner: "o1alice0000000000000", Attempts: 2, Earned: api.Earned{CNY: 36, CardSeconds: 7200}, Unconfirmed: api.Earned{CNY: 0.05, CardSeconds: 10}}},
		Ledger:  api.Earned{CNY: 36.05, CardSeconds: 7210}})
	code, out, errOut := n.run("earnings", "--since", "7d")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"OWED since ", "36.00 CNY (2.00 card-hours) countersigned · 0.05 CNY (0.00 card-hours) unconfirmed",
		"LEDGER 36.05 CNY", "o1alice000…", "1 job, 1 owner"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errOut := n.run("earnings", "--since", "last tuesday"); code != 2 || !strings.Contains(errOut, "--since") {
		t.Errorf("a bad --since: exit %d, %q", code, errOut)
	}
}

func TestBillOfAShareOnTheCoordinatorsOwnCardsSaysSo(t *testing.T) {
	n := newFakeNode(t)
	b := signedBill(t)
	b.Receipts = nil
	b.Placements[0].Node = b.Coordinator // it ran the share itself: no one else signs
	n.b.SetBill(b)
	code, out, _ := n.run("bill", "j1", "--verify")
	if code != 0 || !strings.Contains(out, "VERIFIED 0 receipts, 0 signatures; 24.0 of the bill's 24.0 card-seconds rest on the coordinator's word alone") ||
		!strings.Contains(out, "note: share 0 epoch 1 ran on its coordinator's own cards") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// The same bill from a runner that is not the coordinator is a problem.
	b.Placements[0].Node = nodeA
	n.b.SetBill(b)
	if code, out, _ := n.run("bill", "j1", "--verify"); code != 1 || !strings.Contains(out, "billed 24.000 card-seconds with no receipt") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
