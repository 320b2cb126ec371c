package market_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// Scenario scripts (testdata/*.txt) drive a markettest harness command by
// command and compare what each command printed with the expected output
// in the file, in the style of etcd raft's datadriven tests:
//
//	# a comment
//	command arg key=value
//	optional input lines (a job spec in JSON)
//	----
//	expected output
//	(a blank line ends the case)
//
// Run with -rewrite to write the actual output into the files (then read
// the diff before committing it).
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of scenario files")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

type scenarioCase struct {
	line     int
	cmd      string
	args     []string
	input    []string
	expected string
	raw      []string // the lines of the case up to "----"
}

func parseScenario(t *testing.T, path string) (cases []scenarioCase, trailer []string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			trailer = append(trailer, l)
			i++
			continue
		}
		c := scenarioCase{line: i + 1, raw: append(trailer, l)}
		trailer = nil
		fields := strings.Fields(l)
		c.cmd, c.args = fields[0], fields[1:]
		i++
		for i < len(lines) && lines[i] != "----" {
			c.input = append(c.input, lines[i])
			c.raw = append(c.raw, lines[i])
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: %s has no ---- line", path, c.line, c.cmd)
		}
		i++
		var out []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			out = append(out, lines[i])
			i++
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases, trailer
}

func runScenario(t *testing.T, path string) {
	cases, _ := parseScenario(t, path)
	s := &scenario{t: t, h: markettest.New(markettest.Options{Seed: 1})}
	s.h.OnReady = s.onReady
	var rewritten []string
	failed := false
	for _, c := range cases {
		got, err := s.run(c)
		if err != nil {
			got = "error: " + err.Error()
		}
		got = strings.TrimRight(got, "\n")
		if got == "" {
			got = "ok"
		}
		for _, v := range s.h.Violations {
			t.Errorf("%s:%d: invariant violated: %s", path, c.line, v)
		}
		s.h.Violations = nil
		if *rewrite {
			raw := c.raw
			for len(raw) > 0 && strings.TrimSpace(raw[0]) == "" {
				raw = raw[1:]
			}
			if len(rewritten) > 0 {
				rewritten = append(rewritten, "")
			}
			rewritten = append(rewritten, raw...)
			rewritten = append(rewritten, "----", got)
			continue
		}
		if got != c.expected {
			failed = true
			t.Errorf("%s:%d: %s %s\n--- got\n%s\n--- want\n%s", path, c.line, c.cmd, strings.Join(c.args, " "), got, c.expected)
		}
	}
	if *rewrite {
		out := strings.TrimRight(strings.Join(rewritten, "\n"), "\n") + "\n"
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if failed {
		t.Log("run with -rewrite to see every case's output in the file")
	}
}

type scenario struct {
	t     *testing.T
	h     *markettest.Harness
	trace []string
	show  map[string]bool // what run prints: msgs, renewals, execs, notes
	// snapshots are records saved by `snapshot`, by name.
	snapshots map[string]market.JobRecord
}

func (s *scenario) elapsed() string {
	return fmt.Sprintf("%6.3fs", s.h.Now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Seconds())
}

func (s *scenario) onReady(p *markettest.Peer, rd market.Ready) {
	if s.show == nil {
		return
	}
	at := s.elapsed() + " "
	if s.show["execs"] {
		for _, e := range rd.Stop {
			s.trace = append(s.trace, at+fmt.Sprintf("%s: stop %s share=%d epoch=%d (%s)", p.ID, e.Job, e.Share, e.Epoch, e.Cause))
		}
		for _, e := range rd.Start {
			line := fmt.Sprintf("%s: start %s share=%d epoch=%d cards=%s world=%d", p.ID, e.Job, e.Share, e.Epoch, strings.Join(e.Cards, ","), e.World)
			if e.Gang != nil {
				line += fmt.Sprintf(" rank=%d/%d master=%s", e.Gang.NodeRank, e.Gang.NNodes, e.Gang.Master)
			}
			s.trace = append(s.trace, at+line)
		}
	}
	if s.show["notes"] {
		for _, n := range rd.Notifications {
			from := n.From
			if from == "" {
				from = "new"
			}
			line := fmt.Sprintf("%s: %s %s → %s", p.ID, n.Job, from, n.To)
			if n.Reason != "" {
				line += ": " + n.Reason
			}
			s.trace = append(s.trace, at+line)
		}
	}
}

func (s *scenario) args(c scenarioCase) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, a := range c.args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	return pos, kv
}

// run executes one case and returns what it printed: what happened while
// it ran (deliveries, executions, notifications), then its own output.
func (s *scenario) run(c scenarioCase) (string, error) {
	_, kv := s.args(c)
	var out string
	var err error
	traced := s.capture(kv, func() { out, err = s.exec(c) })
	return traced + out, err
}

func (s *scenario) exec(c scenarioCase) (string, error) {
	pos, kv := s.args(c)
	h := s.h
	switch c.cmd {
	case "node":
		return "", s.addNodes(pos, kv)
	case "submit":
		var spec market.JobSpec
		if err := json.Unmarshal([]byte(strings.Join(c.input, "\n")), &spec); err != nil {
			return "", err
		}
		coord, err := "", error(nil)
		if at, ok := kv["at"]; ok {
			coord, err = at, h.SubmitAt(at, spec)
		} else {
			coord, err = h.Submit(spec)
		}
		if err != nil {
			return "", err
		}
		rec, _ := h.Job(spec.ID)
		return strings.TrimSpace(fmt.Sprintf("%s coordinates %s: %s %s", coord, spec.ID, rec.State, rec.Reason)), nil
	case "run":
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return "", err
		}
		h.RunFor(d)
		return "", nil
	case "run-until":
		// run-until JOB STATE [cards=N] [limit=DUR]: runs until the job is
		// in STATE (with N cards running).
		limit := 10 * time.Second
		if v, ok := kv["limit"]; ok {
			limit, _ = time.ParseDuration(v)
		}
		cards := -1
		if v, ok := kv["cards"]; ok {
			cards, _ = strconv.Atoi(v)
		}
		start := h.Now
		ok := h.RunUntil(func() bool {
			r, _ := h.Job(pos[0])
			return string(r.State) == pos[1] && (cards < 0 || markettest.LiveCards(r) == cards)
		}, limit)
		r, _ := h.Job(pos[0])
		return fmt.Sprintf("%s is %s with %d cards after %v (reached: %v)", pos[0], r.State, markettest.LiveCards(r), h.Now.Sub(start), ok), nil
	case "job":
		r, ok := h.Job(pos[0])
		if !ok {
			return "", fmt.Errorf("no job %s", pos[0])
		}
		return formatJob(r, pos[1:]), nil
	case "cards":
		return formatCards(h.Peer(pos[0]).Node.Cards()), nil
	case "drop", "delay":
		rule := &markettest.Rule{Drop: c.cmd == "drop", Match: matcher(pos[0], kv)}
		if v, ok := kv["count"]; ok {
			rule.Count, _ = strconv.Atoi(v)
		}
		if v, ok := kv["by"]; ok {
			rule.Delay, _ = time.ParseDuration(v)
		}
		h.AddRule(rule)
		return "", nil
	case "clear-rules":
		h.ClearRules()
		return "", nil
	case "down", "up":
		h.SetDown(pos[0], c.cmd == "down")
		return "", nil
	case "cut", "heal":
		h.SetCut(pos[0], c.cmd == "cut")
		return "", nil
	case "peerlost":
		return "", h.PeerLost(pos[0], pos[1])
	case "checkpoint":
		// checkpoint JOB SHARE EPOCH from=NODE holders=A,B [manifest=HEX]
		// [bytes=N new=N]: the runner reports a checkpoint to the job's
		// coordinator.
		share, _ := strconv.Atoi(pos[1])
		epoch, _ := strconv.ParseUint(pos[2], 10, 64)
		manifest := kv["manifest"]
		if manifest == "" {
			manifest = fmt.Sprintf("%064x", epoch)
		}
		bytes, _ := strconv.ParseInt(kv["bytes"], 10, 64)
		fresh, _ := strconv.ParseInt(kv["new"], 10, 64)
		cp := market.Checkpoint{Share: share, Epoch: epoch, Manifest: "sha256:" + manifest, Bytes: bytes, NewBytes: fresh,
			Holders: strings.Split(kv["holders"], ","), At: h.Now}
		return "", h.Step(h.Coordinator(pos[0]), market.CheckpointTaken{Now: h.Now, Job: pos[0], From: kv["from"], Checkpoint: cp})
	case "snapshot":
		// snapshot JOB as=NAME: saves the record the job's coordinator
		// last persisted, for adopt snapshot=NAME (a replica that missed
		// what came after).
		coord := h.Peer(h.Coordinator(pos[0]))
		rec, ok := coord.Jobs[pos[0]]
		if !ok {
			return "", fmt.Errorf("%s persisted no record of %s", coord.ID, pos[0])
		}
		if s.snapshots == nil {
			s.snapshots = map[string]market.JobRecord{}
		}
		s.snapshots[kv["as"]] = rec
		return fmt.Sprintf("saved %s: %s version=%d", kv["as"], rec.State, rec.Version), nil
	case "adopt":
		// adopt NODE JOB [term=N] [from=NODE] [snapshot=NAME]: NODE takes
		// the job over from the record its coordinator (or the from node)
		// last persisted, or from a snapshot.
		from := h.Coordinator(pos[1])
		if kv["from"] != "" {
			from = kv["from"]
		}
		old := h.Peer(from)
		rec, ok := old.Jobs[pos[1]]
		if name := kv["snapshot"]; name != "" {
			rec, ok = s.snapshots[name]
		}
		if !ok {
			return "", fmt.Errorf("%s persisted no record of %s", old.ID, pos[1])
		}
		term, _ := strconv.ParseUint(kv["term"], 10, 64)
		if err := h.Adopt(pos[0], rec, term); err != nil {
			return "", err
		}
		r, _ := h.Job(pos[1])
		return fmt.Sprintf("%s coordinates %s: %s term=%d epoch=%d", pos[0], pos[1], r.State, r.Term, r.Epoch), nil
	case "cancel":
		return "", h.Step(h.Coordinator(pos[0]), market.CancelJob{Now: h.Now, Job: pos[0]})
	case "scale":
		n, _ := strconv.Atoi(pos[1])
		return "", h.Step(h.Coordinator(pos[0]), market.ScaleJob{Now: h.Now, Job: pos[0], Cards: n})
	case "exit":
		// exit NODE JOB SHARE EPOCH CODE [outputs=DIGEST], then
		// optionally the runner's reason on the next line (a process that
		// did not start); outputs names what the runner kept of the
		// attempt's working directory.
		share, _ := strconv.Atoi(pos[2])
		epoch, _ := strconv.ParseUint(pos[3], 10, 64)
		code, _ := strconv.Atoi(pos[4])
		return "", h.ExitWithOutputs(pos[0], markettest.AttemptKey{Job: pos[1], Share: share, Epoch: epoch}, code, strings.Join(c.input, "\n"), kv["outputs"])
	case "notstarted":
		// notstarted NODE JOB SHARE EPOCH, then the runner's reason on the
		// next line: the node could not ready the attempt (its image).
		share, _ := strconv.Atoi(pos[2])
		epoch, _ := strconv.ParseUint(pos[3], 10, 64)
		return "", h.NotStarted(pos[0], markettest.AttemptKey{Job: pos[1], Share: share, Epoch: epoch}, strings.Join(c.input, "\n"))
	case "unhealthy":
		// unhealthy NODE CARD...: those cards report unhealthy from now on.
		p := h.Peer(pos[0])
		cards := p.Node.Cards()
		next := make([]device.Card, 0, len(cards))
		for _, cs := range cards {
			card := cs.Card
			if slices.Contains(pos[1:], card.ID) {
				card.Health.Healthy, card.Health.Reason = false, "Xid 79"
			}
			next = append(next, card)
		}
		return "", h.SetCards(pos[0], next)
	case "explain":
		r, _ := h.Job(pos[0])
		if r.Explanation == nil {
			return "no explanation", nil
		}
		return strings.TrimRight(r.Explanation.String(), "\n"), nil
	case "track":
		// track NODE: the track records NODE keeps as a coordinator.
		var lines []string
		for _, r := range h.Peer(pos[0]).Node.TrackRecords() {
			lines = append(lines, fmt.Sprintf("%s lost=%d ended=%d losses=%.3f run=%.1fs", r.Node, r.Lost, r.Ended, r.Losses, r.RunSeconds))
		}
		if len(lines) == 0 {
			return "no track records", nil
		}
		return strings.Join(lines, "\n"), nil
	case "errors":
		var keys []string
		for k := range h.Errors {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var lines []string
		for _, k := range keys {
			lines = append(lines, fmt.Sprintf("%s: %d", k, h.Errors[k]))
		}
		return strings.Join(lines, "\n"), nil
	}
	return "", fmt.Errorf("unknown command %q", c.cmd)
}

// capture runs f and returns what it traced, as chosen by show= (a comma
// list of msgs, renewals, execs, notes; default msgs,execs,notes).
func (s *scenario) capture(kv map[string]string, f func()) string {
	show := "msgs,execs,notes"
	if v, ok := kv["show"]; ok {
		show = v
	}
	s.show = map[string]bool{}
	for _, w := range strings.Split(show, ",") {
		s.show[w] = true
	}
	s.trace = nil
	s.h.Trace = func(line string) {
		if !s.show["msgs"] {
			return
		}
		if !s.show["renewals"] && (strings.Contains(line, " renewal ") || strings.Contains(line, " renewal_ack ")) {
			return
		}
		s.trace = append(s.trace, s.elapsed()+" "+line)
	}
	f()
	s.show = nil
	out := s.trace
	s.trace = nil
	if len(out) > 0 {
		return strings.Join(out, "\n") + "\n"
	}
	return ""
}

// addNodes handles "node ID... cards=SPEC [mtbf=DUR] [price=MODEL:P,...]
// [region=R] [network=MAX] [private=no] [count=N] [sim=1]": with count,
// IDs are ID01..IDN; network is the most network the supplier's policy
// allows a job; private=no says it cannot give a gang a private network;
// sim=1 makes the cards simulated (gpumesh node --sim).
func (s *scenario) addNodes(ids []string, kv map[string]string) error {
	if n, ok := kv["count"]; ok {
		count, err := strconv.Atoi(n)
		if err != nil {
			return err
		}
		prefix := ids[0]
		ids = nil
		for i := 1; i <= count; i++ {
			ids = append(ids, fmt.Sprintf("%s%03d", prefix, i))
		}
	}
	for _, id := range ids {
		cfg := market.DefaultConfig(id)
		cards, err := markettest.Cards(id, kv["cards"])
		if err != nil {
			return err
		}
		if kv["sim"] == "1" {
			for i := range cards {
				cards[i].Backend = device.SimBackendName
			}
		}
		cfg.Cards = cards
		cfg.Region = kv["region"]
		cfg.Policy.MaxNetwork = market.JobNetwork(kv["network"])
		if v, ok := kv["kinds"]; ok {
			kinds, err := market.ParseJobKinds(strings.Split(v, ","))
			if err != nil {
				return err
			}
			cfg.Policy.JobKinds = kinds
		}
		cfg.Policy.NoImages = kv["noimages"]
		if kv["private"] == "no" {
			cfg.Policy.NoPrivateNet = "the node needs nft (package nftables)"
		}
		if v, ok := kv["mtbf"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			cfg.Availability.MTBF = market.Duration(d)
		}
		if v, ok := kv["price"]; ok {
			cfg.Prices.PerModel = map[string]float64{}
			for _, part := range strings.Split(v, ",") {
				model, price, _ := strings.Cut(part, ":")
				p, err := strconv.ParseFloat(price, 64)
				if err != nil {
					return err
				}
				cfg.Prices.PerModel[model] = p
			}
		}
		if _, err := s.h.Add(cfg); err != nil {
			return err
		}
	}
	return nil
}

// matcher matches messages of a payload type ("award", "*"), optionally
// from= and to= a node.
func matcher(typ string, kv map[string]string) func(market.Message) bool {
	return func(m market.Message) bool {
		if typ != "*" && m.Payload.Type() != typ {
			return false
		}
		if v, ok := kv["from"]; ok && m.From != v {
			return false
		}
		if v, ok := kv["to"]; ok && m.To != v {
			return false
		}
		return true
	}
}

// formatJob prints a job record: a header, then one line per placement
// (with all also the placements that are over; with models each
// placement's model).
func formatJob(r market.JobRecord, flags []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s epoch=%d cards=%d cost=%.4f", r.ID, r.State, r.Epoch, r.Cards, r.CostCNY)
	if r.ExitCode != nil {
		fmt.Fprintf(&b, " exit=%d", *r.ExitCode)
	}
	if r.Restarts > 0 {
		fmt.Fprintf(&b, " restarts=%d", r.Restarts)
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, " reason=%q", r.Reason)
	}
	live, total := 0, 0
	for _, p := range r.Placements {
		if p.State == market.PlacementRunning || p.State == market.PlacementAccepted {
			live++
			total += len(p.Cards)
		}
	}
	if slices.Contains(flags, "summary") {
		nodes := map[string]bool{}
		for _, p := range r.Placements {
			if p.State == market.PlacementRunning {
				nodes[p.Node] = true
			}
		}
		fmt.Fprintf(&b, "\n  %d live shares hold %d cards on %d nodes; %d placements in all", live, total, len(nodes), len(r.Placements))
		return b.String()
	}
	shown := r.Live()
	if slices.Contains(flags, "all") {
		shown = r.Placements
	}
	for _, p := range shown {
		cards := append([]string(nil), p.Cards...)
		slices.Sort(cards)
		fmt.Fprintf(&b, "\n  share=%d epoch=%d %s [%s] %s price=%.2f bid=%.2f", p.Share, p.Epoch, p.Node, strings.Join(cards, " "), p.State, p.PriceCNY, p.BidCNY)
		if slices.Contains(flags, "models") {
			fmt.Fprintf(&b, " model=%s", p.Model)
		}
		if p.Simulated {
			b.WriteString(" simulated")
		}
		if p.Region != "" {
			fmt.Fprintf(&b, " region=%s", p.Region)
		}
		if p.Cause != "" {
			fmt.Fprintf(&b, " cause=%s", p.Cause)
		}
		if p.Reason != "" {
			fmt.Fprintf(&b, " (%s)", p.Reason)
		}
		if p.CardSeconds > 0 {
			fmt.Fprintf(&b, " usage=%.1fcs", p.CardSeconds)
		}
		if p.Outputs != "" {
			fmt.Fprintf(&b, " outputs=%s…", p.Outputs[:min(len(p.Outputs), 15)])
		}
	}
	if slices.Contains(flags, "checkpoints") {
		for _, cp := range r.Checkpoints {
			fmt.Fprintf(&b, "\n  checkpoint share=%d epoch=%d %s… bytes=%d new=%d holders=%s", cp.Share, cp.Epoch, cp.Manifest[:15], cp.Bytes, cp.NewBytes, strings.Join(cp.Holders, ","))
		}
	}
	return b.String()
}

func formatCards(cards []market.CardStatus) string {
	var lines []string
	for _, c := range cards {
		line := fmt.Sprintf("%s %s %s", c.Card.ID, c.Card.Model, c.State)
		switch {
		case c.State == market.CardRunning:
			line += fmt.Sprintf(" %s share=%d epoch=%d", c.Job, c.Share, c.Epoch)
			if c.Lease != "" {
				line += fmt.Sprintf(" (reserved %s for %s)", c.Lease, c.LeaseJob)
			}
		case c.Lease != "":
			line += fmt.Sprintf(" %s for %s until %s", c.Lease, c.LeaseJob, c.Until.Format("05.000"))
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
