package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runLogCommand parses args for a command with the logging flags, the way
// the root command reports flag errors, and logs one record at each level.
func runLogCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var logs bytes.Buffer
	cmd := &cobra.Command{Use: "x", SilenceErrors: true, SilenceUsage: true}
	lf := addLogFlags(cmd.Flags())
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.RunE = func(*cobra.Command, []string) error {
		log := lf.logger(&logs).With("peer", "12D3KooWA")
		log.Debug("dialing", "addr", "/ip4/10.0.0.1/tcp/4001")
		log.Info("job placed", "job", "j-1", "cards", 8)
		log.Warn("lease renewal late", "job", "j-1")
		log.Error("card lost", "card", "GPU-1")
		return nil
	}
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	return logs.String(), err
}

func TestLogFlagsDefaultTextInfo(t *testing.T) {
	out, err := runLogCommand(t)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Contains(out, "dialing") {
		t.Fatalf("default level logged %d records, want 3 (info and up):\n%s", len(lines), out)
	}
	if !strings.Contains(lines[0], `level=INFO msg="job placed" peer=12D3KooWA job=j-1 cards=8`) {
		t.Errorf("text record = %q", lines[0])
	}
}

func TestLogFlagsJSONDebug(t *testing.T) {
	out, err := runLogCommand(t, "--log-format", "json", "--log-level", "DEBUG")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d records at debug, want 4:\n%s", len(lines), out)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatalf("record is not JSON: %v: %s", err, lines[1])
	}
	if rec["level"] != "INFO" || rec["msg"] != "job placed" || rec["job"] != "j-1" || rec["peer"] != "12D3KooWA" || rec["cards"] != 8.0 {
		t.Errorf("JSON record = %v", rec)
	}
}

func TestLogFlagsErrorLevel(t *testing.T) {
	out, err := runLogCommand(t, "--log-level=error")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "card lost") {
		t.Errorf("error level logged:\n%s", out)
	}
}

func TestLogFlagsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "xml"}, `invalid argument "xml" for "--log-format" flag: want text or json`},
		{[]string{"--log-level", "verbose"}, `invalid argument "verbose" for "--log-level" flag: want debug, info, warn or error`},
		{[]string{"--log-level", ""}, `for "--log-level" flag: want debug`},
	} {
		out, err := runLogCommand(t, tc.args...)
		var usage usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error containing %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: the command ran and logged %q", tc.args, out)
		}
	}
}

func TestLogFlagsHelpShowsDefaults(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	addLogFlags(cmd.Flags())
	usage := cmd.Flags().FlagUsages()
	for _, want := range []string{`--log-format text|json`, `(default text)`, `--log-level level`, `(default info)`} {
		if !strings.Contains(usage, want) {
			t.Errorf("flag usage lacks %q:\n%s", want, usage)
		}
	}
}
