package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// runCmd runs the gpumesh command line in-process and returns its exit
// status, stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), args, env{
		stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		getenv: func(string) string { return "" },
	})
	return code, stdout.String(), stderr.String()
}

func TestCardsSimJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "cards", "--sim", "h100-sxm-80g:2,rtx4090-48g:1", "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var cards []map[string]any
	if err := json.Unmarshal([]byte(out), &cards); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, out)
	}
	if len(cards) != 3 {
		t.Fatalf("%d cards, want 3", len(cards))
	}
	want := []struct {
		model string
		mem   float64
		cu    float64
	}{{"h100-sxm-80g", 81920, 3.17}, {"h100-sxm-80g", 81920, 3.17}, {"rtx4090-48g", 49152, 0.529}}
	ids := map[string]bool{}
	for i, c := range cards {
		for _, k := range []string{"id", "vendor", "model", "name", "memory_mib", "compute_units", "healthy"} {
			if _, ok := c[k]; !ok {
				t.Errorf("card %d has no %q: %v", i, k, c)
			}
		}
		if c["model"] != want[i].model || c["memory_mib"] != want[i].mem || c["compute_units"] != want[i].cu ||
			c["vendor"] != "nvidia" || c["healthy"] != true {
			t.Errorf("card %d = %v", i, c)
		}
		id, _ := c["id"].(string)
		if !strings.HasPrefix(id, "GPU-") || ids[id] {
			t.Errorf("card %d id %q", i, id)
		}
		ids[id] = true
	}
	// Same spec, same seed: same IDs; another seed: other IDs.
	_, again, _ := runCmd(t, "cards", "--sim", "h100-sxm-80g:2,rtx4090-48g:1", "--json")
	_, other, _ := runCmd(t, "cards", "--sim", "h100-sxm-80g:2,rtx4090-48g:1", "--json", "--sim-seed", "node-7")
	if again != out {
		t.Error("the same spec and seed gave different output")
	}
	if other == out {
		t.Error("another seed gave the same IDs")
	}
}

func TestCardsSimTable(t *testing.T) {
	code, out, _ := runCmd(t, "cards", "--sim", "h100-sxm-80g:1,hygon-bw1000-64g")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header and 2 rows, got:\n%s", out)
	}
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "MODEL MEMORY CU HEALTH VENDOR ID" {
		t.Errorf("header = %q", lines[0])
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || f[0] != "h100-sxm-80g" || f[1] != "80" || f[3] != "3.17" || f[4] != "ok" || f[5] != "nvidia" {
		t.Errorf("row 1 = %q", lines[1])
	}
	// The BW1000 has no published compute figure: shown as unknown.
	if f := strings.Fields(lines[2]); len(f) != 7 || f[0] != "hygon-bw1000-64g" || f[1] != "64" || f[3] != "?" || f[5] != "hygon" {
		t.Errorf("row 2 = %q", lines[2])
	}
}

func TestCardsBadSim(t *testing.T) {
	cases := []struct {
		spec string
		want []string
	}{
		{"h100-sxm-80g:x", []string{`"h100-sxm-80g:x"`, "not a whole number"}},
		{"bogus:1", []string{`"bogus:1"`, `unknown model "bogus"`, "closest known: "}},
		{"h100:2", []string{`"h100:2"`, "h100-sxm-80g"}},
		{":3", []string{`":3"`, "missing model key"}},
		{"", []string{"empty spec"}},
		{"h100-sxm-80g:0", []string{`"h100-sxm-80g:0"`, "at least 1"}},
		{"h100-sxm-80g:1025", []string{`"h100-sxm-80g:1025"`, "over 1024"}},
	}
	for _, tc := range cases {
		code, out, errOut := runCmd(t, "cards", "--sim", tc.spec)
		if code != exitUsage {
			t.Errorf("--sim %q: exit %d, want %d", tc.spec, code, exitUsage)
		}
		if out != "" {
			t.Errorf("--sim %q printed on stdout: %q", tc.spec, out)
		}
		if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "gpumesh: --sim: ") {
			t.Errorf("--sim %q: stderr is not one line: %q", tc.spec, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("--sim %q: stderr %q lacks %q", tc.spec, errOut, w)
			}
		}
	}
}

// Without --sim the command asks the real backends. This machine may or may
// not have cards; either way it prints a JSON array, exits 0, and --verbose
// accounts for every backend on stderr.
func TestCardsRealDiscovery(t *testing.T) {
	code, out, errOut := runCmd(t, "cards", "--json", "--verbose")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var cards []map[string]any
	if err := json.Unmarshal([]byte(out), &cards); err != nil || cards == nil {
		t.Fatalf("stdout is not a JSON array: %q", out)
	}
	for _, name := range []string{"nvml", "amd", "hygon", "mthreads", "ascend", "kunlunxin"} {
		if !strings.Contains(errOut, name+": ") && !strings.Contains(errOut, name+" backend failed") {
			t.Errorf("stderr says nothing of %s:\n%s", name, errOut)
		}
	}
	_, quiet, quietErr := runCmd(t, "cards")
	if !strings.HasPrefix(quiet, "MODEL") {
		t.Errorf("table output = %q", quiet)
	}
	if strings.Contains(quietErr, "absent") {
		t.Errorf("absent backends reported without --verbose: %q", quietErr)
	}
}

func TestCardsHelpAndArgs(t *testing.T) {
	code, out, _ := runCmd(t, "cards", "--help")
	if code != 0 || !strings.Contains(out, "--sim") || !strings.Contains(out, "--json") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCmd(t, "cards", "extra"); code != exitUsage || !strings.Contains(errOut, "unknown command") && !strings.Contains(errOut, "accepts 0 arg") {
		t.Errorf("extra arg: exit %d, %q", code, errOut)
	}
	if code, _, _ := runCmd(t, "cards", "--no-such-flag"); code != exitUsage {
		t.Errorf("bad flag: exit %d", code)
	}
}
