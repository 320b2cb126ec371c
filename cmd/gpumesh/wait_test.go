package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

func intp(v int) *int { return &v }

// submit --wait exits with the job's status once it ends.
func TestSubmitWaitExitCodes(t *testing.T) {
	cases := []struct {
		name     string
		final    market.JobRecord
		code     int
		stderr   []string // empty: nothing on stderr
		notInErr string
	}{
		{"succeeded", market.JobRecord{State: market.JobSucceeded, ExitCode: intp(0)}, 0, nil, ""},
		{"failed with a code", market.JobRecord{State: market.JobFailed, ExitCode: intp(3), Reason: "share 1 exited 3"}, 3,
			[]string{"job w1 failed with exit code 3: share 1 exited 3"}, ""},
		{"failed without a code", market.JobRecord{State: market.JobFailed, Reason: "needs 16 × h100-sxm-80g, mesh has 4"}, 1,
			[]string{"job w1 failed: needs 16 × h100-sxm-80g, mesh has 4"}, "exit code"},
		{"failed by a signal", market.JobRecord{State: market.JobFailed, ExitCode: intp(-1), Reason: "killed\nby SIGKILL"}, 1,
			[]string{"job w1 failed with exit code -1: killed by SIGKILL"}, ""},
		{"failed with a code out of range", market.JobRecord{State: market.JobFailed, ExitCode: intp(256)}, 1,
			[]string{"job w1 failed with exit code 256"}, ""},
		{"cancelled", market.JobRecord{State: market.JobCancelled, Reason: "cancelled by its owner"}, 1,
			[]string{"job w1 was cancelled: cancelled by its owner"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(t)
			tc.final.ID = "w1"
			n.b.Script("w1",
				market.JobRecord{ID: "w1", State: market.JobPending},
				market.JobRecord{ID: "w1", State: market.JobRunning, Epoch: 1},
				tc.final)
			code, out, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--id", "w1", "--wait", "--", "sh", "-c", "exit 3")
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if out != "w1\n" {
				t.Errorf("stdout %q, want the job ID", out)
			}
			if len(tc.stderr) == 0 {
				if errOut != "" {
					t.Errorf("stderr %q, want nothing", errOut)
				}
			} else {
				oneLineErr(t, tc.name, errOut, tc.stderr...)
			}
			if tc.notInErr != "" && strings.Contains(errOut, tc.notInErr) {
				t.Errorf("stderr %q says %q", errOut, tc.notInErr)
			}
			if n.b.Gets("w1") != 3 {
				t.Errorf("%d polls, want 3 (until the end, then none)", n.b.Gets("w1"))
			}
		})
	}
}

func TestSubmitWaitJSONPrintsTheFinalRecord(t *testing.T) {
	n := newFakeNode(t)
	n.b.Script("w2", market.JobRecord{ID: "w2", State: market.JobRunning},
		market.JobRecord{ID: "w2", State: market.JobSucceeded, CostCNY: 1.25, ExitCode: intp(0)})
	code, out, _ := n.run("submit", "--gpus", "1", "--max-price", "5", "--id", "w2", "--wait", "--json", "true")
	var rec market.JobRecord
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.State != market.JobSucceeded || rec.CostCNY != 1.25 {
		t.Errorf("exit %d, stdout %q", code, out)
	}
}

// Interrupted while waiting: say that the job goes on.
func TestSubmitWaitInterrupted(t *testing.T) {
	n := newFakeNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- n.runTo(ctx, &stdout, &stderr, "submit", "--gpus", "1", "--max-price", "5", "--id", "w3", "--wait", "sleep", "1000")
	}()
	// Interrupted once it has said what the job waits for (the poll that
	// reads the job comes before the line that says so).
	waitFor(t, "the job's reason on stderr", func() bool { return strings.Contains(stderr.String(), "is pending") })
	cancel()
	select {
	case code := <-done:
		if code != exitError {
			t.Errorf("exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("submit --wait did not return after the interrupt")
	}
	// What the job waited for, then that it goes on.
	lines := strings.SplitAfter(stderr.String(), "\n")
	if len(lines) != 3 || lines[0] != "gpumesh: job w3 is pending: waiting for a placement round\n" {
		t.Errorf("stderr %q, want the job's reason, then one line", stderr.String())
	} else {
		oneLineErr(t, "interrupted", lines[1], "stopped waiting; job w3 goes on", "gpumesh cancel w3")
	}
}

// While it waits, submit --wait says what the job waits for each time
// that changes, and once it runs, that it runs; the end is said once.
func TestSubmitWaitSaysWhatTheJobWaitsFor(t *testing.T) {
	n := newFakeNode(t)
	declined := "waiting for capacity: 3 of 3 suppliers asked declined: policy: a gang across nodes needs network host here (no private network: the node needs nft (package nftables)); this supplier allows at most egress (3)"
	fewer := "waiting for capacity: 2 of 3 suppliers asked declined: policy: a gang across nodes needs network host here (no private network: the node needs nft (package nftables)); this supplier allows at most egress (2); bids offer 1 nodes with 4 feasible cards, the job needs 2"
	pending := func(why string) market.JobRecord {
		return market.JobRecord{ID: "w4", State: market.JobPending, Reason: why}
	}
	n.b.Script("w4", pending(""), pending(declined), pending(declined), pending(fewer),
		market.JobRecord{ID: "w4", State: market.JobRunning, Epoch: 1},
		market.JobRecord{ID: "w4", State: market.JobSucceeded, Epoch: 1, ExitCode: intp(0), Reason: "every share exited 0"})
	code, out, errOut := n.run("submit", "--gpus", "8", "--per-node", "4", "--max-price", "30", "--id", "w4", "--wait", "--", "torchrun")
	if code != 0 || out != "w4\n" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	want := "gpumesh: job w4 is pending: " + declined + "\n" +
		"gpumesh: job w4 is pending: " + fewer + "\n" +
		"gpumesh: job w4 is running\n"
	if errOut != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut, want)
	}
}
