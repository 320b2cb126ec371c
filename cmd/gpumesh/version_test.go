package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	const rev = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	build := func(version string, settings ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/gpumesh/gpumesh", Version: version}}
		for i := 0; i < len(settings); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return info
	}
	platform := []string{"GOOS", "linux", "GOARCH", "amd64"}
	vcs := func(modified string) []string {
		return append([]string{"vcs", "git", "vcs.revision", rev, "vcs.time", "2026-12-06T04:43:00Z", "vcs.modified", modified}, platform...)
	}
	for _, tc := range []struct {
		name string
		link string
		info *debug.BuildInfo
		want string
	}{
		{"a build of a dirty checkout", "", build("v0.0.0-20261206044300-1a2b3c4d5e6f+dirty", vcs("true")...),
			"gpumesh v0.0.0-20261206044300-1a2b3c4d5e6f+dirty (rev 1a2b3c4d5e6f, 2026-12-06T04:43:00Z, modified) go1.26.8 linux/amd64"},
		{"a clean checkout", "", build("v0.0.0-20261206044300-1a2b3c4d5e6f", vcs("false")...),
			"gpumesh v0.0.0-20261206044300-1a2b3c4d5e6f (rev 1a2b3c4d5e6f, 2026-12-06T04:43:00Z) go1.26.8 linux/amd64"},
		{"a tagged module, no VCS", "", build("v1.2.3", "GOOS", "darwin", "GOARCH", "arm64"),
			"gpumesh v1.2.3 go1.26.8 darwin/arm64"},
		{"go run", "", build("(devel)", vcs("true")...),
			"gpumesh (devel) (rev 1a2b3c4d5e6f, 2026-12-06T04:43:00Z, modified) go1.26.8 linux/amd64"},
		{"a link-time version", "v2.0.0", build("(devel)", vcs("false")...),
			"gpumesh v2.0.0 (rev 1a2b3c4d5e6f, 2026-12-06T04:43:00Z) go1.26.8 linux/amd64"},
		{"no build info", "", nil,
			"gpumesh (devel) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
	} {
		if got := readVersion(tc.link, tc.info).String(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	v := readVersion("", build("v0.0.0-20261206044300-1a2b3c4d5e6f+dirty", vcs("true")...))
	b, _ := json.Marshal(v)
	if want := `{"version":"v0.0.0-20261206044300-1a2b3c4d5e6f+dirty","revision":"` + rev + `","time":"2026-12-06T04:43:00Z","modified":true,"go":"go1.26.8","os":"linux","arch":"amd64"}`; string(b) != want {
		t.Errorf("JSON:\n got %s\nwant %s", b, want)
	}
}

// The command prints this binary's line, and the same as JSON.
func TestVersionCommand(t *testing.T) {
	n := &fakeNode{t: t, env: map[string]string{}}
	code, out, errOut := n.run("version")
	if code != 0 || errOut != "" || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "gpumesh ") ||
		!strings.HasSuffix(out, " "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n") {
		t.Errorf("gpumesh version: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = n.run("version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version == "" || v.OS != runtime.GOOS || v.Go != runtime.Version() {
		t.Errorf("gpumesh version --json: exit %d, %q, %v", code, out, err)
	}
	if code, _, _ := n.run("version", "extra"); code != exitUsage {
		t.Errorf("gpumesh version extra: exit %d", code)
	}
}
