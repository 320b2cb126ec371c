//go:build unix

package e2e

// The checks of TestReadmeExamples' rules (readme_test.go).

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
)

// node is the i-th node a README line started.
func (r *readmeRun) node(i int) *proc {
	r.t.Helper()
	if i >= len(r.nodes) {
		r.t.Fatalf("the README names node %d before its `gpumesh node` line", i+1)
	}
	return r.nodes[i]
}

// job is what JOB_ID stands for.
func (r *readmeRun) job() string {
	r.t.Helper()
	if r.lastJob == "" {
		r.t.Fatal("JOB_ID before any submit")
	}
	return r.lastJob
}

var joinLogPattern = regexp.MustCompile(`msg="join this node with".* addr=(\S+)`)

// startNode runs a `gpumesh node` line with readmeNodeFlags.
func (r *readmeRun) startNode(c readmeCmd, line string) {
	words := r.words(c, line)
	if len(words) < 2 || words[0] != "gpumesh" || words[1] != "node" {
		r.t.Fatalf("%s: not a gpumesh node command: %q", c, words)
	}
	ports := freePorts(r.t, 2)
	p := &proc{t: r.t, name: fmt.Sprintf("node %d (README.md:%d)", len(r.nodes)+1, c.Line), p2pPort: ports[0], env: r.env(r.standIns)}
	p.apiAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	p.args = words[1:]
	for _, f := range readmeNodeFlags {
		for _, s := range f.flags {
			p.args = append(p.args, strings.NewReplacer("{p2p}", strconv.Itoa(p.p2pPort), "{api}", strconv.Itoa(ports[1])).Replace(s))
		}
	}
	if !slices.Contains(p.args, "--sim") {
		p.args = append(p.args, "--sim", readmeSimCards)
	}
	if i := slices.Index(p.args, "--data"); i >= 0 && i+1 < len(p.args) {
		p.dataDir = p.args[i+1]
	}
	p.start()
	r.t.Cleanup(p.kill)
	r.nodes = append(r.nodes, p)
	if r.api == "" {
		r.api = p.apiAddr
	}
	eventually(r.t, readmeTimeout, p.name+" logs the address to join it by", func() bool {
		m := joinLogPattern.FindStringSubmatch(p.log.String())
		return m != nil && m[1] == p.joinAddr()
	})
	for _, q := range r.nodes {
		eventually(r.t, readmeTimeout, q.name+" sees every node alive", func() bool {
			alive := 0
			for _, m := range q.peers() {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == len(r.nodes)
		})
	}
	if i := slices.Index(p.args, "--ingress"); i >= 0 {
		resp, err := client.Get("http://" + p.args[i+1] + "/")
		if err != nil {
			r.t.Fatalf("%s: its ingress: %v", c, err)
		}
		resp.Body.Close()
	}
}

// stopNodes stops the README's nodes as a user does, with Ctrl-C: each
// exits 0, and the others see it as left, not dead.
func (r *readmeRun) stopNodes() {
	for i := len(r.nodes) - 1; i >= 0; i-- {
		p := r.nodes[i]
		p.signal(syscall.SIGINT)
		p.waitExit(readmeTimeout)
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			r.t.Errorf("%s exited with status %d after SIGINT", p.name, code)
		}
		if i > 0 {
			eventually(r.t, readmeTimeout, r.nodes[0].name+" sees "+p.name+" as left", func() bool {
				return r.nodes[0].peers()[p.peerID].State == "left"
			})
		}
	}
}

var doctorLine = regexp.MustCompile(`^(OK|WARN|FAIL|SKIP) +(\S+(?: \S+)*?)  `)

// doctorChecks are the check names of a doctor table, and its last line.
func doctorChecks(lines []string) (names []string, summary string) {
	for _, l := range lines {
		if m := doctorLine.FindStringSubmatch(l); m != nil {
			names = append(names, m[2])
		}
	}
	if len(lines) > 0 {
		summary = lines[len(lines)-1]
	}
	return names, summary
}

func (r *readmeRun) doctor(c readmeCmd, line string) {
	out, stderr, code := r.run(c, line)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := 0
	if slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "FAIL") }) {
		want = 1
	}
	if code != want {
		r.t.Fatalf("%s: exit status %d, want %d (1 exactly when a check failed):\n%s%s", c, code, want, out, stderr)
	}
	got, summary := doctorChecks(lines)
	shown, shownSummary := doctorChecks(c.Output)
	if !slices.Equal(got, shown) {
		r.t.Fatalf("%s: doctor checks %q; the README shows %q", c, got, shown)
	}
	summaryPattern := regexp.MustCompile(`^\d+ checks: \d+ OK(, \d+ (WARN|FAIL|SKIP))*$`)
	if !summaryPattern.MatchString(summary) || !summaryPattern.MatchString(shownSummary) {
		r.t.Fatalf("%s: doctor ends with %q; the README shows %q", c, summary, shownSummary)
	}
}

var nodeInitLine = regexp.MustCompile(`^wrote (\S+) \((.+)\); start the node with: gpumesh node`)

func (r *readmeRun) nodeInit(c readmeCmd, line string) {
	stdout, stderr := r.mustRun(c, line, 0)
	out := strings.TrimSpace(stdout + stderr)
	m := nodeInitLine.FindStringSubmatch(out)
	if m == nil || len(c.Output) != 1 || !nodeInitLine.MatchString(c.Output[0]) {
		r.t.Fatalf("%s printed %q; the README shows %q", c, out, c.Output)
	}
	b, err := os.ReadFile(m[1])
	if err != nil {
		r.t.Fatal(err)
	}
	for _, want := range []string{`(?m)^region = ['"]cn-east['"]$`, regexp.QuoteMeta(r.node(0).joinAddr())} {
		if !regexp.MustCompile(want).Match(b) {
			r.t.Fatalf("%s: %s has no %s:\n%s", c, m[1], want, b)
		}
	}
}

func (r *readmeRun) keyCreate(c readmeCmd, line string) {
	out, _ := r.mustRun(c, line, 0)
	path := filepath.Join(r.home, ".config", "gpumesh", "owner.key")
	fi, err := os.Stat(path)
	if err != nil {
		r.t.Fatalf("%s: %v", c, err)
	}
	if fi.Mode().Perm() != 0o600 {
		r.t.Fatalf("%s: %s has mode %v", c, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	if r.key, err = owner.ParseKey(b); err != nil {
		r.t.Fatal(err)
	}
	r.ownerID = r.key.ID().String()
	if strings.TrimSpace(out) != r.ownerID {
		r.t.Fatalf("%s printed %q, want the key's owner ID %s", c, out, r.ownerID)
	}
	// The owner token of the curl examples: `gpumesh node --owner-tokens
	// FILE` maps it to this key; they read it from ./owner.token.
	token := fmt.Sprintf("readme-token-%d", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(r.home, "owner-tokens"), []byte(token+" "+path+"\n"), 0o600); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.work, "owner.token"), []byte(token+"\n"), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// submit runs a submit line and returns the job ID it printed, what
// JOB_ID stands for from now on.
func (r *readmeRun) submit(c readmeCmd, line string) string {
	r.t.Helper()
	out, _ := r.mustRun(c, line, 0)
	id, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if id == "" || strings.ContainsAny(id, " \t") {
		r.t.Fatalf("%s printed %q, not a job ID", c, out)
	}
	r.lastJob = id
	r.jobs = append(r.jobs, id)
	return id
}

// testJob submits a job the README's lines assume, as the README's owner.
func (r *readmeRun) testJob(args ...string) string {
	r.t.Helper()
	out, stderr, code := r.cli(append([]string{"submit", "--allow-simulated"}, args...)...)
	if code != 0 {
		r.t.Fatalf("gpumesh submit %s: exit status %d: %s", strings.Join(args, " "), code, stderr)
	}
	id := strings.TrimSpace(out)
	r.runningJob(id)
	return id
}

// cancel cancels a job the test submitted and waits until it has ended.
func (r *readmeRun) cancel(id string) {
	r.t.Helper()
	if _, stderr, code := r.cli("cancel", id); code != 0 {
		r.t.Fatalf("gpumesh cancel %s: exit status %d: %s", id, code, stderr)
	}
	r.endedJob(id)
}

// twoShareJob is the running job of two shares the exec examples reach
// into; the test submits it the first time.
func (r *readmeRun) twoShareJob() string {
	if r.twoShare == "" {
		r.twoShare = r.testJob("--gpus", "2", "--per-node", "1", "--net", "host", "--", "sleep", "infinity")
	}
	return r.twoShare
}

func runningCards(rec market.JobRecord) int {
	n := 0
	for _, p := range rec.Placements {
		if p.State == market.PlacementRunning {
			n += len(p.Cards)
		}
	}
	return n
}

func (r *readmeRun) submitNvidiaSMI(c readmeCmd, line string) {
	id := r.submit(c, line)
	rec := r.endedJob(id)
	if rec.State != market.JobFailed || rec.ExitCode == nil || *rec.ExitCode != 127 {
		r.t.Fatalf("%s: the job is %s (%s), want failed with 127 (no nvidia-smi here)", c, rec.State, rec.Reason)
	}
	// The README, on a command that cannot start: "`gpumesh job ID`
	// (`share 0 exited with status 127: did not start: executable file
	// not found in $PATH: nvidia-smi`)"
	const want = "share 0 exited with status 127: did not start: executable file not found in $PATH: nvidia-smi"
	if out, _, _ := r.cli("job", id); !strings.Contains(out, want) {
		r.t.Fatalf("%s: gpumesh job %s has no %q:\n%s", c, id, want, out)
	}
}

func (r *readmeRun) submitGang(c readmeCmd, line string) {
	// The README's nodes run in process mode (its stand-ins live in a temp
	// dir, which the sandbox hides), which gives a gang no private
	// network: this one meets on their own network. node's
	// TestGangMeetsOnItsPrivateNetwork runs a gang on its private network.
	hosted := strings.Replace(line, " --per-node 4 ", " --per-node 4 --net host ", 1)
	if hosted == line {
		r.t.Fatalf("%s: no ` --per-node 4 ` to add --net host after", c)
	}
	line = hosted
	id := r.submit(c, line)
	r.gangJob = id
	rec := r.endedJob(id)
	nodes := map[string]bool{}
	for _, p := range rec.Placements {
		if len(p.Cards) != 4 || p.Model != "h100-sxm-80g" {
			r.t.Fatalf("%s: a share of %d %s, want 4 h100-sxm-80g: %s", c, len(p.Cards), p.Model, describe(&rec))
		}
		nodes[p.Node] = true
	}
	if rec.State != market.JobSucceeded || len(rec.Placements) != 2 || len(nodes) != 2 {
		r.t.Fatalf("%s: the job is %s on %s, want succeeded on two nodes", c, rec.State, describe(&rec))
	}
	for _, p := range r.nodes {
		if nodes[p.peerID] && p.peerID != rec.Coordinator {
			r.gangSupplier = p // it ran a share for another node's coordination: receipts
		}
	}
	if out, _, _ := r.cli("logs", id, "--share", "1"); !strings.Contains(out, "--node_rank=1 ") || !strings.Contains(out, "--nnodes=2 ") {
		r.t.Fatalf("%s: share 1 printed %q, want its torchrun to have --nnodes=2 --node_rank=1", c, out)
	}
}

func (r *readmeRun) jobsList(c readmeCmd, line string) {
	out, _ := r.mustRun(c, line, 0)
	// the comment: "your jobs, from any node: ID, NAME, STATE, CARDS, EPOCH, COST (CNY), AGE"
	_, cols, ok := strings.Cut(c.Comment, ": ")
	if !ok {
		r.t.Fatalf("%s: its comment %q names no columns", c, c.Comment)
	}
	header, _, _ := strings.Cut(out, "\n")
	if got, want := regexp.MustCompile(`  +`).Split(strings.TrimSpace(header), -1), strings.Split(cols, ", "); !slices.Equal(got, want) {
		r.t.Fatalf("%s: columns %q, the README says %q", c, got, want)
	}
	other, _, _ := r.cli("jobs", "--api", r.node(1).apiAddr)
	for _, id := range r.jobs {
		if !strings.Contains(out, id) || !strings.Contains(other, id) {
			r.t.Fatalf("%s: job %s missing from this node's list:\n%s\nor the second node's:\n%s", c, id, out, other)
		}
	}
}

func (r *readmeRun) execShare(c readmeCmd, line string) {
	out, _ := r.mustRun(c, line, 0)
	got := strings.Split(strings.TrimSpace(out), "\n")
	shown := c.Output
	suffix := func(id string) string { return "/attempts/" + id + "-s1-e1/work" }
	if len(got) != 2 || !strings.HasPrefix(got[0], "uid=") || !strings.HasSuffix(got[1], suffix(r.twoShare)) {
		r.t.Fatalf("%s printed %q, want the uid and a directory ending in %s", c, got, suffix(r.twoShare))
	}
	if len(shown) != 2 || !strings.HasPrefix(shown[0], "uid=") || !strings.HasSuffix(shown[1], suffix("jqsx0p85dfrpqxqe6")) {
		r.t.Fatalf("%s: the README shows %q, which is not what it prints (%q)", c, shown, got)
	}
}

func (r *readmeRun) execTerminal(c readmeCmd, line string) {
	words := r.words(c, line) // gpumesh exec -it ID -- bash
	r.runningJob(words[3])
	p := r.start(c, line, true)
	if _, err := p.term.Write([]byte("echo readme-$((6*7)); exit 3\n")); err != nil {
		r.t.Fatal(err)
	}
	p.expect(r.t, "what the typed line printed", func(l string) bool { return strings.HasSuffix(l, "readme-42") })
	if code := p.wait(r.t); code != 3 {
		r.t.Fatalf("%s exited with %d, want the shell's 3", c, code)
	}
}

var forwardingLine = regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> (\d+) \(job (\S+) share 0\)$`)

func (r *readmeRun) portForwardLine(c readmeCmd, line string) {
	p := r.start(c, line, false)
	got := p.expect(r.t, "its Forwarding line", forwardingLine.MatchString)
	if len(c.Output) != 1 {
		r.t.Fatalf("%s: the README shows %q", c, c.Output)
	}
	// What it printed, with this run's ports and job as the README's.
	back := strings.NewReplacer(
		fmt.Sprintf("127.0.0.1:%d ", r.port("forward")), "127.0.0.1:8888 ",
		fmt.Sprintf("-> %d ", r.port("jupyter")), "-> 8888 ",
		r.twoShare, "jqsx0p85dfrpqxqe6").Replace(got)
	if back != c.Output[0] {
		r.t.Fatalf("%s printed %q; the README shows %q", c, got, c.Output[0])
	}
	if code := p.interrupt(r.t); code != 0 {
		r.t.Fatalf("%s exited with %d on Ctrl-C, want 0", c, code)
	}
}

func (r *readmeRun) portForwardRequest(c readmeCmd, line string) {
	r.runningJob(r.lastJob)
	p := r.start(c, line, false)
	m := forwardingLine.FindStringSubmatch(p.expect(r.t, "its Forwarding line", forwardingLine.MatchString))
	var body string
	eventually(r.t, readmeTimeout, "the job answers through the forward", func() bool { // the server in the job may still be starting
		resp, err := client.Get("http://" + m[1] + "/lab")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.HasPrefix(body, "hello from share 0: GET /lab") {
		r.t.Fatalf("%s: answered %q", c, body)
	}
	if code := p.interrupt(r.t); code != 0 {
		r.t.Fatalf("%s exited with %d on Ctrl-C, want 0", c, code)
	}
}

func (r *readmeRun) offers(c readmeCmd, line string) {
	out, _ := r.mustRun(c, line, 0)
	lines := strings.Split(out, "\n")
	if len(c.Output) == 0 {
		r.t.Fatalf("%s: the README shows no output", c)
	}
	if got, want := strings.Fields(lines[0]), strings.Fields(c.Output[0]); !slices.Equal(got, want) {
		r.t.Fatalf("%s: columns %q; the README shows %q", c, got, want)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "rtx4090-24g ") }) {
		r.t.Fatalf("%s: no rtx4090-24g in:\n%s", c, out)
	}
}

// curl runs a curl line and returns the body; it fails the test unless
// the HTTP status is want (0: any 2xx).
func (r *readmeRun) curl(c readmeCmd, line string, want int) string {
	r.t.Helper()
	out, stderr := r.mustRun(c, line, 0)
	i := strings.LastIndex(out, curlStatusMark)
	if i < 0 {
		r.t.Fatalf("%s: no HTTP status (from ~/.curlrc) in %q; stderr %q", c, out, stderr)
	}
	body := strings.TrimSuffix(out[:i], "\n")
	status, err := strconv.Atoi(strings.TrimSpace(out[i+len(curlStatusMark):]))
	if err != nil || (want != 0 && status != want) || (want == 0 && status/100 != 2) {
		r.t.Fatalf("%s: HTTP status %s, want %d:\n%s", c, strings.TrimSpace(out[i+len(curlStatusMark):]), want, body)
	}
	return body
}

// curlJSON runs a curl line that answers JSON and decodes it into v (nil:
// only checked to be JSON without an "error").
func (r *readmeRun) curlJSON(c readmeCmd, line string, want int, v any) {
	r.t.Helper()
	body := r.curl(c, line, want)
	var errBody struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &errBody); err != nil || errBody.Error != nil {
		r.t.Fatalf("%s: answered %q (%v)", c, body, err)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(body), v); err != nil {
			r.t.Fatalf("%s: %v: %s", c, err, body)
		}
	}
}

var terminalCodes = regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z]|[\x00-\x08\x0b-\x1f\x7f]`)

// head is the first n lines of s, and how many more there were, without
// terminal control codes.
func head(s string, n int) string {
	lines := strings.Split(strings.TrimRight(terminalCodes.ReplaceAllString(s, ""), "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n(%d more lines)", len(lines)-n)
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(s, "\n", "\n"+by)
}

// billVerify checks `gpumesh bill ID --verify`: the lines the README shows
// (JOB, BILL, the share and receipt tables, VERIFIED), with this job's
// figures.
func (r *readmeRun) billVerify(c readmeCmd, line string) {
	out, stderr := r.mustRun(c, line, 0)
	for _, want := range []struct{ what, pattern string }{
		{"the JOB line", `(?m)^JOB ` + regexp.QuoteMeta(r.gangJob) + ` · succeeded · owner o1\S+ · coordinator 12\*\S{6}$`},
		{"the BILL line", `(?m)^BILL \d+\.\d\d CNY \([\d.]+ card-seconds\), \d+ placements?, \d+ receipts? \(from 12\*\S{6}\)$`},
		{"the shares' header", `(?m)^SHARE +EPOCH +NODE +CARDS +STATE +PRICE \(CNY/h\) +CARD-SECONDS +COST \(CNY\) +RECEIPTS$`},
		{"the receipts' header", `(?m)^RECEIPT +SHARE +EPOCH +SIGNED +CARD-SECONDS +COST \(CNY\) +RUNNER +COORDINATOR$`},
		{"the VERIFIED line", `(?m)^VERIFIED \d+ receipts?, \d+ signatures?[:;] `},
	} {
		if !regexp.MustCompile(want.pattern).MatchString(out) {
			r.t.Fatalf("%s: no %s (%s) in:\n%s%s", c, want.what, want.pattern, out, stderr)
		}
		if !regexp.MustCompile(want.pattern).MatchString(strings.ReplaceAll(strings.Join(c.Output, "\n"), "j1 ·", r.gangJob+" ·")) {
			r.t.Fatalf("%s: the README shows no %s (%s)", c, want.what, want.pattern)
		}
	}
	if !strings.Contains(out, ", 2 placements, ") {
		r.t.Fatalf("%s: the gang's bill does not count its 2 placements:\n%s", c, out)
	}
}

// earnings checks `gpumesh earnings` on a supplier: its OWED and LEDGER
// lines, and the gang job among its jobs.
func (r *readmeRun) earnings(c readmeCmd, line string) {
	out, stderr := r.mustRun(c, line, 0)
	for _, want := range []struct{ what, pattern string }{
		{"the OWED line", `(?m)^OWED in all · \d+\.\d\d CNY \([\d.]+ card-hours\) countersigned · \d+\.\d\d CNY \([\d.]+ card-hours\) unconfirmed$`},
		{"the LEDGER line", `(?m)^LEDGER \d+\.\d\d CNY \([\d.]+ card-hours\) in all \(gpumesh status\)$`},
	} {
		re := regexp.MustCompile(want.pattern)
		if !re.MatchString(out) {
			r.t.Fatalf("%s: no %s (%s) in:\n%s%s", c, want.what, want.pattern, out, stderr)
		}
		if !re.MatchString(strings.Join(c.Output, "\n")) {
			r.t.Fatalf("%s: the README shows no %s (%s)", c, want.what, want.pattern)
		}
	}
	if !strings.Contains(out, r.gangJob) {
		r.t.Fatalf("%s: the gang job %s, which this supplier ran a share of, is not among its earnings:\n%s", c, r.gangJob, out)
	}
}
