package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
	"github.com/gpumesh/gpumesh/node/blob"
)

const (
	nodeA = "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz0123456789aaaaaa"
	nodeB = "12D3KooWZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210bbbbbb"
)

func TestJobsTable(t *testing.T) {
	n := newFakeNode(t)
	now := time.Now()
	n.b.AddJob(market.JobRecord{ID: "jold", Spec: market.JobSpec{Name: "old run"}, State: market.JobSucceeded, Cards: 8, Epoch: 3,
		CostCNY: 123.456, SubmittedAt: now.Add(-26 * time.Hour)})
	n.b.AddJob(market.JobRecord{ID: "jnew", State: market.JobPending, Cards: 2, SubmittedAt: now.Add(-90 * time.Second)})
	n.b.AddJob(market.JobRecord{ID: "jmid", Spec: market.JobSpec{Name: "mid"}, State: market.JobRunning, Cards: 4, Epoch: 1,
		CostCNY: 0.5, SubmittedAt: now.Add(-3*time.Hour - 5*time.Minute)})
	code, out, errOut := n.run("jobs")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	rows := table(out)
	if strings.Join(rows[0], "|") != "ID|NAME|STATE|CARDS|EPOCH|COST (CNY)|AGE" {
		t.Fatalf("header %q", rows[0])
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows:\n%s", len(rows), out)
	}
	want := [][]string{ // newest first
		{"jnew", "-", "pending", "2", "0", "0.00", "1m"},
		{"jmid", "mid", "running", "4", "1", "0.50", "3h5m"},
		{"jold", "old run", "succeeded", "8", "3", "123.46", "1d2h"},
	}
	for i, w := range want {
		if strings.Join(rows[i+1], "|") != strings.Join(w, "|") {
			t.Errorf("row %d = %q, want %q", i+1, rows[i+1], w)
		}
	}

	code, out, _ = n.run("jobs", "--json")
	var jobs []market.JobRecord
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 3 || jobs[0].ID != "jnew" || jobs[2].CostCNY != 123.456 {
		t.Errorf("--json: exit %d\n%s", code, out)
	}
}

func TestJobsEmpty(t *testing.T) {
	n := newFakeNode(t)
	if code, out, _ := n.run("jobs"); code != 0 || len(table(out)) != 1 {
		t.Errorf("exit %d, %q", code, out)
	}
	if code, out, _ := n.run("jobs", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("--json: exit %d, %q", code, out)
	}
}

func runningJob() market.JobRecord {
	now := time.Now()
	return market.JobRecord{
		ID: "jtrain", Spec: market.JobSpec{Name: "train", MaxPriceCNY: 25, Command: []string{"torchrun", "train.py"}},
		Coordinator: nodeA, State: market.JobRerouting, Reason: "share 1 lost: node stopped renewing", Term: 2, Epoch: 3, Cards: 8,
		CardSeconds: 7200, CostCNY: 42.5, SubmittedAt: now.Add(-time.Hour), RunningAt: now.Add(-50 * time.Minute),
		Placements: []market.Placement{
			{Share: 0, Epoch: 1, Node: nodeA, Cards: []string{"GPU-1", "GPU-2", "GPU-3", "GPU-4"}, Model: "h100-sxm-80g",
				State: market.PlacementRunning, PriceCNY: 21.75, CostCNY: 30.25},
			{Share: 1, Epoch: 2, Node: nodeB, Cards: []string{"GPU-5", "GPU-6", "GPU-7", "GPU-8"}, Model: "h100-sxm-80g",
				State: market.PlacementLost, Reason: "renewals stopped", PriceCNY: 21.75, CostCNY: 12.25},
		},
		Explanation: &market.Explanation{Round: 3, Need: "1 node × 4 cards", Asked: 5, Bids: 4, ClearingPriceCU: 6.8612, Outcome: "cleared",
			Entries: []market.ExplainEntry{
				{Stage: "bid", Node: nodeA, Model: "h100-sxm-80g", Cards: 4, Reason: market.ReasonWon, Score: 6.86, Detail: "paid 21.75 CNY per card-hour"},
				{Stage: "bid", Node: nodeB, Model: "h100-sxm-80g", Cards: 4, Reason: market.ReasonOutbid, Score: 7.1},
				{Stage: "book", Node: "12D3KooWcccccccccccccccccccccccccccccccccccccccccc", Model: "rtx4090-24g", Cards: 8, Reason: market.ReasonModel},
			},
			Omitted: 7,
			Cards:   map[market.Reason]int{market.ReasonWon: 4, market.ReasonOutbid: 4, market.ReasonModel: 8},
		},
	}
}

// fields reads "KEY  value" lines into a map, up to the first blank line.
func fields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			break
		}
		k, v, _ := strings.Cut(line, "  ")
		m[k] = strings.TrimSpace(v)
	}
	return m
}

func TestJobShow(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(runningJob())
	code, out, errOut := n.run("job", "jtrain")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	f := fields(out)
	want := map[string]string{
		"ID": "jtrain", "NAME": "train", "STATE": "rerouting", "REASON": "share 1 lost: node stopped renewing", "CARDS": "8",
		"EPOCH": "3 (term 2)", "COORDINATOR": shortID(nodeA), "COST": "42.50 CNY (7200 card-seconds)",
		"MAX PRICE": "25.00 CNY per card-hour", "EXIT CODE": "-", "COMMAND": "torchrun train.py",
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %q, want %q", k, f[k], v)
		}
	}
	if !strings.HasSuffix(f["SUBMITTED"], "(1h ago)") || !strings.HasSuffix(f["RUNNING"], "(50m ago)") {
		t.Errorf("times: %q, %q", f["SUBMITTED"], f["RUNNING"])
	}
	if _, ok := f["ENDED"]; ok {
		t.Error("a running job shows an end")
	}
	_, placements, _ := strings.Cut(out, "\n\n")
	rows := table(placements)
	if len(rows) != 3 {
		t.Fatalf("placements:\n%s", placements)
	}
	for col, want := range map[string][2]string{
		"SHARE": {"0", "1"}, "EPOCH": {"1", "2"}, "NODE": {"12*aaaaaa", "12*bbbbbb"}, "CARDS": {"4", "4"},
		"MODEL": {"h100-sxm-80g", "h100-sxm-80g"}, "STATE": {"running", "lost"}, "PRICE (CNY/h)": {"21.75", "21.75"},
		"COST (CNY)": {"30.25", "12.25"}, "EXIT": {"-", "-"}, "REASON": {"-", "renewals stopped"},
	} {
		for i := range 2 {
			if got := column(t, rows, i+1, col); got != want[i] {
				t.Errorf("placement %d %s = %q, want %q", i, col, got, want[i])
			}
		}
	}
	if strings.Contains(out, "round 3") {
		t.Error("the explanation shows without --explain")
	}
	if _, ok := f["CHECKPOINT"]; ok {
		t.Error("a job without checkpoints shows one")
	}
}

// The newest checkpoint of any share is one line: its share and epoch,
// size, what it shipped new, its holders and its age.
func TestJobShowsItsNewestCheckpoint(t *testing.T) {
	n := newFakeNode(t)
	j := runningJob()
	now := time.Now()
	j.Checkpoints = []market.Checkpoint{
		{Share: 0, Epoch: 1, Manifest: "sha256:" + strings.Repeat("a", 64), Bytes: 4 << 30, NewBytes: 4 << 30, Holders: []string{nodeA, nodeB}, At: now.Add(-2 * time.Minute)},
		{Share: 1, Epoch: 2, Manifest: "sha256:" + strings.Repeat("b", 64), Bytes: 4 << 30, NewBytes: 200 << 20, Holders: []string{nodeB, nodeA, "12D3KooWcccccccccccccccccccccccccccccccccccccccccc"}, At: now.Add(-30 * time.Second)},
	}
	n.b.AddJob(j)
	_, out, _ := n.run("job", "jtrain")
	if got, want := fields(out)["CHECKPOINT"], "share 1 epoch 2, 4 GiB (200 MiB new), on 3 nodes, "; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "(30s ago)") {
		t.Errorf("CHECKPOINT = %q, want %q… (30s ago)", got, want)
	}
	_, out, _ = n.run("job", "jtrain", "--json")
	var rec market.JobRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil || len(rec.Checkpoints) != 2 || rec.Checkpoints[1].NewBytes != 200<<20 {
		t.Errorf("--json checkpoints %+v, %v", rec.Checkpoints, err)
	}
}

func TestJobExplain(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(runningJob())
	code, out, _ := n.run("job", "jtrain", "--explain")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	i := strings.Index(out, "round 3:")
	if i < 0 {
		t.Fatalf("no round line:\n%s", out)
	}
	expl := out[i:]
	head, rest, _ := strings.Cut(expl, "\n")
	for _, w := range []string{"needed 1 node × 4 cards", "asked 5 nodes", "4 bids", "cleared at 6.8612 CNY per compute-unit hour"} {
		if !strings.Contains(head, w) {
			t.Errorf("head %q lacks %q", head, w)
		}
	}
	lines := strings.Split(rest, "\n")
	rows := table(strings.Join(lines[:4], "\n"))
	if strings.Join(rows[0], "|") != "STAGE|NODE|MODEL|CARDS|REASON|SCORE|DETAIL" {
		t.Fatalf("header %q", rows[0])
	}
	if column(t, rows, 1, "REASON") != "won" || column(t, rows, 1, "DETAIL") != "paid 21.75 CNY per card-hour" ||
		column(t, rows, 2, "REASON") != "outbid" || column(t, rows, 2, "SCORE") != "7.1000" ||
		column(t, rows, 3, "REASON") != "model_not_allowed" || column(t, rows, 3, "SCORE") != "-" || column(t, rows, 3, "NODE") != "12*cccccc" {
		t.Errorf("entries:\n%s", rest)
	}
	if !strings.Contains(rest, "... and 7 more candidates not kept") || !strings.Contains(rest, "cards by outcome: model_not_allowed 8, outbid 4, won 4") {
		t.Errorf("tail:\n%s", rest)
	}

	pending := market.JobRecord{ID: "jwait", State: market.JobPending, Reason: "waiting for a placement round"}
	n.b.AddJob(pending)
	_, out, _ = n.run("job", "jwait", "--explain")
	if !strings.Contains(out, "no placements yet") || !strings.Contains(out, "no placement round yet") {
		t.Errorf("pending job:\n%s", out)
	}
}

func TestJobJSON(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(runningJob())
	code, out, _ := n.run("job", "jtrain", "--json")
	var rec map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, k := range []string{"id", "state", "epoch", "placements", "cost_cny", "explanation", "term", "reason"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("no %q", k)
		}
	}
	p := rec["placements"].([]any)[0].(map[string]any)
	if p["node"] != nodeA || len(p["cards"].([]any)) != 4 {
		t.Errorf("placement %v", p)
	}
}

func TestJobErrors(t *testing.T) {
	n := newFakeNode(t)
	code, out, errOut := n.run("job", "jnope")
	if code != exitError || out != "" {
		t.Errorf("unknown job: exit %d, %q", code, out)
	}
	oneLineErr(t, "unknown job", errOut, `gpumesh: job "jnope" not found`)

	for _, args := range [][]string{{"job"}, {"job", "a", "b"}, {"job", "Bad/ID"}, {"logs", "-x-"}, {"cancel", "UPPER"}, {"scale", "UPPER", "2"}} {
		code, _, errOut := n.run(args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	if got := n.b.Gets("jnope"); got != 1 {
		t.Errorf("%d requests for jnope", got)
	}
}

// declinedRound is a job's record, made by the market itself, after a
// round in which two asked suppliers declined (their policy caps a job at
// an hour) and the third never answered.
func declinedRound(t *testing.T) market.JobRecord {
	t.Helper()
	h := markettest.New(markettest.Options{})
	h.MustAdd(market.DefaultConfig("coord"))
	for i, id := range []string{"short-1", "short-2", "silent"} {
		c := market.DefaultConfig(id)
		c.Cards = markettest.MustCards(id, "a100-80g:1")
		c.Prices.PerModel = map[string]float64{"a100-80g": 10 + float64(i)}
		if id != "silent" {
			c.Policy.MaxDuration = time.Hour
		}
		h.MustAdd(c)
	}
	h.AddRule(&markettest.Rule{Match: func(m market.Message) bool {
		_, bid := m.Payload.(*market.Bid)
		return bid && m.From == "silent"
	}, Drop: true})
	spec := market.JobSpec{ID: "jdecl", Cards: 1, MaxPriceCNY: 40, ExpectedDuration: market.Duration(2 * time.Hour), Command: []string{"x"}}
	if err := h.SubmitAt("coord", spec); err != nil {
		t.Fatal(err)
	}
	var rec market.JobRecord
	if !h.RunUntil(func() bool { rec, _ = h.Peer("coord").Node.Job("jdecl"); return rec.Explanation != nil }, time.Second) {
		t.Fatal("no placement round a second after the submit")
	}
	return rec
}

// --explain of a round with two declines and one supplier that never
// answered: both decliners and only them are "declined", counted in the
// summary (it said "declined 0"), and only the silent one is "no_reply".
func TestJobExplainCountsDeclines(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(declinedRound(t))
	code, out, errOut := n.run("job", "jdecl", "--explain")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, expl, ok := strings.Cut(out, "round 1: ")
	if !ok {
		t.Fatalf("no round line:\n%s", out)
	}
	head, rest, _ := strings.Cut(expl, "\n")
	if !strings.HasPrefix(head, "needed 1 card; asked 3 nodes") || !strings.Contains(head, "; 0 bids; ") {
		t.Errorf("head %q", head)
	}
	lines := strings.Split(strings.TrimRight(rest, "\n"), "\n")
	rows := table(strings.Join(lines[:4], "\n"))
	reasons := map[string]string{}
	for i := 1; i < len(rows); i++ {
		reasons[column(t, rows, i, "NODE")] = column(t, rows, i, "REASON")
		if c := column(t, rows, i, "CARDS"); c != "1" {
			t.Errorf("row %q: CARDS %s, want the 1 asked", rows[i], c)
		}
	}
	want := map[string]string{"short-1": "declined", "short-2": "declined", "silent": "no_reply"}
	if len(reasons) != 3 || reasons["short-1"] != want["short-1"] || reasons["short-2"] != want["short-2"] || reasons["silent"] != want["silent"] {
		t.Errorf("reasons by node %v, want %v:\n%s", reasons, want, rest)
	}
	if last := lines[len(lines)-1]; last != "cards by outcome: declined 2, no_reply 1" {
		t.Errorf("summary %q, want %q", last, "cards by outcome: declined 2, no_reply 1")
	}
}

// Counts are worded in the right number: 1 node, 1 bid.
func TestJobExplainSingular(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "jone", State: market.JobRunning, Explanation: &market.Explanation{
		Round: 1, Need: "1 card", Asked: 1, Bids: 1, Outcome: "cleared", ClearingPriceCU: 10,
		Cards: map[market.Reason]int{market.ReasonWon: 1}}})
	_, out, _ := n.run("job", "jone", "--explain")
	if !strings.Contains(out, "round 1: needed 1 card; asked 1 node; 1 bid; cleared") {
		t.Errorf("explain:\n%s", out)
	}
}

// When a member holding job records did not answer, the list says so on
// stderr, naming it; the table and the JSON array stay as they are.
func TestJobsNoteWhenAMemberDidNotAnswer(t *testing.T) {
	n := newFakeNode(t)
	n.b.AddJob(market.JobRecord{ID: "j1", State: market.JobRunning, SubmittedAt: time.Now()})
	n.b.SetUnanswered(5, nodeA, nodeB)
	code, out, errOut := n.run("jobs")
	if rows := table(out); code != 0 || len(rows) != 2 || rows[1][0] != "j1" {
		t.Errorf("exit %d:\n%s", code, out)
	}
	oneLineErr(t, "jobs", errOut, "2 of 5 nodes asked did not answer in time (12*aaaaaa, 12*bbbbbb): jobs only they hold are not listed")
	code, out, errOut = n.run("jobs", "--json")
	var jobs []market.JobRecord
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 {
		t.Errorf("--json: exit %d\n%s", code, out)
	}
	oneLineErr(t, "jobs --json", errOut, "2 of 5 nodes asked did not answer")
	// Every member answered: no note.
	n.b.SetUnanswered(5)
	if code, _, errOut := n.run("jobs"); code != 0 || errOut != "" {
		t.Errorf("all answered: exit %d, stderr %q", code, errOut)
	}
}

// A share that ended and left its working directory kept says where, and
// how to copy from it; a share that runs says nothing of it.
func TestJobShowsKeptOutputs(t *testing.T) {
	n := newFakeNode(t)
	j := runningJob()
	j.Placements[1].State = market.PlacementExited
	j.Placements[1].Outputs = "sha256:" + strings.Repeat("c", 64)
	j.Placements[0].Outputs = "sha256:" + strings.Repeat("d", 64) // an earlier attempt's, the share runs again
	j.Placements = append(j.Placements, market.Placement{Share: 0, Epoch: 3, Node: nodeB, State: market.PlacementRunning})
	n.b.AddJob(j)
	_, out, _ := n.run("job", "jtrain")
	if got, want := fields(out)["OUTPUTS"], "share 1 epoch 2, kept on "+shortID(nodeB)+": gpumesh cp jtrain:PATH DEST"; got != want {
		t.Errorf("OUTPUTS = %q, want %q\n%s", got, want, out)
	}
	if strings.Count(out, "OUTPUTS") != 1 {
		t.Errorf("want one OUTPUTS line:\n%s", out)
	}
	// A share that left its working directory empty says so: there is
	// nothing to copy.
	j.ID = "jempty"
	j.Placements[1].Outputs = blob.EmptyTree().String()
	n.b.AddJob(j)
	_, out, _ = n.run("job", "jempty")
	if got, want := fields(out)["OUTPUTS"], "share 1 epoch 2: none, its working directory was left empty"; got != want {
		t.Errorf("OUTPUTS = %q, want %q\n%s", got, want, out)
	}
}
