package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
)

const root = "../.."

// buildPackages runs the tool with a stand-in binary (building gpumesh would take
// a minute; the packaging is the same) and returns the packages by format.
func buildPackages(t *testing.T, extra ...string) (map[string]string, []byte) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "gpumesh")
	content := []byte("#!/bin/sh\necho stand-in gpumesh\n")
	if err := os.WriteFile(bin, content, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "dist")
	var stdout, stderr bytes.Buffer
	args := append([]string{"--out", out, "--binary", bin, "--root", root, "--version", "1.2.3"}, extra...)
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("pkg %q: exit %d: %s", args, code, stderr.String())
	}
	pkgs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		pkgs[strings.TrimPrefix(filepath.Ext(line), ".")] = line
	}
	return pkgs, content
}

func command(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v: %s", name, args, err, out)
	}
	return string(out)
}

// wantFiles are what both packages hold: path → mode as ls -l shows it.
var wantFiles = map[string]string{
	"/usr/bin/gpumesh":                        "-rwxr-xr-x",
	"/usr/lib/systemd/system/gpumesh.service": "-rw-r--r--",
	"/etc/gpumesh/node.toml":                  "-rw-r--r--",
	"/var/lib/gpumesh":                        "drwx------",
}

func TestDebPackage(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not found (Debian: dpkg): the .deb is not checked")
	}
	pkgs, bin := buildPackages(t)
	deb := pkgs["deb"]
	if filepath.Base(deb) != "gpumesh_1.2.3-1_"+debArch()+".deb" {
		t.Errorf("deb named %s", filepath.Base(deb))
	}
	// dpkg-deb -c: "drwxr-xr-x root/root 0 2026-12-06 06:28 ./etc/"
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(command(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		path := strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "."), "/")
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s", path, f[1])
		}
		got[path] = f[0]
	}
	checkFiles(t, "deb", got)
	fields := command(t, "dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Recommends")
	for _, want := range []string{"Package: gpumesh", "Version: 1.2.3-1", "Architecture: " + debArch(), "Recommends: nftables, iproute2"} {
		if !strings.Contains(fields, want) {
			t.Errorf("control lacks %q:\n%s", want, fields)
		}
	}
	ctrl := t.TempDir()
	command(t, "dpkg-deb", "-e", deb, ctrl)
	if b, _ := os.ReadFile(filepath.Join(ctrl, "conffiles")); strings.TrimSpace(string(b)) != "/etc/gpumesh/node.toml" {
		t.Errorf("conffiles: %q, want the configuration alone", b)
	}
	for _, script := range []string{"postinst", "prerm", "postrm"} {
		if b, err := os.ReadFile(filepath.Join(ctrl, script)); err != nil || !bytes.HasPrefix(b, []byte("#!/bin/sh")) {
			t.Errorf("%s: %v", script, err)
		}
	}
	tree := t.TempDir()
	command(t, "dpkg-deb", "-x", deb, tree)
	sameFile(t, filepath.Join(tree, "usr/bin/gpumesh"), bin)
	for dst, src := range map[string]string{"usr/lib/systemd/system/gpumesh.service": "deploy/gpumesh.service", "etc/gpumesh/node.toml": "deploy/node.toml"} {
		want, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		sameFile(t, filepath.Join(tree, dst), want)
	}
}

func TestRPMPackage(t *testing.T) {
	pkgs, _ := buildPackages(t, "--formats", "rpm")
	rpm := pkgs["rpm"]
	if len(pkgs) != 1 || filepath.Base(rpm) != "gpumesh-1.2.3-1."+rpmArch()+".rpm" {
		t.Fatalf("packages %v", pkgs)
	}
	b, err := os.ReadFile(rpm)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0xed, 0xab, 0xee, 0xdb}) || len(b) < 2048 {
		t.Fatalf("%s is no rpm (%d bytes, starts % x)", rpm, len(b), b[:min(4, len(b))])
	}
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Skip("rpm not found (Debian: rpm): the .rpm's header was checked, not its contents")
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(command(t, "rpm", "-qlpv", rpm)), "\n") {
		f := strings.Fields(line)
		if f[2] != "root" || f[3] != "root" {
			t.Errorf("%s owned by %s:%s", f[len(f)-1], f[2], f[3])
		}
		got[f[len(f)-1]] = f[0]
	}
	checkFiles(t, "rpm", got)
	if cfg := strings.TrimSpace(command(t, "rpm", "-qp", "--configfiles", rpm)); cfg != "/etc/gpumesh/node.toml" {
		t.Errorf("config files: %q", cfg)
	}
	if s := command(t, "rpm", "-qp", "--scripts", rpm); !strings.Contains(s, "postinstall scriptlet") || !strings.Contains(s, "preuninstall scriptlet") {
		t.Errorf("scripts:\n%s", s)
	}
	if r := command(t, "rpm", "-qp", "--recommends", rpm); !strings.Contains(r, "nftables") || !strings.Contains(r, "iproute2") {
		t.Errorf("recommends: %q", r)
	}
}

func checkFiles(t *testing.T, format string, got map[string]string) {
	t.Helper()
	for path, mode := range wantFiles {
		if got[path] != mode {
			t.Errorf("%s: %s is %q, want %s", format, path, got[path], mode)
		}
	}
	var extra []string
	for path, mode := range got {
		if _, ok := wantFiles[path]; !ok && !strings.HasPrefix(mode, "d") {
			extra = append(extra, path)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("%s holds files it should not: %v", format, extra)
	}
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s in the package differs from its source (%v)", path, err)
	}
}

func debArch() string {
	if a := map[string]string{"386": "i386", "arm": "armhf"}[goarch()]; a != "" {
		return a
	}
	return goarch()
}

func rpmArch() string {
	if a := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i386"}[goarch()]; a != "" {
		return a
	}
	return goarch()
}

func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--out DIR is required"},
		{[]string{"--out", dir, "--formats", "apk"}, `--formats "apk"`},
		{[]string{"--out", dir, "--binary", filepath.Join(dir, "missing"), "--root", root, "--version", "1"}, "--binary " + filepath.Join(dir, "missing")},
		{[]string{"--out", dir, "--root", dir}, "--root " + dir},
		{[]string{"--out", dir, "extra"}, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused runs wrote %d entries", len(entries))
	}
}

// The unit runs the packaged binary with the packaged configuration, and
// gives the drain that configuration asks for time before it kills.
func TestUnitMatchesThePackage(t *testing.T) {
	unit := readUnit(t, filepath.Join(root, "deploy/gpumesh.service"))
	exec := unit["ExecStart"]
	if exec != "/usr/bin/gpumesh node --config /etc/gpumesh/node.toml" {
		t.Errorf("ExecStart=%s", exec)
	}
	for key, want := range map[string]string{"Restart": "on-failure", "KillMode": "mixed", "Delegate": "yes", "StateDirectory": "gpumesh", "NoNewPrivileges": "yes"} {
		if unit[key] != want {
			t.Errorf("%s=%s, want %s", key, unit[key], want)
		}
	}
	for _, closed := range []string{"PrivateDevices", "ProtectClock", "DeviceAllow", "RestrictNamespaces", "ProtectControlGroups", "MemoryDenyWriteExecute", "SystemCallFilter", "UMask"} {
		if _, ok := unit[closed]; ok {
			t.Errorf("%s would break the job sandbox or the jobs (see the unit's comment)", closed)
		}
	}
	stop, err := time.ParseDuration(strings.ReplaceAll(unit["TimeoutStopSec"], "min", "m"))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%s: %v", unit["TimeoutStopSec"], err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/node.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Data  string `toml:"data"`
		Drain string `toml:"drain-timeout"`
	}
	if err := toml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	drain, err := time.ParseDuration(cfg.Drain)
	if err != nil || drain <= 0 {
		t.Fatalf("drain-timeout %q: %v", cfg.Drain, err)
	}
	if stop < drain+30*time.Second {
		t.Errorf("TimeoutStopSec %v leaves the %v drain no time to leave the mesh", stop, drain)
	}
	if cfg.Data != "/var/lib/gpumesh" || "/var/lib/"+unit["StateDirectory"] != cfg.Data {
		t.Errorf("data %q, StateDirectory %q", cfg.Data, unit["StateDirectory"])
	}
}

// readUnit reads a systemd unit's key=value lines (the last of a key wins).
func readUnit(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	return out
}

// The image's Dockerfile copies what exists, and every package of the
// module that gpumesh is built from.
func TestDockerfileCopiesTheSource(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	copied := map[string]bool{}
	copyLine := regexp.MustCompile(`(?m)^COPY\s+(.*)$`)
	for _, m := range copyLine.FindAllStringSubmatch(string(b), -1) {
		f := strings.Fields(m[1])
		if strings.HasPrefix(f[0], "--from=") {
			continue
		}
		for _, src := range f[:len(f)-1] {
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("COPY %s: %v", src, err)
			}
			copied[strings.TrimPrefix(filepath.Clean(src), "./")] = true
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/gpumesh/gpumesh/cmd/gpumesh").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, "github.com/gpumesh/gpumesh/")
		if !ok {
			continue
		}
		if top, _, _ := strings.Cut(rel, "/"); !copied[top] {
			t.Errorf("the image's build does not copy %s/ (gpumesh needs %s)", top, pkg)
		}
	}
	for _, want := range []string{"go.mod", "go.sum"} {
		if !copied[want] {
			t.Errorf("the Dockerfile does not copy %s", want)
		}
	}
}

func goarch() string { return runtime.GOARCH }
