// Command pkg builds the gpumesh .deb and .rpm packages with nfpm:
//
//	go run ./deploy/pkg --out dist                      # builds the binary, then both packages
//	go run ./deploy/pkg --out dist --binary ./gpumesh   # packages a binary built elsewhere
//
// Each package holds /usr/bin/gpumesh, the systemd unit
// (/usr/lib/systemd/system/gpumesh.service, from deploy/gpumesh.service),
// the default configuration /etc/gpumesh/node.toml (deploy/node.toml; a
// conffile: an upgrade keeps the supplier's edits) and the data dir
// /var/lib/gpumesh (0700). The install scripts reload systemd; nothing is
// started until the supplier enables the service.
//
// Run it from the repository root, or give --root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the tool's flags.
type options struct {
	out, binary, root, version, arch string
	formats                          []string
}

// run is the tool: exit status 0 when every package was written, 2 for bad
// flags, 1 for anything else.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pkg", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var formats string
	fs.StringVar(&o.out, "out", "", "directory to write the packages to (made if missing; required)")
	fs.StringVar(&o.binary, "binary", "", "gpumesh binary to package (default: build ./cmd/gpumesh for --arch)")
	fs.StringVar(&o.root, "root", ".", "the repository root, where deploy/ and cmd/ are")
	fs.StringVar(&o.version, "version", "", "package version (default: 0.0.0~git<commit time>.<revision> of the repository's HEAD)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "architecture, as GOARCH (amd64, arm64)")
	fs.StringVar(&formats, "formats", "deb,rpm", "packages to build: deb, rpm or both")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "pkg: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	if o.out == "" {
		return usage("--out DIR is required")
	}
	for _, f := range strings.Split(formats, ",") {
		if f != "deb" && f != "rpm" {
			return usage("--formats %q: want deb, rpm or deb,rpm", formats)
		}
		o.formats = append(o.formats, f)
	}
	paths, err := o.run(ctx, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "pkg: %v\n", err)
		var ue usageErr
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	return 0
}

// usageErr is a problem with what the user gave.
type usageErr struct{ error }

func (o options) run(ctx context.Context, log io.Writer) ([]string, error) {
	deploy := filepath.Join(o.root, "deploy")
	for _, f := range []string{"gpumesh.service", "node.toml", "scripts/postinstall.sh", "scripts/preremove.sh", "scripts/postremove.sh"} {
		if _, err := os.Stat(filepath.Join(deploy, f)); err != nil {
			return nil, usageErr{fmt.Errorf("--root %s: %w (run from the repository root or give --root)", o.root, err)}
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	version := o.version
	if version == "" {
		v, err := gitVersion(ctx, o.root)
		if err != nil {
			return nil, fmt.Errorf("no --version, and none from git: %w", err)
		}
		version = v
	}
	binary := o.binary
	if binary == "" {
		tmp, err := os.MkdirTemp("", "gpumesh-pkg-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		binary = filepath.Join(tmp, "gpumesh")
		if err := build(ctx, o.root, o.arch, binary, log); err != nil {
			return nil, err
		}
	} else if fi, err := os.Stat(binary); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = errors.New("not a regular file")
		}
		return nil, usageErr{fmt.Errorf("--binary %s: %v", binary, err)}
	}
	var written []string
	for _, format := range o.formats {
		p, err := pack(format, info(deploy, binary, version, o.arch), o.out)
		if err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}

// build compiles ./cmd/gpumesh for linux/arch into out. cgo stays as the
// environment has it (on by default with a C compiler: the NVIDIA backend
// needs it); -trimpath keeps the build machine's paths out, and the
// revision is recorded (gpumesh version prints it) where git can tell it.
func build(ctx context.Context, root, arch, out string, log io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=auto", "-o", out, "./cmd/gpumesh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building gpumesh for linux/%s: %w", arch, err)
	}
	return nil
}

// gitVersion is 0.0.0~git<commit time>.<short revision> of HEAD: sorts by
// commit time, below any released 0.0.0 and above nothing real.
func gitVersion(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "log", "-1", "--date=format-local:%Y%m%d%H%M%S", "--format=%cd.%h")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TZ=UTC")
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return "0.0.0~git" + strings.TrimSpace(string(out)), nil
}

// info describes the package: the same contents for deb and rpm.
func info(deploy, binary, version, arch string) *nfpm.Info {
	mtime := time.Unix(0, 0).UTC()
	if fi, err := os.Stat(binary); err == nil {
		mtime = fi.ModTime().UTC()
	}
	return &nfpm.Info{
		Name:          "gpumesh",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       "1",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    "gpumesh developers",
		Vendor:        "gpumesh",
		Description: "peer-to-peer GPU supply mesh node\n" +
			"gpumesh joins GPU suppliers into a mesh with no central server: every node\n" +
			"advertises its cards, takes part in an auction that places jobs, runs the\n" +
			"jobs it wins and moves work elsewhere when a peer disappears.",
		MTime: mtime,
		Overridables: nfpm.Overridables{
			Recommends: []string{"nftables", "iproute2"},
			Suggests:   []string{"crun"},
			Contents: files.Contents{
				{Source: binary, Destination: "/usr/bin/gpumesh", FileInfo: &files.ContentFileInfo{Mode: 0o755}},
				{Source: filepath.Join(deploy, "gpumesh.service"), Destination: "/usr/lib/systemd/system/gpumesh.service", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
				{Source: filepath.Join(deploy, "node.toml"), Destination: "/etc/gpumesh/node.toml", Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
				{Destination: "/var/lib/gpumesh", Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o700}},
			},
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(deploy, "scripts", "postinstall.sh"),
				PreRemove:   filepath.Join(deploy, "scripts", "preremove.sh"),
				PostRemove:  filepath.Join(deploy, "scripts", "postremove.sh"),
			},
		},
	}
}

// pack writes the package of format into dir, named as the format's
// conventions say, and returns its path.
func pack(format string, in *nfpm.Info, dir string) (string, error) {
	p, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info := nfpm.WithDefaults(in)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("%s: %w", format, err)
	}
	info.Target = filepath.Join(dir, p.ConventionalFileName(info))
	f, err := os.Create(info.Target)
	if err != nil {
		return "", err
	}
	if err := p.Package(info, f); err != nil {
		f.Close()
		os.Remove(info.Target)
		return "", fmt.Errorf("%s: %w", format, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return info.Target, nil
}
