package fence

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseCommand(t *testing.T) {
	good := []struct {
		line string
		want command
	}{
		{"arm job/0/1 4242 - 2700", command{verb: verbArm, key: "job/0/1", pgid: 4242, within: 2700 * time.Millisecond}},
		{"arm k 2 /sys/fs/cgroup/gpumesh/u100001 0", command{verb: verbArm, key: "k", pgid: 2, cgroup: "/sys/fs/cgroup/gpumesh/u100001"}},
		{"arm k 2147483647 - 86400000", command{verb: verbArm, key: "k", pgid: 2147483647, within: MaxWithin}},
		{"prearm job-s0-e1 2500", command{verb: verbPrearm, key: "job-s0-e1", within: 2500 * time.Millisecond}},
		{"prearm k 0", command{verb: verbPrearm, key: "k"}},
		{"disarm job/0/1", command{verb: verbDisarm, key: "job/0/1"}},
		{"close", command{verb: verbClose}},
	}
	for _, tc := range good {
		got, err := parseCommand([]byte(tc.line))
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.line, got, tc.want)
		}
		if line := string(got.appendLine(nil)); line != tc.line+"\n" {
			t.Errorf("%q: formats back as %q", tc.line, line)
		}
	}

	bad := []struct {
		line, want string // want: in the error
	}{
		{"", "empty line"},
		{"arm  k 5 - 10", "empty field"},
		{" close", "empty field"},
		{"close ", "empty field"},
		{"Close", `unknown command "Close"`},
		{"kill k", `unknown command "kill" (want arm, prearm, disarm or close)`},
		{"prearm k", "prearm: want 2 arguments (KEY MILLIS), got 1"},
		{"prearm k 5 - 10", "prearm: want 2 arguments (KEY MILLIS), got 4"},
		{"prearm k\xff 10", `prearm: key "k\xff"`},
		{"prearm k -1", `prearm k: millis "-1"`},
		{"prearm k 86400001", `prearm k: millis "86400001"`},
		{"close now", "close: want no arguments, got 1"},
		{"disarm", "disarm: want 1 argument (KEY), got 0"},
		{"disarm a b", "got 2"},
		{"arm k 5 - ", "empty field"},
		{"arm k 5 -", "arm: want 4 arguments (KEY PGID CGROUPDIR MILLIS), got 3"},
		{"arm k 5 - 10 x", "got 5"},
		{"arm k\t1 5 - 10", `key "k\t1"`},
		{"arm k\xff 5 - 10", `key "k\xff"`},
		{"arm " + strings.Repeat("k", MaxKeyLen+1) + " 5 - 10", "longer than 256 bytes"},
		{"arm k 0 - 10", `arm k: pgid "0"`},
		{"arm k 1 - 10", `pgid "1"`},
		{"arm k -5 - 10", `pgid "-5"`},
		{"arm k +5 - 10", `pgid "+5"`},
		{"arm k 05 - 10", `pgid "05"`},
		{"arm k 2147483648 - 10", `pgid "2147483648"`},
		{"arm k 99999999999 - 10", `pgid "99999999999"`},
		{"arm k x - 10", `pgid "x"`},
		{"arm k 5 sys/fs/cgroup 10", `cgroup dir "sys/fs/cgroup"`},
		{"arm k 5 / 10", `cgroup dir "/"`},
		{"arm k 5 /sys/../etc 10", "clean absolute path"},
		{"arm k 5 /sys/fs/ 10", "clean absolute path"},
		{"arm k 5 -- 10", `cgroup dir "--"`},
		{"arm k 5 - -1", `arm k: millis "-1"`},
		{"arm k 5 - 1.5", `millis "1.5"`},
		{"arm k 5 - 010", `millis "010"`},
		{"arm k 5 - 86400001", `millis "86400001": want a decimal integer from 0 to 86400000`},
		{"arm k 5 - 9999999999", `millis "9999999999"`},
	}
	for _, tc := range bad {
		_, err := parseCommand([]byte(tc.line))
		if err == nil {
			t.Errorf("%q: parsed", tc.line)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q lacks %q", tc.line, err, tc.want)
		}
		if e := errorEvent(err); e.text != err.Error() {
			t.Errorf("%q: error %q is not printable as it is", tc.line, err)
		}
	}
}

func TestValidateAgreesWithParse(t *testing.T) {
	bad := []command{
		{verb: verbArm, key: "", pgid: 5},
		{verb: verbArm, key: "a b", pgid: 5},
		{verb: verbArm, key: "k", pgid: 1},
		{verb: verbArm, key: "k", pgid: -7},
		{verb: verbArm, key: "k", pgid: 1 << 31},
		{verb: verbArm, key: "k", pgid: 5, cgroup: "-"},
		{verb: verbArm, key: "k", pgid: 5, cgroup: "relative"},
		{verb: verbArm, key: "k", pgid: 5, within: -time.Millisecond},
		{verb: verbArm, key: "k", pgid: 5, within: MaxWithin + time.Millisecond},
		{verb: verbArm, key: "k", pgid: 5, within: time.Microsecond},
		{verb: verbPrearm, key: ""},
		{verb: verbPrearm, key: "k", within: -time.Millisecond},
		{verb: verbPrearm, key: "k", within: time.Microsecond},
		{verb: verbDisarm, key: "a\nb"},
		{verb: 0},
	}
	for _, c := range bad {
		if err := c.validate(); err == nil {
			t.Errorf("%+v: valid", c)
		}
	}
}

func TestParseEvent(t *testing.T) {
	good := []struct {
		line string
		want event
	}{
		{"ready 1", event{kind: eventReady, version: 1}},
		{"fenced job/0/1", event{kind: eventFenced, key: "job/0/1"}},
		{`error arm k: pgid "0": want 2`, event{kind: eventError, text: `arm k: pgid "0": want 2`}},
	}
	for _, tc := range good {
		got, err := parseEvent([]byte(tc.line))
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.line, got, err, tc.want)
			continue
		}
		if line := string(got.appendLine(nil)); line != tc.line+"\n" {
			t.Errorf("%q: formats back as %q", tc.line, line)
		}
	}
	for _, line := range []string{"", "ready", "ready 0", "ready x", "fenced", "fenced a b", "error", "error ", "error \x00", "hello 1"} {
		if e, err := parseEvent([]byte(line)); err == nil {
			t.Errorf("%q: parsed as %+v", line, e)
		}
	}
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", MaxLine) // with its newline one byte over
	fits := strings.Repeat("y", MaxLine-1)
	in := "close\n" + long + "\n" + fits + "\n" + "\n" + "torn"
	r := bufio.NewReaderSize(strings.NewReader(in), MaxLine)
	want := []struct {
		line string
		err  error
	}{
		{"close", nil},
		{"", errLineTooLong},
		{fits, nil},
		{"", nil},
		{"", io.ErrUnexpectedEOF},
	}
	for i, w := range want {
		line, err := readLine(r)
		if !errors.Is(err, w.err) || string(line) != w.line {
			t.Fatalf("line %d: got %.20q, %v; want %.20q, %v", i, line, err, w.line, w.err)
		}
	}
	if _, err := readLine(bufio.NewReaderSize(strings.NewReader(""), MaxLine)); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

// FuzzParseCommand checks that no line makes the decoder panic, that what
// it accepts formats back to the same line and validates, and that its
// errors can go back to the node as they are.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		"arm job/0/1 4242 - 2700", "arm k 2 /sys/fs/cgroup/a/u1 0", "prearm k 2500", "prearm k 05", "disarm k", "close",
		"", " ", "arm", "arm k 1 - 1", "arm k 05 - 1", "arm k 5 /a/../b 1", "disarm \xff", "close\r",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := parseCommand(line)
		if err != nil {
			e := errorEvent(err)
			if e.text != err.Error() {
				t.Fatalf("error %q is not one printable line", err)
			}
			b := e.appendLine(nil)
			if _, perr := parseEvent(b[:len(b)-1]); perr != nil {
				t.Fatalf("error event for %q does not parse: %v", line, perr)
			}
			return
		}
		if err := c.validate(); err != nil {
			t.Fatalf("%q parsed as %+v, which does not validate: %v", line, c, err)
		}
		out := c.appendLine(nil)
		if string(out) != string(line)+"\n" {
			t.Fatalf("%q formats back as %q", line, out)
		}
		if len(out) > MaxLine {
			t.Fatalf("%q: %d bytes, over MaxLine", line, len(out))
		}
	})
}

// FuzzParseEvent checks the client's decoder the same way.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{"ready 1", "fenced job/0/1", "error arm k: bad", "", "ready", "fenced", "error", "ready 01"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := parseEvent(line)
		if err != nil {
			return
		}
		if out := e.appendLine(nil); string(out) != string(line)+"\n" {
			t.Fatalf("%q formats back as %q", line, out)
		}
	})
}
