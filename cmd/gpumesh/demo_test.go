package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/sim"
)

// demoEnv is the environment of a demo under test: GOGC set, so that the
// demo leaves the test process's collector alone; more from extra.
func demoEnv(stdout, stderr io.Writer, extra map[string]string) env {
	vars := map[string]string{"GOGC": "100"}
	for k, v := range extra {
		vars[k] = v
	}
	return env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr, getenv: func(k string) string { return vars[k] }}
}

// tempFile writes content to a new file name in a temporary directory.
func tempFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	writeFile(t, path, content)
	return path
}

// Bad input exits 2 with one line naming what was wrong, and starts
// nothing: no progress on stdout, back at once.
func TestDemoBadInput(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.csv")
	badTrace := tempFile(t, "jobs.csv", "submit_s,gpus,duration_s\n0,1,60\n5,lots,60\n")
	badAv := tempFile(t, "av.csv", "node,up_s,down_s\nhome-1,0,60\nhome-1,30,90\n")
	goodAv := tempFile(t, "good.csv", "node,up_s,down_s\nhome-1,0,60\n")
	maxNodes := strconv.Itoa(sim.MaxDemoNodes)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "0"}, "--nodes 0: want 1 to " + maxNodes},
		{[]string{"--nodes", "-1"}, "--nodes -1: want 1 to " + maxNodes},
		{[]string{"--nodes", "many"}, `invalid argument "many" for "--nodes"`},
		{[]string{"--nodes", "20000"}, "--nodes 20000: want 1 to " + maxNodes},
		{[]string{"--duration", "0s"}, "--duration 0s: want at least 1s"},
		{[]string{"--duration", "-5s"}, "--duration -5s: want at least 1s"},
		{[]string{"--duration", "500ms"}, "--duration 500ms: want at least 1s"},
		{[]string{"--trace", missing}, "--trace: job trace: open " + missing + ": no such file or directory"},
		{[]string{"--trace", dir}, "--trace: " + dir},
		{[]string{"--trace", badTrace}, "--trace: " + badTrace + ":3: column gpus: want a whole number of cards"},
		{[]string{"--trace", "philly-nope"}, `--trace: bad trace: no embedded Philly cluster "nope"`},
		{[]string{"--availability", missing}, "--availability: availability trace: open " + missing},
		{[]string{"--availability", badAv}, "--availability: " + badAv + ":3: column up_s: node home-1 is already up then"},
		{[]string{"--availability", goodAv, "--no-chaos"}, "--availability with --no-chaos"},
		{[]string{"--log-file", filepath.Join(missing, "log")}, "--log-file: open " + filepath.Join(missing, "log")},
		{[]string{"--trace", "philly-ee9e8c", "--trace-speed", "0"}, "--trace-speed 0: want more than 0"},
		{[]string{"--trace-speed", "-3"}, "--trace-speed -3: want more than 0"},
		{[]string{"--trace", "philly-ee9e8c", "--trace-from", "soon"}, `--trace-from "soon": want busiest, start or a time of the trace such as 36h`},
		{[]string{"--trace", "philly-ee9e8c", "--trace-from", "-1h"}, `--trace-from "-1h"`},
		{[]string{"--trace", "philly-ee9e8c", "--trace-from", "100000h"}, "--trace-from 100000h0m0s: the trace's last job arrives at"},
		{[]string{"extra"}, `unknown command "extra" for "gpumesh demo"`},
	} {
		start := time.Now()
		var stdout, stderr bytes.Buffer
		code := runEnv(context.Background(), append([]string{"demo"}, c.args...), demoEnv(&stdout, &stderr, nil))
		if code != exitUsage || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q; want 2 and nothing", c.args, code, stdout.String())
		}
		oneLineErr(t, strings.Join(c.args, " "), stderr.String(), c.want)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%q took %v: it started something", c.args, d)
		}
	}
}

// A demo too big for the memory available is refused with the estimate
// and what is available (where the machine says how much it has).
func TestDemoRefusesWhatDoesNotFit(t *testing.T) {
	_, avail := sim.MemInfo()
	if avail == 0 {
		t.Skip("this machine does not say how much memory is available")
	}
	n := sim.MaxDemoNodes
	if sim.CheckDemoMemory(n) == nil {
		t.Skipf("%d nodes (about %d MiB) fit in the %d MiB available", n, sim.EstimateDemoMiB(n), avail)
	}
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), []string{"demo", "--nodes", strconv.Itoa(n)}, demoEnv(&stdout, &stderr, nil))
	if code != exitUsage || stdout.Len() != 0 {
		t.Errorf("exit %d, stdout %q", code, stdout.String())
	}
	oneLineErr(t, "too big", stderr.String(), fmt.Sprintf("--nodes %d: not enough memory", n),
		fmt.Sprintf("about %d MiB", sim.EstimateDemoMiB(n)), " MiB is available", "ask for fewer nodes (at most about ")
}

// cancelOn is a writer that cancels a context once what was written
// holds a string.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	s      string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.s) {
		w.cancel()
	}
	return len(p), nil
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Ctrl-C while the nodes start: the demo stops them, says how far it got
// and that nothing ran, and exits 0 without an error line.
func TestDemoInterruptedWhileStarting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := &cancelOn{s: "starting the nodes", cancel: cancel}
	var stderr bytes.Buffer
	code := runEnv(ctx, []string{"demo", "--nodes", "20", "--api", ""}, demoEnv(stdout, &stderr, nil))
	out := stdout.String()
	if code != exitOK || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing\n%s", code, stderr.String(), out)
	}
	m := regexp.MustCompile(`stopped while starting: (\d+) of (\d+) nodes up\n`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "interrupted: the summary so far") || !strings.Contains(out, "nothing ran") {
		t.Fatalf("stdout lacks the summary so far:\n%s", out)
	}
	if up, _ := strconv.Atoi(m[1]); m[2] != strconv.Itoa(sim.DemoNodes(20)) || up >= sim.DemoNodes(20) {
		t.Errorf("%s: want fewer than all %d nodes up", m[0], sim.DemoNodes(20))
	}
}

// `gpumesh jobs --api` against a running demo, with the owner token the
// demo prints, lists the demo's jobs; another owner sees none of them.
func TestJobsAgainstRunningDemo(t *testing.T) {
	// Three 2-card jobs (preemptible batch: batch-0001…) in the first
	// second at 60×, each running 10 s.
	trace := tempFile(t, "jobs.csv", "submit_s,gpus,duration_s\n0,2,600\n30,2,600\n60,2,600\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	exited := make(chan struct{})
	code := -1
	go func() {
		defer close(exited)
		code = runEnv(ctx, []string{"demo", "--nodes", "4", "--duration", "60s", "--api", "127.0.0.1:0", "--no-chaos", "--trace", trace},
			demoEnv(&stdout, &stderr, nil))
	}()
	t.Cleanup(func() { cancel(); <-exited })
	link := regexp.MustCompile(`GPUMESH_API_TOKEN=(\S+) gpumesh jobs --api (\S+)`)
	var m []string
	poll(t, time.Minute, "the demo's API line", func() bool {
		m = link.FindStringSubmatch(stdout.String())
		return m != nil
	}, exited, &stdout)
	token, addr := m[1], m[2]

	jobs := func(environ map[string]string) []market.JobRecord {
		t.Helper()
		var out, errOut bytes.Buffer
		code := runEnv(context.Background(), []string{"jobs", "--json", "--api", addr}, demoEnv(&out, &errOut, environ))
		if code != exitOK {
			t.Fatalf("jobs --json --api %s: exit %d: %s", addr, code, errOut.String())
		}
		var recs []market.JobRecord
		if err := json.Unmarshal(out.Bytes(), &recs); err != nil {
			t.Fatalf("jobs --json printed %q: %v", out.String(), err)
		}
		return recs
	}
	owner := map[string]string{envAPIToken: token, "HOME": t.TempDir()}
	want := []string{"batch-0001", "batch-0002", "batch-0003"}
	var ids []string
	poll(t, time.Minute, "the demo's three jobs in `gpumesh jobs`", func() bool {
		ids = ids[:0]
		for _, r := range jobs(owner) {
			ids = append(ids, r.ID)
			if strings.HasPrefix(r.ID, "batch-") && (r.Spec.Cards != 2 || r.Spec.Kind != market.KindPreemptible) {
				t.Fatalf("%s: %d cards, kind %q; the trace asked 2 preemptible", r.ID, r.Spec.Cards, r.Spec.Kind)
			}
		}
		for _, w := range want {
			if !slices.Contains(ids, w) {
				return false
			}
		}
		return true
	}, exited, &stdout)

	if other := jobs(map[string]string{envKey: testKeyFile(t)}); len(other) != 0 {
		t.Errorf("another owner sees %d of the demo's jobs", len(other))
	}

	cancel()
	<-exited
	if code != exitOK {
		t.Errorf("demo: exit %d: %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "interrupted: the summary so far") || !strings.Contains(out, "placement latency") {
		t.Errorf("the demo printed no summary:\n%s", out)
	}
}

// poll waits for cond, failing after timeout or if the demo ended
// (exited) first.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool, exited chan struct{}, stdout *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-exited:
			t.Fatalf("the demo exited before %s:\n%s", what, stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v:\n%s", what, timeout, stdout.String())
		}
		time.Sleep(50 * time.Millisecond) // polling, not synchronizing
	}
}
