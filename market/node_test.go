package market_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newNode(t testing.TB, id, cards string) *market.Node {
	t.Helper()
	cfg := market.DefaultConfig(id)
	if cards != "" {
		cfg.Cards = markettest.MustCards(id, cards)
	}
	n, err := market.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*market.Config){
		"no id":          func(c *market.Config) { c.ID = "" },
		"zero window":    func(c *market.Config) { c.BidWindow = 0 },
		"fence too late": func(c *market.Config) { c.FenceAfter = c.LostAfter },
		"renew too slow": func(c *market.Config) { c.RenewInterval = c.FenceAfter },
		"margin ≥ ttl":   func(c *market.Config) { c.LeaseMargin = c.ReserveTTL },
		"spare < 1":      func(c *market.Config) { c.SpareFactor = 0.5 },
		"discount > 1":   func(c *market.Config) { c.Prices.PreemptibleFactor = 1.5 },
		"free cards":     func(c *market.Config) { c.Prices.PerModel = map[string]float64{"a100-80g": 0} },
		"duplicate card": func(c *market.Config) { c.Cards = append(c.Cards, c.Cards[0]) },
	} {
		cfg := market.DefaultConfig("a")
		cfg.Cards = markettest.MustCards("a", "a100-80g:1")
		mod(&cfg)
		if _, err := market.New(cfg); !errors.Is(err, market.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestStepRefusesBadInputAndChangesNothing(t *testing.T) {
	n := newNode(t, "a", "a100-80g:2")
	drain(n)
	bad := []struct {
		ev   market.Event
		want error
	}{
		{nil, market.ErrBadEvent},
		{market.Tick{}, market.ErrBadEvent},
		{market.JobSubmitted{Now: t0, Spec: market.JobSpec{ID: "j1", Cards: 0, MaxPriceCNY: 1, Command: []string{"x"}}}, market.ErrInvalidSpec},
		{market.CancelJob{Now: t0, Job: "nope"}, market.ErrUnknownJob},
		{market.CancelJob{Now: t0, Job: "Bad ID"}, market.ErrBadEvent},
		{market.ScaleJob{Now: t0, Job: "nope", Cards: 2}, market.ErrUnknownJob},
		{market.MessageReceived{Now: t0, Message: market.Message{From: "b"}}, market.ErrBadMessage},
		{market.MessageReceived{Now: t0, Message: market.Message{From: "", Payload: &market.Release{Job: "j1", Lease: "L1"}}}, market.ErrBadMessage},
		{market.MessageReceived{Now: t0, Message: market.Message{From: "b", Payload: &market.BidRequest{Job: "j1", Round: 1, Want: 1, Min: 2, Filter: market.Filter{MaxPriceCNY: 5}}}}, market.ErrBadMessage},
		{market.ExecutionExited{Now: t0, Job: "j1", Share: 0, Epoch: 1}, market.ErrUnknownJob},
	}
	for _, b := range bad {
		if err := n.Step(b.ev); !errors.Is(err, b.want) {
			t.Errorf("Step(%#v) = %v, want %v", b.ev, err, b.want)
		}
		if n.HasReady() {
			t.Errorf("Step(%#v) left something to do: %+v", b.ev, n.Ready())
		}
	}
	if got := len(n.Jobs()); got != 0 {
		t.Errorf("%d jobs after only bad input", got)
	}
	for _, c := range n.Cards() {
		if c.State != market.CardFree {
			t.Errorf("card %s is %s after only bad input", c.Card.ID, c.State)
		}
	}
}

func drain(n *market.Node) market.Ready {
	var all market.Ready
	for n.HasReady() {
		rd := n.Ready()
		all.Messages = append(all.Messages, rd.Messages...)
		all.Start = append(all.Start, rd.Start...)
		all.Stop = append(all.Stop, rd.Stop...)
		all.Jobs = append(all.Jobs, rd.Jobs...)
		all.Attempts = append(all.Attempts, rd.Attempts...)
		all.Notifications = append(all.Notifications, rd.Notifications...)
		if rd.Ad != nil {
			all.Ad = rd.Ad
		}
		n.Advance(rd)
	}
	return all
}

func TestReadyAndAdvance(t *testing.T) {
	n := newNode(t, "a", "a100-80g:2")
	first := n.Ready()
	if first.Ad == nil || first.Ad.Seq != 1 || first.Ad.Offers[0].Free != 2 {
		t.Fatalf("first Ready has no ad of 2 free cards: %+v", first.Ad)
	}
	// Ready again without Advance: the same, and more after another Step.
	if err := n.Step(market.JobSubmitted{Now: t0, Spec: market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}}); err != nil {
		t.Fatal(err)
	}
	second := n.Ready()
	if second.Ad == nil || len(second.Jobs) != 1 || len(second.Notifications) == 0 {
		t.Fatalf("second Ready lacks the job: %+v", second)
	}
	n.Advance(first) // acknowledges only what the first Ready held
	third := n.Ready()
	if len(third.Jobs) != 1 || len(third.Notifications) != len(second.Notifications) {
		t.Fatalf("Advance(first) dropped what came later: %+v", third)
	}
	n.Advance(third)
	if n.HasReady() {
		t.Fatalf("still ready after Advance: %+v", n.Ready())
	}
	// With no book the request went to the broadcast topic (this node hears
	// it too and bid its own card); the round closes when its window ends,
	// and the node places the job on its own card: an attempt to persist
	// and an execution to start come out.
	if len(second.Messages) != 1 || second.Messages[0].To != market.Broadcast {
		t.Fatalf("messages %+v, want one broadcast bid request", second.Messages)
	}
	if err := n.Step(market.Tick{Now: t0.Add(200 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	placed := drain(n)
	rec, _ := n.Job("j1")
	if rec.State != market.JobRunning || len(placed.Start) != 1 || len(placed.Attempts) == 0 {
		t.Fatalf("job %s, starts %d, attempts %d", rec.State, len(placed.Start), len(placed.Attempts))
	}
	if err := n.Step(market.JobSubmitted{Now: t0, Spec: rec.Spec}); !errors.Is(err, market.ErrJobExists) {
		t.Fatalf("duplicate submit = %v", err)
	}
	if err := n.Step(market.ScaleJob{Now: t0, Job: "j1", Cards: 2}); !errors.Is(err, market.ErrNotElastic) {
		t.Fatalf("scaling a job with no elastic range = %v", err)
	}
	if err := n.Forget("j1"); err == nil {
		t.Fatal("forgot a running job")
	}
	if err := n.Step(market.CancelJob{Now: t0, Job: "j1"}); err != nil {
		t.Fatal(err)
	}
	rd := drain(n)
	if len(rd.Stop) != 1 {
		t.Fatalf("cancel stopped %d executions", len(rd.Stop))
	}
	// The executor's log says who asked and why.
	if s := rd.Stop[0]; s.Cause != market.CauseStopped || s.By == "" || s.Reason == "" {
		t.Fatalf("the cancel's stop %+v does not say who asked and why", s)
	}
	if err := n.Step(market.ExecutionExited{Now: t0.Add(time.Second), Job: "j1", Share: 0, Epoch: 1, ExitCode: -1}); err != nil {
		t.Fatal(err)
	}
	drain(n)
	if err := n.Forget("j1"); err != nil {
		t.Fatalf("Forget after the end: %v", err)
	}
	if _, ok := n.Job("j1"); ok {
		t.Fatal("forgotten job still there")
	}
}

// runningOneCardJob starts a coordinator "coord" and a supplier "a" of two
// A100s, and runs a one-card job j1 placed on a.
func runningOneCardJob(t *testing.T) (*markettest.Harness, market.JobRecord) {
	t.Helper()
	h := markettest.New(markettest.Options{})
	h.MustAdd(market.DefaultConfig("coord"))
	cfg := market.DefaultConfig("a")
	cfg.Cards = markettest.MustCards("a", "a100-80g:2")
	h.MustAdd(cfg)
	if err := h.SubmitAt("coord", market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 20, Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(10 * time.Millisecond)
	rec, _ := h.Job("j1")
	if rec.State != market.JobRunning {
		t.Fatalf("job %s", rec.State)
	}
	return h, rec
}

// A peer's messages that break the protocol are refused and change nothing
// but the protocol's reply.
func TestPeersCannotCheat(t *testing.T) {
	h, rec := runningOneCardJob(t)
	step := func(from string, p market.Payload) error {
		return h.Step("coord", market.MessageReceived{Now: h.Now, Message: market.Message{From: from, To: "coord", Payload: p}})
	}
	// A bid nobody asked for.
	if err := step("mallory", &market.Bid{Job: "j1", Round: 1, Lease: "L9", LeaseFor: market.Duration(time.Second),
		Cards: []market.BidCard{{ID: "m-g0", Model: "a100-80g", PriceCNY: 1}}}); !errors.Is(err, market.ErrStale) && !errors.Is(err, market.ErrRefused) {
		t.Errorf("unasked bid: %v", err)
	}
	// Renewals and ends for an attempt that is not the sender's.
	if err := step("mallory", &market.Renewal{Job: "j1", Share: 0, Epoch: 1, Started: true, CardSeconds: 99}); !errors.Is(err, market.ErrStale) {
		t.Errorf("renewal from a stranger: %v", err)
	}
	if err := step("mallory", &market.AttemptEnded{Job: "j1", Share: 0, Epoch: 1, Cause: market.CauseExited, ExitCode: 1}); !errors.Is(err, market.ErrStale) {
		t.Errorf("end from a stranger: %v", err)
	}
	after, _ := h.Job("j1")
	if after.State != market.JobRunning || after.CostCNY != rec.CostCNY {
		t.Fatalf("a stranger changed the job: %s, cost %v → %v", after.State, rec.CostCNY, after.CostCNY)
	}
	// The runner itself claims a billion card-seconds: it is billed at most
	// what its card could have run since the award (plus a minute of slack).
	if err := step("a", &market.Renewal{Job: "j1", Share: 0, Epoch: 1, Started: true, CardSeconds: 1e9}); err != nil {
		t.Fatal(err)
	}
	after, _ = h.Job("j1")
	if max := (time.Minute + time.Second).Seconds() * after.Placements[0].PriceCNY / 3600; after.CostCNY > max {
		t.Fatalf("billed %v CNY for 10ms of one card (at most %v)", after.CostCNY, max)
	}
	// An award for a lease the supplier does not hold is rejected.
	if err := h.Step("a", market.MessageReceived{Now: h.Now, Message: market.Message{From: "coord", To: "a", Payload: &market.Award{
		Job: "j1", Term: 1, Round: 7, Lease: "L42", Share: 3, Epoch: 9, Cards: []string{"a-g1"}, PriceCNY: 1, Start: true,
		Exec: market.ExecSpec{Command: []string{"x"}}, World: 1}}}); !errors.Is(err, market.ErrStale) {
		t.Errorf("award for an unknown lease: %v", err)
	}
	for _, c := range h.Peer("a").Node.Cards() {
		if c.Card.ID == "a-g1" && c.State != market.CardFree {
			t.Errorf("a-g1 is %s after a bogus award", c.State)
		}
	}
	if !strings.Contains(strings.Join(errorsSeen(h), ","), "stale") {
		t.Errorf("errors seen: %v", h.Errors)
	}
}

func errorsSeen(h *markettest.Harness) []string {
	var out []string
	for k := range h.Errors {
		out = append(out, k)
	}
	return out
}

func TestAdoptRefusesBadAndStaleRecords(t *testing.T) {
	n := newNode(t, "b", "")
	good := market.JobRecord{ID: "j1", Spec: market.JobSpec{ID: "j1", Cards: 1, MaxPriceCNY: 5, Command: []string{"x"}},
		State: market.JobSucceeded, Term: 1, Epoch: 3, Cards: 1}
	bad := good
	bad.Spec.Cards = 0
	if err := n.Step(market.JobAdopted{Now: t0, Record: bad}); !errors.Is(err, market.ErrInvalidSpec) {
		t.Fatalf("adopting a record with a bad spec: %v", err)
	}
	mismatch := good
	mismatch.ID = "j2"
	if err := n.Step(market.JobAdopted{Now: t0, Record: mismatch}); !errors.Is(err, market.ErrBadEvent) {
		t.Fatalf("adopting a record whose ID is not its spec's: %v", err)
	}
	if err := n.Step(market.JobAdopted{Now: t0, Record: good}); err != nil {
		t.Fatal(err)
	}
	rec, ok := n.Job("j1")
	if !ok || rec.Term != 2 || rec.Epoch != 3 || rec.State != market.JobSucceeded || rec.Coordinator != "b" {
		t.Fatalf("adopted record %+v", rec)
	}
	if err := n.Step(market.JobAdopted{Now: t0, Record: good, Term: 2}); !errors.Is(err, market.ErrStale) {
		t.Fatalf("adopting again at the same term: %v", err)
	}
	if err := n.Step(market.JobAdopted{Now: t0, Record: good, Term: 7}); err != nil {
		t.Fatalf("adopting at a higher term: %v", err)
	}
	if rec, _ := n.Job("j1"); rec.Term != 7 {
		t.Fatalf("term %d after adopting at 7", rec.Term)
	}
}

// A job that ended under another coordinator while this one ran a stale
// copy ends here as it ended there: its attempts stop and its state, reason
// and exit code are the record's. A record that shows no end is refused.
func TestJobEndedEndsAStaleCopyAsItEnded(t *testing.T) {
	h, rec := runningOneCardJob(t)
	going := rec
	if err := h.Step("coord", market.JobEnded{Now: h.Now, Record: going}); !errors.Is(err, market.ErrBadEvent) {
		t.Fatalf("JobEnded with a running record: %v", err)
	}
	zero := 0
	end := rec
	end.State, end.Reason, end.ExitCode = market.JobSucceeded, "every share exited 0", &zero
	if err := h.Step("coord", market.JobEnded{Now: h.Now, Record: end}); err != nil {
		t.Fatal(err)
	}
	h.RunFor(100 * time.Millisecond)
	after, _ := h.Job("j1")
	if after.State != market.JobSucceeded || after.Reason != end.Reason || after.ExitCode == nil || *after.ExitCode != 0 || len(after.Live()) != 0 {
		t.Fatalf("after JobEnded: %s %q exit %v, %d live", after.State, after.Reason, after.ExitCode, len(after.Live()))
	}
	for _, c := range h.Peer("a").Node.Cards() {
		if c.State != market.CardFree {
			t.Errorf("card %s is %s after the copy ended", c.Card.ID, c.State)
		}
	}
}

// A runner that restarts keeps the ends of its attempts (Config.
// EndedAttempts, from its disk): it reports an unacknowledged one to its
// coordinator again, and answers a coordinator that takes the job over
// later with the end, instead of letting it place the share again; an end
// older than ReportTTL is forgotten.
func TestRestartedRunnerKeepsItsEnds(t *testing.T) {
	cfg := market.DefaultConfig("a")
	cfg.Cards = markettest.MustCards("a", "a100-80g:1")
	done := market.Attempt{Job: "j1", Share: 0, Epoch: 1, Term: 1, Coordinator: "c1", State: market.AttemptDone,
		Cause: market.CauseExited, ExitCode: 0, CardSeconds: 42, EndedAt: t0, Acked: true}
	unacked := done
	unacked.Job, unacked.Acked = "j2", false
	unacked.ExitCode, unacked.Reason = 127, "did not start: executable file not found in $PATH: nvidia-smi"
	cfg.EndedAttempts = []market.Attempt{done, unacked}
	n, err := market.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)

	ends := func(rd market.Ready, to string) []*market.AttemptEnded {
		var out []*market.AttemptEnded
		for _, m := range rd.Messages {
			if e, ok := m.Payload.(*market.AttemptEnded); ok && m.To == to {
				out = append(out, e)
			}
		}
		return out
	}
	now := t0.Add(time.Minute)
	if err := n.Step(market.Tick{Now: now}); err != nil {
		t.Fatal(err)
	}
	if got := ends(drain(n), "c1"); len(got) != 1 || got[0].Job != "j2" || got[0].Reason != unacked.Reason {
		t.Fatalf("after the restart the runner reports %v to its coordinator, want the unacknowledged end of j2 alone, with its reason", got)
	}

	// A successor of term 2 tells the runner its term for the attempt
	// that ended: the runner answers with the end, and keeps sending it
	// until the successor acknowledges.
	ack := market.Message{From: "c2", To: "a", Payload: &market.RenewalAck{Job: "j1", Term: 2, Share: 0, Epoch: 1}}
	_ = n.Step(market.MessageReceived{Now: now, Message: ack})
	got := ends(drain(n), "c2")
	if len(got) != 1 || got[0].ExitCode != 0 || got[0].Cause != market.CauseExited || got[0].CardSeconds != 42 {
		t.Fatalf("the successor hears %+v, want the end of j1 (exit 0, 42 card-seconds)", got)
	}
	now = now.Add(time.Second)
	if err := n.Step(market.Tick{Now: now}); err != nil {
		t.Fatal(err)
	}
	if got := ends(drain(n), "c2"); len(got) != 1 {
		t.Fatalf("unacknowledged, the end goes to the successor again: got %v", got)
	}
	_ = n.Step(market.MessageReceived{Now: now, Message: market.Message{From: "c2", To: "a", Payload: &market.EndAck{Job: "j1", Share: 0, Epoch: 1}}})
	drain(n)
	if err := n.Step(market.Tick{Now: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := ends(drain(n), "c2"); len(got) != 0 {
		t.Fatalf("acknowledged, the end is sent again: %v", got)
	}

	// Past ReportTTL the end is forgotten: the attempt is closed.
	if err := n.Step(market.Tick{Now: t0.Add(cfg.ReportTTL + time.Second)}); err != nil {
		t.Fatal(err)
	}
	closed := map[string]bool{}
	for _, a := range drain(n).Attempts {
		if a.State == market.AttemptClosed {
			closed[a.Job] = true
		}
	}
	if !closed["j1"] || !closed["j2"] {
		t.Errorf("past ReportTTL, closed %v, want j1 and j2", closed)
	}
	_ = n.Step(market.MessageReceived{Now: t0.Add(cfg.ReportTTL + 2*time.Second), Message: market.Message{From: "c3", To: "a", Payload: &market.RenewalAck{Job: "j1", Term: 3, Share: 0, Epoch: 1}}})
	if got := ends(drain(n), "c3"); len(got) != 0 {
		t.Errorf("a forgotten end is still told: %v", got)
	}
}

// An acknowledged end that a successor asks about goes back to being
// reported; the runner forgets it was kept, and acknowledging another end
// afterwards keeps working. (The kept end's place in the expiry order
// stayed behind: the next acknowledged end crashed the node, found by the
// churn soak.)
func TestAnEndReportedAgainLeavesTheKeptEnds(t *testing.T) {
	cfg := market.DefaultConfig("a")
	cfg.Cards = markettest.MustCards("a", "a100-80g:1")
	kept := market.Attempt{Job: "j1", Share: 0, Epoch: 1, Term: 1, Coordinator: "c1", State: market.AttemptDone,
		Cause: market.CauseExited, CardSeconds: 42, EndedAt: t0, Acked: true}
	pending := kept
	pending.Job, pending.Acked = "j2", false
	cfg.EndedAttempts = []market.Attempt{kept, pending}
	n, err := market.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	now := t0.Add(time.Second)
	_ = n.Step(market.MessageReceived{Now: now, Message: market.Message{From: "c2", To: "a", Payload: &market.RenewalAck{Job: "j1", Term: 2, Share: 0, Epoch: 1}}})
	_ = n.Step(market.MessageReceived{Now: now, Message: market.Message{From: "c1", To: "a", Payload: &market.EndAck{Job: "j2", Share: 0, Epoch: 1}}})
	if err := n.Step(market.Tick{Now: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	var to []string
	for _, m := range drain(n).Messages {
		if e, ok := m.Payload.(*market.AttemptEnded); ok && !slices.Contains(to, e.Job+"→"+m.To) {
			to = append(to, e.Job+"→"+m.To)
		}
	}
	if !slices.Equal(to, []string{"j1→c2"}) {
		t.Fatalf("ends sent %v, want j1's to its successor c2 alone (j2's was acknowledged)", to)
	}
}
