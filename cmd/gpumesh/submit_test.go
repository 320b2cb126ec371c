package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/api/client/clienttest"
	"github.com/gpumesh/gpumesh/node/ownerkey"
)

var jobIDPattern = regexp.MustCompile(`^j[0-9a-z]{16}$`)

func TestSubmitPrintsTheJobID(t *testing.T) {
	n := newFakeNode(t)
	code, out, errOut := n.run("submit", "--gpus", "2", "--model", "h100-sxm-80g,h200-141g", "--max-price", "30",
		"--name", "train", "--env", "A=1", "--duration", "90m", "--", "python", "train.py", "--lr", "3e-4")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	id := strings.TrimSpace(out)
	if !jobIDPattern.MatchString(id) || out != id+"\n" {
		t.Fatalf("stdout %q is not one job ID", out)
	}
	got := n.b.Submitted()
	if len(got) != 1 {
		t.Fatalf("%d submits", len(got))
	}
	key, err := ownerkey.Load(n.env[envKey])
	if err != nil {
		t.Fatal(err)
	}
	want := market.JobSpec{ID: id, Owner: string(key.ID()), Name: "train", Cards: 2, Models: []string{"h100-sxm-80g", "h200-141g"}, MaxPriceCNY: 30,
		ExpectedDuration: market.Duration(90 * 60e9), Env: map[string]string{"A": "1"},
		Command: []string{"python", "train.py", "--lr", "3e-4"}}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("node got  %+v\nwant %+v", got[0], want)
	}
	// Another submit is another job.
	_, out2, _ := n.run("submit", "--gpus", "1", "--max-price", "5", "true")
	if strings.TrimSpace(out2) == id || !jobIDPattern.MatchString(strings.TrimSpace(out2)) {
		t.Errorf("second job ID %q", out2)
	}
	// Without "--", the command starts at the first argument that is not a
	// flag, and its own flags stay its own.
	if got := n.b.Submitted()[1].Command; !reflect.DeepEqual(got, []string{"true"}) {
		t.Errorf("command %q", got)
	}
	n.run("submit", "--gpus", "1", "--max-price", "5", "python", "--gpus", "7")
	if got := n.b.Submitted()[2]; got.Cards != 1 || !reflect.DeepEqual(got.Command, []string{"python", "--gpus", "7"}) {
		t.Errorf("cards %d, command %q", got.Cards, got.Command)
	}
}

func TestSubmitJSON(t *testing.T) {
	n := newFakeNode(t)
	code, out, _ := n.run("submit", "--gpus", "8", "--per-node", "4", "--max-price", "25", "--id", "gang-1", "--json", "--", "torchrun", "train.py")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "state", "epoch", "placements", "cost_cny", "spec", "coordinator"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("record has no %q", k)
		}
	}
	spec, _ := rec["spec"].(map[string]any)
	layout, _ := spec["layout"].(map[string]any)
	if rec["id"] != "gang-1" || rec["state"] != "pending" || layout["mode"] != "per_node" || layout["per_node"] != 4.0 {
		t.Errorf("record %v", rec)
	}
}

// --id makes a retried submit the same job.
func TestSubmitWithIDIsIdempotent(t *testing.T) {
	n := newFakeNode(t)
	args := []string{"submit", "--gpus", "1", "--max-price", "5", "--id", "nightly-42", "--", "make", "test"}
	for i := 0; i < 2; i++ {
		code, out, errOut := n.run(args...)
		if code != 0 || out != "nightly-42\n" {
			t.Fatalf("try %d: exit %d, %q, %q", i, code, out, errOut)
		}
	}
	if jobs, _ := n.b.Jobs(t.Context()); len(jobs) != 1 {
		t.Errorf("%d jobs after a retried submit", len(jobs))
	}
}

func TestSubmitDefaultPriceIsSaid(t *testing.T) {
	n := newFakeNode(t)
	code, _, errOut := n.run("submit", "--gpus", "1", "--model", "h100-sxm-80g", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	oneLineErr(t, "default price", errOut, "22.50 CNY per card-hour", "--max-price")
	if p := n.b.Submitted()[0].MaxPriceCNY; p != 22.5 {
		t.Errorf("max price %v", p)
	}
}

// Bad flags: exit 2, one line naming the flag, nothing sent to the node.
func TestSubmitBadInputChangesNothing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ok.txt"), "x")
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--", "true"}, []string{"--gpus: required"}},
		{[]string{"--gpus", "x", "true"}, []string{`"x"`, "--gpus"}},
		{[]string{"--gpus", "1"}, []string{"no command"}},
		{[]string{"--gpus", "1", "--model", "h100", "true"}, []string{"--model: ", `unknown model "h100"`}},
		{[]string{"--gpus", "1", "--min-mem", "24", "true"}, []string{"--min-mem: ", "no unit"}},
		{[]string{"--gpus", "1", "--max-price", "-1", "true"}, []string{"--max-price: "}},
		{[]string{"--gpus", "1", "--max-price", "lots", "true"}, []string{"--max-price"}},
		{[]string{"--gpus", "1", "--duration", "2 days", "true"}, []string{"--duration"}},
		{[]string{"--gpus", "1", "--no-such-flag", "true"}, []string{"unknown flag: --no-such-flag"}},
		{[]string{"--gpus", "1", "--id", "UPPER", "true"}, []string{"--id: "}},
		{[]string{"--gpus", "1", "--payload", dir, "true"}, []string{"--payload: ", "escape points outside"}},
		{[]string{"--gpus", "1", "--payload", filepath.Join(dir, "missing"), "true"}, []string{"--payload: ", "missing"}},
		{[]string{"--gpus", "1", "--api", "nowhere", "true"}, []string{"--api: ", `"nowhere"`, "host:port"}},
	}
	for _, tc := range cases {
		n := newFakeNode(t)
		args := append([]string{"submit"}, tc.args...)
		code, out, errOut := n.run(args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, stdout %q", tc.args, code, out)
		}
		oneLineErr(t, fmt.Sprint(tc.args), errOut, tc.want...)
		if s := n.b.Submitted(); len(s) != 0 {
			t.Errorf("%q: the node got %d submits", tc.args, len(s))
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSubmitPayload(t *testing.T) {
	n := newFakeNode(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "train.py"), "print('hi')\n")
	writeFile(t, filepath.Join(dir, "data", "x.csv"), "1,2\n")
	code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--payload", dir, "--", "python", "train.py")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "gpumesh: payload " + dir + ": 2 files, 16 bytes; sent 16 bytes (2 chunks)\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	spec := n.b.Submitted()[0]
	p, err := client.ScanPayload(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Payload == nil || spec.Payload.Manifest != p.Manifest().String() || spec.Payload.Size != 16 || spec.Payload.Holder != clienttest.Coordinator {
		t.Fatalf("spec payload %+v", spec.Payload)
	}
	if got, ok := n.b.Payload(spec.Payload.Manifest); !ok || string(got["train.py"]) != "print('hi')\n" || string(got["data/x.csv"]) != "1,2\n" {
		t.Error("the node does not hold the directory")
	}
	// The same directory again sends nothing.
	code, _, errOut = n.run("submit", "--gpus", "1", "--max-price", "5", "--payload", dir, "--", "python", "train.py")
	if want := "gpumesh: payload " + dir + ": 2 files, 16 bytes; sent 0 bytes (the node held all of it)\n"; code != 0 || errOut != want {
		t.Errorf("second submit: exit %d, stderr %q, want %q", code, errOut, want)
	}
}

// The node refuses a field the CLI let through: exit 2 naming the flag.
func TestSubmitRefusedFieldIsUsage(t *testing.T) {
	n := newFakeNode(t)
	n.b.FailNextSubmit(&api.HTTPError{Status: http.StatusBadRequest, Field: "models[0]",
		Err: &market.SpecError{Field: "models[0]", Msg: "no node of this mesh has ever seen h200-141g"}})
	code, out, errOut := n.run("submit", "--gpus", "1", "--model", "h200-141g", "--max-price", "40", "true")
	if code != exitUsage || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	oneLineErr(t, "refused field", errOut, "gpumesh: --model: models[0]: no node of this mesh has ever seen h200-141g")
}

func TestSubmitNodeDown(t *testing.T) {
	n := newFakeNode(t)
	addr := closedAddr(t)
	n.env[envAPI] = addr
	code, out, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "true")
	if code != exitError || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	oneLineErr(t, "node down", errOut, "cannot reach the gpumesh API at "+addr, "connection refused", "`gpumesh node` running there", "GPUMESH_API")
}

// A 5xx may hide a job that was taken: the message says how to retry safely.
func TestSubmitServerErrorSaysHowToRetry(t *testing.T) {
	n := newFakeNode(t)
	n.b.FailNextSubmit(fmt.Errorf("coordinator did not answer in time"))
	code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--id", "retry-me", "true")
	if code != exitError {
		t.Fatalf("exit %d", code)
	}
	oneLineErr(t, "5xx", errOut, "coordinator did not answer in time", "gpumesh job retry-me", "--id retry-me")
}

func TestSubmitHelp(t *testing.T) {
	code, out, _ := newFakeNode(t).run("submit", "--help")
	for _, w := range []string{"--gpus", "--model", "--min-mem", "--per-node", "--one-node", "--mixed-models", "--max-price", "--preemptible", "--service",
		"--replicas", "--elastic", "--duration", "--env", "--payload", "--id", "--wait", "--json", "--api", "--api-token-file",
		"--memory", "--pids", "--cpu-weight", "--max-job-memory",
		"highest price suppliers ask by default", "exit code"} {
		if !strings.Contains(out, w) {
			t.Errorf("help lacks %q", w)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
}

// A node that answers 503 (or 429) gets the same submission again: the
// user is told on stderr, the job is submitted once, with the ID printed.
func TestSubmitRetriesAnUnavailableNodeWithTheSameID(t *testing.T) {
	n := newFakeNode(t)
	n.b.FailNextSubmit(api.Errorf(http.StatusServiceUnavailable, "job retry-me: 1 of its 2 replicas did not confirm the submission"))
	code, out, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--id", "retry-me", "true")
	if code != 0 || strings.TrimSpace(out) != "retry-me" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, w := range []string{"gpumesh: job retry-me: the node answered 503", "did not confirm", "submitting it again with the same ID", "try 2"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr %q does not say %q", errOut, w)
		}
	}
	if got := n.b.Submitted(); len(got) != 2 || got[0].ID != "retry-me" || !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("the node got %d submissions, want the same spec twice: %+v", len(got), got)
	}
	// --retry-for 0: the 503 is the answer, with how to retry safely.
	n.b.FailNextSubmit(api.Errorf(http.StatusServiceUnavailable, "no coordinator reachable"))
	code, _, errOut = n.run("submit", "--gpus", "1", "--max-price", "5", "--id", "once", "--retry-for", "0", "true")
	if code != exitError {
		t.Fatalf("exit %d", code)
	}
	oneLineErr(t, "503, no retry", errOut, "no coordinator reachable", "--id once")
	code, _, errOut = n.run("submit", "--gpus", "1", "--max-price", "5", "--retry-for", "-1s", "true")
	if code != exitUsage || !strings.Contains(errOut, "--retry-for") {
		t.Errorf("--retry-for -1s: exit %d, %q", code, errOut)
	}
}

// A payload the node refuses is not submitted: over the owner's quota the
// node's 413 names the quota (exit 2, naming --payload), and an upload
// without the owner's key gets the 403's message (exit 1).
func TestSubmitPayloadRefused(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "train.py"), "print('hi')\n")
	for _, c := range []struct {
		err  error
		code int
		want string
	}{
		{&api.HTTPError{Status: http.StatusRequestEntityTooLarge, Field: "payload",
			Err: fmt.Errorf("payload of 12 bytes: over the owner's quota on this node: owner o1abc keeps 4.0 MiB of payloads here, and may keep 4 MiB (gpumesh node --owner-quota)")},
			exitUsage, "gpumesh: --payload: payload of 12 bytes: over the owner's quota on this node: owner o1abc keeps 4.0 MiB of payloads here, and may keep 4 MiB (gpumesh node --owner-quota)\n"},
		{&api.HTTPError{Status: http.StatusForbidden, Err: fmt.Errorf("a payload upload needs the owner's key")},
			1, "gpumesh: a payload upload needs the owner's key (`gpumesh key show` prints the owner you act as)\n"},
	} {
		n := newFakeNode(t)
		n.b.FailNextPayload(c.err)
		code, out, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--payload", dir, "--", "python", "train.py")
		if code != c.code || out != "" || errOut != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, %q", c.err, code, out, errOut, c.code, c.want)
		}
		if s := n.b.Submitted(); len(s) != 0 {
			t.Errorf("%v: the node got %d submits", c.err, len(s))
		}
	}
}
