package main

import (
	"strings"
	"testing"
)

func TestParseForward(t *testing.T) {
	for in, want := range map[string]forwardSpec{
		"8888:8888":           {"127.0.0.1:8888", 8888},
		"0:22":                {"127.0.0.1:0", 22},
		"0.0.0.0:8000:80":     {"0.0.0.0:8000", 80},
		"localhost:6006:6006": {"localhost:6006", 6006},
		"[::1]:9000:9000":     {"[::1]:9000", 9000},
	} {
		got, err := parseForward(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, says := range map[string]string{
		"8888":           "want [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT",
		"8888:0":         "remote port \"0\": want 1 to 65535",
		"8888:70000":     "remote port",
		"-1:80":          "local port",
		"70000:80":       "local port",
		"x:80":           "local port",
		"a.b.c:80:80":    "local address",
		"1:2:3:4":        "want [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT",
		":80:80":         "local address",
		"127.0.0.1:x:80": "local port",
	} {
		if _, err := parseForward(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v; want an error saying %q", in, err, says)
		}
	}
}

func TestTunnelCommandsRefuseBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"exec"}, "needs the job's ID and the command"},
		{[]string{"exec", "j1"}, "no command"},
		{[]string{"exec", "j1", "j2", "--", "ls"}, "one job ID before --"},
		{[]string{"exec", "j1", "--share", "-2", "--", "ls"}, "--share"},
		{[]string{"exec", "bad id!", "--", "ls"}, "bad id!"},
		{[]string{"port-forward", "j1"}, "at least one LOCAL_PORT:REMOTE_PORT"},
		{[]string{"port-forward", "j1", "8080:99999"}, "8080:99999"},
		{[]string{"port-forward", "j1", "--share", "-1", "80:80"}, "--share"},
		{[]string{"submit", "--gpus", "1", "--port", "8000", "--", "x"}, "only a service has a port"},
		{[]string{"submit", "--gpus", "1", "--service", "--public", "--", "x"}, "need --port"},
		{[]string{"submit", "--gpus", "1", "--service", "--port", "70000", "--", "x"}, "--port: must be between 1 and 65535"},
		{[]string{"submit", "--gpus", "1", "--service", "--port", "80", "--ready-path", "healthz", "--", "x"}, "--ready-path"},
		{[]string{"node", "--ingress", "8080"}, "--ingress"},
	} {
		code, out, errOut := runCmd(t, c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, c.says) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("gpumesh %s: exit %d, stdout %q, stderr %q; want 2 and one line saying %q", strings.Join(c.args, " "), code, out, errOut, c.says)
		}
	}
}
