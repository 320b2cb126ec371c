//go:build unix

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// TestReadmeExamples runs every gpumesh and curl command of the README's
// "Running a node" and "Submitting jobs" sections, in README order, as a
// user would: the README's own `gpumesh node` lines start the mesh (two
// nodes, then a third with an ingress), and the commands after them talk
// to it. Placeholders (JOB_ID, the peer addresses, ports) are replaced by
// readmeSubs; a command whose outcome the README states is checked by its
// rule in readmeRules, and every other one must exit 0. A command that
// cannot run here must be in readmeSkips with the reason. The tables
// cannot rot: an entry that no README command uses fails the test.
func TestReadmeExamples(t *testing.T) {
	needReplica(t)
	for _, tool := range []string{"bash", "curl", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's examples are shell commands run in bash with curl and tar: %v", err)
		}
	}
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := readmeCommands(string(src), readmeSections...)
	if err != nil {
		t.Fatal(err)
	}
	if problems := readmeTablesUnused(cmds); len(problems) > 0 {
		t.Fatalf("the test's tables name what the README no longer has (update them with the README):\n%s", strings.Join(problems, "\n"))
	}
	r := newReadmeRun(t)
	start := time.Now()
	for _, c := range cmds {
		if c.Assign {
			r.assigns[c.Block] = append(r.assigns[c.Block], r.substitute(c.Text))
			continue
		}
		if s, ok := readmeSkipOf(c); ok {
			t.Logf("README.md:%d skipped (%s): %s", c.Line, s.why, c.Text)
			continue
		}
		rule := readmeRuleOf(c)
		if rule.before != nil {
			rule.before(r, c)
		}
		line := r.substitute(c.Text)
		lineStart := time.Now()
		r.printed, r.procs = "", nil
		rule.run(r, c, line)
		printed := r.printed
		for _, p := range r.procs {
			printed += strings.Join(p.seen, "\n") + "\n" + p.stderr.String()
		}
		t.Logf("README.md:%d ok in %v: %s\n    ran: %s\n    checked: %s\n    printed:\n%s", c.Line, time.Since(lineStart).Round(time.Millisecond),
			c.Text, line, rule.what, indent(head(printed, 8), "        "))
	}
	r.stopNodes()
	t.Logf("%d README commands in %v", len(cmds), time.Since(start).Round(time.Millisecond))
}

// TestReadmeTablesMatchREADME checks, without starting anything, that
// every entry of the README test's tables still names a README command,
// and that the check itself names each entry it cannot find.
func TestReadmeTablesMatchREADME(t *testing.T) {
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := readmeCommands(string(src), readmeSections...)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) == 0 {
		t.Fatalf("no commands in the README's sections %q", readmeSections)
	}
	if problems := readmeTablesUnused(cmds); len(problems) > 0 {
		t.Errorf("the test's tables name what the README no longer has (update them with the README):\n%s", strings.Join(problems, "\n"))
	}
	if got, want := len(readmeTablesUnused(nil)), len(readmeSkips)+len(readmeSubs)+len(readmeRules); got != want {
		t.Errorf("with no README commands, %d entries are named unused, want all %d", got, want)
	}
}

// readmeSections are the README's sections whose commands run.
var readmeSections = []string{"Running a node", "Submitting jobs"}

// readmeSkip is a README command the test cannot run, and why.
type readmeSkip struct{ match, why string }

// readmeSkips are the commands that cannot run here. An entry is a prefix
// of a command as the README writes it; one that matches no command fails
// the test.
var readmeSkips = []readmeSkip{
	{match: "gpumesh submit --gpus 1 --image pytorch/pytorch", why: "it pulls from Docker Hub, which this machine cannot reach; jobs in images are tested against an in-process registry in node/images_test.go and cmd/gpumesh/image_test.go"},
	{match: "gpumesh submit --gpus 1 --image nvcr.io/nvidia/k8s/cuda-sample", why: "it pulls from nvcr.io, which this machine cannot reach (see node/images_test.go)"},
	{match: "gpumesh submit --gpus 16 --image nvidia=nvcr.io", why: "it pulls from nvcr.io and a Moore Threads registry, which this machine cannot reach, and needs 16 cards of two vendors (per-vendor images are tested in market/testdata/images.txt and cmd/gpumesh/image_test.go)"},
	{match: "curl -s -H \"$AUTH\" -X PUT --data-binary @manifest.json", why: "it needs a tree's manifest, which gpumesh submit --payload computes (the upload is tested in node/payloads_test.go)"},
	{match: "gpumesh submit --gpus 1 --input s3://datasets/imagenet:/data", why: "it reaches AWS S3, which this machine cannot; S3 inputs, outputs and secrets are tested against a real S3 server (gofakes3) in node/data_test.go TestS3InputsAndOutputs and node/objstore"},
	{match: "curl -s -H \"$AUTH\" -X PUT --data-binary @chunk", why: "it needs a chunk of that manifest (see the line before)"},
	{match: "gpumesh logs j7k2… --stderr", why: "it needs a job whose checkpoint does not fit a store; node/checkpoint_test.go TestCheckpointIntoAFullStoreKeepsTheJobAndThePreviousCheckpoint checks that note in the job's stderr, for the runner's store and for the holder's"},
}

func readmeSkipOf(c readmeCmd) (readmeSkip, bool) {
	for _, s := range readmeSkips {
		if strings.HasPrefix(c.Text, s.match) {
			return s, true
		}
	}
	return readmeSkip{}, false
}

// readmeSub replaces a placeholder of the README (old) by what it stands
// for here.
type readmeSub struct {
	old string
	new func(r *readmeRun) string
	why string
}

// readmeSubs, in order, on every command and assignment before it runs.
var readmeSubs = []readmeSub{
	{"sudo gpumesh node init", func(r *readmeRun) string { return "gpumesh node init --config ~/node-init.toml" },
		"as root it would write /etc/gpumesh/node.toml: the test writes the file in its own HOME"},
	{"sudo gpumesh", func(r *readmeRun) string { return "gpumesh" },
		"the test runs as the user it is (as root, sudo changes nothing)"},
	{"gpumesh submit ", func(r *readmeRun) string { return "gpumesh submit --allow-simulated " },
		"the mesh's cards are simulated, and the README's first node line says such cards run only jobs that allow them"},
	{`"max_price_cny": 25,`, func(r *readmeRun) string { return `"max_price_cny": 25, "allow_simulated": true,` },
		"the same for the spec the API takes"},
	{"gpumesh bill j1 ", func(r *readmeRun) string { return "gpumesh bill " + r.gangJob + " " },
		"the gang example's job: it succeeded on two suppliers, whose receipts make its bill"},
	{"--api 127.0.0.1:17072", func(r *readmeRun) string { return "--api " + r.gangSupplier.apiAddr },
		"a supplier: the node that ran a share of the gang example for a coordinator elsewhere (so it holds countersigned receipts)"},
	{"/ip4/192.168.1.10/tcp/4747/p2p/12D3KooW...", func(r *readmeRun) string { return r.node(0).joinAddr() },
		"the first node's address, as its log gives it"},
	{"/ip4/203.0.113.7/tcp/4747/p2p/12D3KooW...", func(r *readmeRun) string { return r.node(0).joinAddr() },
		"a public peer: the first node"},
	{"/ip4/198.51.100.4/tcp/4747/p2p/12D3KooW...", func(r *readmeRun) string { return r.node(1).joinAddr() },
		"another public peer: the second node"},
	{"jqsx0p85dfrpqxqe6", (*readmeRun).twoShareJob,
		"a running job of two shares: `gpumesh submit --gpus 2 --per-node 1 --net host -- sleep infinity`, submitted by the test"},
	{"JOB_ID", func(r *readmeRun) string { return r.job() },
		"the job the last submit printed"},
	{"j7k2…", func(r *readmeRun) string { return r.job() },
		"the README's elided job ID: the job the last submit printed"},
	{"8888:8888", func(r *readmeRun) string { return fmt.Sprintf("%d:%d", r.port("forward"), r.port("jupyter")) },
		"the job and port-forward run on one machine: each its own free port"},
	{"--port 8888", func(r *readmeRun) string { return fmt.Sprintf("--port %d", r.port("jupyter")) },
		"jobs run in process isolation here, on the machine's network: a free port"},
	{"--ingress 0.0.0.0:8080 ...", func(r *readmeRun) string {
		return fmt.Sprintf("--ingress 127.0.0.1:%d --join %s --data ~/gpumesh-c --owner-tokens ~/owner-tokens", r.port("ingress"), r.node(0).joinAddr())
	}, "a free loopback port, and the rest of a node's flags: it joins the first node; its owner token serves the curl examples ($API is this node)"},
	{"INGRESS:8080", func(r *readmeRun) string { return fmt.Sprintf("127.0.0.1:%d", r.port("ingress")) },
		"the third node's ingress"},
	{"--replicas 3", func(r *readmeRun) string { return "--replicas 1" },
		"three replicas on one machine cannot all listen on one port outside the sandbox (jobs run in process isolation here); TestServiceAnswersThroughAnyNodeAndTheIngressAndSurvivesAKill runs three in the sandbox"},
	{"--port 8000", func(r *readmeRun) string { return fmt.Sprintf("--port %d", r.port("vllm")) },
		"jobs run on the machine's network here: a free port"},
	{"API=http://127.0.0.1:7070", func(r *readmeRun) string { return "API=http://" + r.node(2).apiAddr },
		"the API of the third node, which maps the owner token to the README's owner key"},
	{"svc-001", func(r *readmeRun) string { return r.svcJob },
		"the inference service of the recipes"},
}

func (r *readmeRun) substitute(text string) string {
	r.t.Helper()
	for _, s := range readmeSubs {
		if strings.Contains(text, s.old) {
			text = strings.ReplaceAll(text, s.old, s.new(r))
		}
	}
	return text
}

// readmeStandIns stand for the programs the examples' jobs run, which
// this machine does not have (REPLICA is testdata/replica). They come
// first on the nodes' $PATH, so a job finds them as it would the real
// ones. nvidia-smi has none: without a driver a job that runs it fails,
// as the README says it then does.
var readmeStandIns = []struct{ name, why, script string }{
	{"torchrun", "PyTorch: prints its arguments and the gang's variables, and succeeds when the payload's train.py is there",
		`echo "torchrun stand-in: $* (NNODES=${NNODES-} NODE_RANK=${NODE_RANK-} local cards=$GPUMESH_LOCAL_CARDS)"
test -f train.py`},
	{"python", "a training or inference script: prints a step a second until stopped, and writes its last step to outputs/step and outputs/model.safetensors",
		`echo "python stand-in: $*"
mkdir -p outputs
i=0; while :; do i=$((i+1)); echo "step $i"; echo $i > outputs/step; echo "weights of step $i" > outputs/model.safetensors; sleep 1; done`},
	{"jupyter", "JupyterLab: an HTTP server on its --port",
		`port=; while [ $# -gt 0 ]; do case $1 in --port) port=$2; shift;; esac; shift; done
exec REPLICA serve "$port"`},
	{"vllm", "vLLM: an HTTP server on its --port that answers every path",
		`port=; while [ $# -gt 0 ]; do case $1 in --port) port=$2; shift;; esac; shift; done
exec REPLICA serve "$port"`},
}

// readmeFiles are the files the examples name, in the working directory.
var readmeFiles = map[string]string{
	"train/train.py": "print('training')\n",
	"train/run.sh":   "mkdir -p outputs && echo weights > outputs/model.safetensors\n",
	"train/eval.sh":  "mkdir -p outputs && echo weights > outputs/model.safetensors && echo 0.93 > outputs/score\n",
}

// readmeNodeFlags are added to each `gpumesh node` line, for the reasons
// given ({p2p} and {api} are free ports).
var readmeNodeFlags = []struct {
	flags []string
	why   string
}{
	{[]string{"--listen", "/ip4/127.0.0.1/tcp/{p2p}", "--api", "127.0.0.1:{api}"}, "another --listen and --api on this machine, as the README's comment says"},
	{[]string{"--mdns=false"}, "not to meet other tests' nodes on this machine"},
	{[]string{"--no-nat"}, "loopback: nothing to traverse"},
	{[]string{"--isolation", "process"}, "the stand-ins live in a temp dir, which the sandbox hides from jobs"},
	{[]string{"--job-network", "host"}, "process-mode nodes give a gang no private network: the gang example (and the two-share job) meet on their network, as host (`--net host`) allows"},
}

// readmeSimCards are the cards of a node line without --sim: the real
// cards of "another machine", simulated (no GPU here).
const readmeSimCards = "h100-sxm-80g:8,rtx4090-24g:2"

// readmeRule checks one kind of README command. before runs before the
// command's placeholders are replaced; run runs the command.
type readmeRule struct {
	match  string // a prefix of the command as the README writes it
	what   string // what is checked, for the log
	before func(r *readmeRun, c readmeCmd)
	run    func(r *readmeRun, c readmeCmd, line string)
}

// readmeRules, the first that matches; the last ones match every
// gpumesh and curl command.
var readmeRules = []readmeRule{
	{match: "gpumesh node --", what: "a node starts; its API answers, its log names the address to join it by, and it sees the nodes before it (an ingress answers HTTP)",
		run: (*readmeRun).startNode},
	{match: "sudo gpumesh doctor", what: "the checks the README lists, by name; exit status 1 exactly when one FAILs",
		run: (*readmeRun).doctor},
	{match: "sudo gpumesh node init", what: "prints `wrote FILE (…); start the node with: gpumesh node` as the README shows; the file has the join address and region",
		run: (*readmeRun).nodeInit},
	{match: "gpumesh key create", what: "writes ~/.config/gpumesh/owner.key (0600) and prints its owner ID",
		run: (*readmeRun).keyCreate},
	{match: "gpumesh key show", what: "prints the owner ID key create printed",
		run: func(r *readmeRun, c readmeCmd, line string) {
			if out, _ := r.mustRun(c, line, 0); strings.TrimSpace(out) != r.ownerID {
				r.t.Fatalf("%s printed %q, want the owner ID %s", c, out, r.ownerID)
			}
		}},
	{match: "gpumesh submit --gpus 1 -- nvidia-smi", what: "prints the job ID; with no driver here the job fails with 127, and `gpumesh job` says why in the README's words",
		run: (*readmeRun).submitNvidiaSMI},
	{match: "gpumesh submit --gpus 8 --model h100-sxm-80g --one-node", what: "--wait exits 0: the job succeeded, on 8 H100s of one node (its torchrun found the payload's train.py)",
		run: func(r *readmeRun, c readmeCmd, line string) {
			rec := r.endedJob(r.submit(c, line))
			if ps := rec.Placements; rec.State != market.JobSucceeded || len(ps) != 1 || len(ps[0].Cards) != 8 || ps[0].Model != "h100-sxm-80g" {
				r.t.Fatalf("%s: the job is %s on %s, want succeeded on one node's 8 h100-sxm-80g", c, rec.State, describe(&rec))
			}
		}},
	{match: "gpumesh submit --gpus 8 --model h100-sxm-80g --per-node 4", what: "--wait exits 0: the job succeeded as 2 shares of 4 H100s on two nodes; share 1's sh -c saw NODE_RANK=1",
		run: (*readmeRun).submitGang},
	{match: "gpumesh bill j1 --verify", what: "the bill's header, its shares and receipts as the README shows them, and VERIFIED",
		run: (*readmeRun).billVerify},
	{match: "gpumesh earnings --api", what: "the supplier's OWED and LEDGER lines, as the README shows them",
		run: (*readmeRun).earnings},
	{match: "gpumesh submit --gpus 1 --model 'rtx4090-*' --replicas", what: "prints the job ID; its replica becomes ready",
		run: func(r *readmeRun, c readmeCmd, line string) {
			r.svcJob = r.submit(c, line)
			r.runningJob(r.svcJob)
		}},
	{match: "gpumesh submit", what: "prints the job ID",
		run: func(r *readmeRun, c readmeCmd, line string) { r.submit(c, line) }},
	{match: "gpumesh jobs", what: "the columns its comment names; every job submitted so far, from this node and from another",
		run: (*readmeRun).jobsList},
	{match: "gpumesh job JOB_ID --explain", what: "the job, and the auction round that placed it",
		run: func(r *readmeRun, c readmeCmd, line string) {
			out, _ := r.mustRun(c, line, 0)
			if !regexp.MustCompile(`(?m)^ID +`+r.lastJob+`$`).MatchString(out) || !regexp.MustCompile(`(?m)^round \d+: `).MatchString(out) {
				r.t.Fatalf("%s: no ID line or no auction round in:\n%s", c, out)
			}
		}},
	{match: "gpumesh logs JOB_ID -f", what: "follows: the job's first line, then a later one while it runs; stops on Ctrl-C",
		run: func(r *readmeRun, c readmeCmd, line string) {
			r.runningJob(r.lastJob)
			p := r.start(c, line, false)
			p.expect(r.t, "the job's first line", func(l string) bool { return strings.Contains(l, "stand-in: infer.py") })
			p.expect(r.t, "a line the job printed later", func(l string) bool { return l == "step 2" })
			p.interrupt(r.t)
		}},
	{match: "gpumesh logs JOB_ID --attempt all", what: "the attempt's header line as the README shows it, then its output",
		run: func(r *readmeRun, c readmeCmd, line string) {
			out, _ := r.mustRun(c, line, 0)
			lines := strings.Split(out, "\n")
			if !regexp.MustCompile(`^==> share 0 · epoch 1 · node 12\*\S{6} · running <==$`).MatchString(lines[0]) || len(lines) < 2 || !strings.Contains(lines[1], "stand-in: infer.py") {
				r.t.Fatalf("%s printed:\n%s", c, out)
			}
		}},
	{match: "gpumesh cp JOB_ID:/outputs ./out", what: "the running job's outputs/ copied to ./out (its step file holds a step)",
		run: func(r *readmeRun, c readmeCmd, line string) {
			r.mustRun(c, line, 0)
			data, err := os.ReadFile(filepath.Join(r.work, "out", "step"))
			if err != nil || strings.TrimSpace(string(data)) == "" {
				r.t.Fatalf("%s: ./out/step: %q, %v", c, data, err)
			}
		}},
	{match: "gpumesh cp j7k2…:/outputs ./out", what: "what the ended job (the payload's eval.sh) left in outputs/, kept by its runner, copied to ./out",
		before: func(r *readmeRun, c readmeCmd) {
			_ = os.RemoveAll(filepath.Join(r.work, "out"))
			r.endedJob(r.lastJob)
		},
		run: func(r *readmeRun, c readmeCmd, line string) {
			r.mustRun(c, line, 0)
			if data, err := os.ReadFile(filepath.Join(r.work, "out", "score")); err != nil || string(data) != "0.93\n" {
				r.t.Fatalf("%s: ./out/score: %q, %v", c, data, err)
			}
		}},
	{match: "gpumesh cancel JOB_ID", what: "prints cancelled; the job's share stops",
		run: func(r *readmeRun, c readmeCmd, line string) {
			if out, _ := r.mustRun(c, line, 0); strings.TrimSpace(out) != "cancelled" {
				r.t.Fatalf("%s printed %q", c, out)
			}
			if rec := r.endedJob(r.lastJob); rec.State != market.JobCancelled {
				r.t.Fatalf("%s: the job is %s", c, rec.State)
			}
		}},
	{match: "gpumesh scale JOB_ID 16", what: "on an elastic job (the test's `--gpus 8 --elastic 8:16`): prints `ID: 16 cards (running)`; the job then holds 16 cards",
		before: func(r *readmeRun, c readmeCmd) {
			r.lastJob = r.testJob("--gpus", "8", "--elastic", "8:16", "--model", "h100-sxm-80g", "--max-price", "25", "--", "sleep", "infinity")
		},
		run: func(r *readmeRun, c readmeCmd, line string) {
			if out, _ := r.mustRun(c, line, 0); strings.TrimSpace(out) != r.lastJob+": 16 cards (running)" {
				r.t.Fatalf("%s printed %q", c, out)
			}
			r.waitJob(r.lastJob, "holding 16 cards", func(rec market.JobRecord) bool { return rec.Cards == 16 && runningCards(rec) == 16 })
			r.cancel(r.lastJob) // it holds every H100 of the first two nodes
		}},
	{match: "gpumesh peers", what: "lists every node",
		run: func(r *readmeRun, c readmeCmd, line string) {
			out, _ := r.mustRun(c, line, 0)
			for _, p := range r.nodes {
				if !strings.Contains(out, "12*"+short(p.peerID)) {
					r.t.Fatalf("%s: no %s in:\n%s", c, short(p.peerID), out)
				}
			}
		}},
	{match: "gpumesh exec jqsx0p85dfrpqxqe6 --share 1", what: "prints the uid, then share 1's work directory …/attempts/ID-s1-e1/work, as the README shows",
		run: (*readmeRun).execShare},
	{match: "gpumesh exec -it", what: "in a terminal: a line typed runs in the job, and the exit status is the shell's",
		run: (*readmeRun).execTerminal},
	{match: "gpumesh port-forward jqsx0p85dfrpqxqe6", what: "prints the Forwarding line the README shows; exits 0 on Ctrl-C",
		run: (*readmeRun).portForwardLine},
	{match: "gpumesh port-forward JOB_ID", what: "a request to the local port is answered by the job; exits 0 on Ctrl-C",
		run: (*readmeRun).portForwardRequest},
	{match: "curl -N http://INGRESS:8080/JOB_ID/", what: "200: the ingress passes the request, path and body to the replica and its answer back",
		run: func(r *readmeRun, c readmeCmd, line string) {
			body := r.curl(c, line, http.StatusOK)
			if !strings.HasPrefix(body, "hello from share 0: POST /v1/chat/completions ") || !strings.Contains(body, `"stream": true`) {
				r.t.Fatalf("%s: answered %q", c, body)
			}
		}},
	{match: "gpumesh offers --model 4090", what: "the columns of the README's table; a line of rtx4090-24g",
		run: (*readmeRun).offers},
	{match: "curl -s -X POST $API/v1/jobs ", what: "201 with the record of train-001",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var rec market.JobRecord
			r.curlJSON(c, line, http.StatusCreated, &rec)
			if rec.ID != "train-001" {
				r.t.Fatalf("%s: the record of %q", c, rec.ID)
			}
		}},
	{match: `curl -sN -H "$AUTH" "$API/v1/jobs/train-001/logs?follow=1"`, what: "follows the job's output: its first line, then a later one, until stopped",
		run: func(r *readmeRun, c readmeCmd, line string) {
			r.runningJob("train-001")
			p := r.start(c, line, false)
			p.expect(r.t, "the job's first line", func(l string) bool { return strings.Contains(l, "stand-in: train.py") })
			p.expect(r.t, "a line the job printed later", func(l string) bool { return l == "step 2" })
			p.stop(r.t)
		}},
	{match: `curl -s -H "$AUTH" -X POST $API/v1/jobs/train-001/scale`, what: "200 with the record of the job, 8 cards; it then holds them",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var rec market.JobRecord
			r.curlJSON(c, line, http.StatusOK, &rec)
			if rec.Cards != 8 {
				r.t.Fatalf("%s: the job is to hold %d cards", c, rec.Cards)
			}
			r.waitJob("train-001", "holding 8 cards", func(rec market.JobRecord) bool { return runningCards(rec) == 8 })
		}},
	{match: `curl -s -H "$AUTH" -X DELETE $API/v1/jobs/train-001`, what: "200 with the record, cancelled; the job's share stops",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var rec market.JobRecord
			r.curlJSON(c, line, http.StatusOK, &rec)
			if rec.State != market.JobCancelled {
				r.t.Fatalf("%s: the job is %s", c, rec.State)
			}
			r.endedJob("train-001")
		}},
	{match: `curl -s -H "$AUTH" $API/v1/jobs/train-001`, what: "200 with the job's record",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var rec market.JobRecord
			r.curlJSON(c, line, http.StatusOK, &rec)
			if rec.ID != "train-001" || rec.State == "" {
				r.t.Fatalf("%s: %+v", c, rec)
			}
		}},
	{match: `curl -s -H "$AUTH" $API/v1/jobs`, what: "200 with train-001 among the jobs, and how many nodes were asked",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var list struct {
				Jobs  []market.JobRecord `json:"jobs"`
				Asked *int               `json:"asked"`
			}
			r.curlJSON(c, line, http.StatusOK, &list)
			if !slices.ContainsFunc(list.Jobs, func(j market.JobRecord) bool { return j.ID == "train-001" }) || list.Asked == nil {
				r.t.Fatalf("%s: %+v", c, list)
			}
		}},
	{match: "curl -s $API/v1/peers", what: "200 with every node, this one first with self",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var list struct {
				Peers []struct {
					ID   string `json:"id"`
					Self bool   `json:"self"`
				} `json:"peers"`
			}
			r.curlJSON(c, line, http.StatusOK, &list)
			if len(list.Peers) != len(r.nodes) || !list.Peers[0].Self || list.Peers[0].ID != r.node(2).peerID {
				r.t.Fatalf("%s: %+v", c, list)
			}
		}},
	{match: "curl -s $API/v1/cards", what: "200 with the node's cards",
		run: func(r *readmeRun, c readmeCmd, line string) {
			var list struct {
				Cards []struct {
					Model string `json:"model"`
				} `json:"cards"`
			}
			r.curlJSON(c, line, http.StatusOK, &list)
			if len(list.Cards) == 0 {
				r.t.Fatalf("%s: no cards", c)
			}
		}},
	{match: `curl -s "$API/v1/offers?model=4090`, what: "200 with offers, every one an RTX 4090, and the busy counts its comment names",
		run: func(r *readmeRun, c readmeCmd, line string) {
			type offer struct {
				Model string `json:"model"`
			}
			var list struct {
				Offers     []offer `json:"offers"`
				BusyOffers *int    `json:"busy_offers"`
				BusyCards  *int    `json:"busy_cards"`
			}
			r.curlJSON(c, line, http.StatusOK, &list)
			if len(list.Offers) == 0 || list.BusyOffers == nil || list.BusyCards == nil ||
				slices.ContainsFunc(list.Offers, func(o offer) bool { return !strings.Contains(o.Model, "4090") }) {
				r.t.Fatalf("%s: %+v", c, list)
			}
		}},
	{match: `curl -sN -H "$AUTH" $API/v1/jobs/svc-001/http/`, what: "200, answered by the service's replica",
		run: func(r *readmeRun, c readmeCmd, line string) {
			if body := r.curl(c, line, http.StatusOK); !strings.HasPrefix(body, "hello from share 0: GET /v1/models") {
				r.t.Fatalf("%s: answered %q", c, body)
			}
		}},
	{match: "curl ", what: "a 2xx answer, without an error",
		run: func(r *readmeRun, c readmeCmd, line string) { r.curlJSON(c, line, 0, nil) }},
	{match: "gpumesh ", what: "exit status 0",
		run: func(r *readmeRun, c readmeCmd, line string) { r.mustRun(c, line, 0) }},
}

func readmeRuleOf(c readmeCmd) readmeRule {
	for _, rule := range readmeRules {
		if strings.HasPrefix(c.Text, rule.match) {
			return rule
		}
	}
	// A command piped into gpumesh or curl
	return readmeRule{what: "exit status 0", run: func(r *readmeRun, c readmeCmd, line string) { r.mustRun(c, line, 0) }}
}

// readmeTablesUnused lists the entries of the tables that no README
// command uses.
func readmeTablesUnused(cmds []readmeCmd) []string {
	var problems []string
	used := func(match string, prefix bool) bool {
		return slices.ContainsFunc(cmds, func(c readmeCmd) bool {
			if prefix {
				return !c.Assign && strings.HasPrefix(c.Text, match)
			}
			return strings.Contains(c.Text, match)
		})
	}
	for _, s := range readmeSkips {
		if !used(s.match, true) {
			problems = append(problems, fmt.Sprintf("readmeSkips: no command starts with %q", s.match))
		}
	}
	for _, s := range readmeSubs {
		if !used(s.old, false) {
			problems = append(problems, fmt.Sprintf("readmeSubs: no command has %q", s.old))
		}
	}
	for _, rule := range readmeRules {
		if !used(rule.match, true) {
			problems = append(problems, fmt.Sprintf("readmeRules: no command starts with %q", rule.match))
		}
	}
	return problems
}
