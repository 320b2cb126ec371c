package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// gpumesh doctor on this machine: every check printed with its verdict,
// the exit status says whether one failed, --json says the same, and the
// data dir it was asked about is not made.
func TestDoctorOnThisMachine(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "gpumesh")
	n := &fakeNode{t: t, env: map[string]string{}}
	args := []string{"doctor", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0"}
	code, out, errOut := n.run(args...)
	if errOut != "" {
		t.Errorf("stderr: %q", errOut)
	}
	for _, check := range []string{"privileges", "cgroup v2", "nftables", "iproute2", "OCI runtime", "GPU driver", "cards", "CDI specs", "data dir", "free disk", "listen port", "mesh reachability", "NAT type"} {
		if !strings.Contains(out, "  "+check+"  ") {
			t.Errorf("no %s check in:\n%s", check, out)
		}
	}
	failed := strings.Contains(out, "\nFAIL ") || strings.HasPrefix(out, "FAIL ")
	if (code == exitError) != failed || (code != exitOK && code != exitError) {
		t.Errorf("exit %d with a FAIL printed: %v:\n%s", code, failed, out)
	}
	if !strings.Contains(out, "SKIP  mesh reachability  not checked: give --join") || !strings.Contains(out, "13 checks: ") {
		t.Errorf("output:\n%s", out)
	}
	jcode, jout, _ := n.run(append(args, "--json")...)
	var res struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Check, Status, Found, Fix string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(jout), &res); err != nil {
		t.Fatalf("--json: %v: %s", err, jout)
	}
	if len(res.Checks) != 13 || res.OK != (jcode == exitOK) || jcode != code {
		t.Errorf("--json: exit %d, ok %v, %d checks (text: exit %d)", jcode, res.OK, len(res.Checks), code)
	}
	if got := listing(t, dir); got != "[]" {
		t.Errorf("doctor made %s in %s", got, dir)
	}
}

func TestDoctorRefusesBadFlags(t *testing.T) {
	n := &fakeNode{t: t, env: map[string]string{}}
	bad := filepath.Join(t.TempDir(), "node.toml")
	writeFile(t, bad, "joinn = []\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--join", "/ip4/10.0.0.1/tcp/4747"}, "--join \"/ip4/10.0.0.1/tcp/4747\": want a full multiaddr ending in /p2p/<peer ID>"},
		{[]string{"doctor", "--config", bad}, bad + ":1: key \"joinn\": no such key (did you mean join?)"},
		{[]string{"doctor", "--listen", "nonsense"}, "--listen \"nonsense\""},
	} {
		code, out, errOut := n.run(tc.args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, %q", tc.args, code, out)
		}
		oneLineErr(t, strings.Join(tc.args, " "), errOut, tc.want)
	}
}
