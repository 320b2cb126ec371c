package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at link time with -ldflags "-X main.version=v1.2.3"; without
// it the module version from the build info is shown.
var version = ""

// versionInfo is what `gpumesh version` prints: the build as the Go
// toolchain recorded it (runtime/debug.BuildInfo).
type versionInfo struct {
	// Version is the link-time version, else the module version (a
	// pseudo-version such as v0.0.0-20261206044300-1a2b3c4d5e6f+dirty for a
	// build in a checkout), else "(devel)" (go run, go test).
	Version string `json:"version"`
	// Revision, Time and Modified are the VCS revision, its commit time
	// and whether the tree had changes, when the build recorded them.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Go, OS and Arch are the toolchain and the platform built for.
	Go   string `json:"go"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// readVersion reads a build's version: link is the link-time version, info
// the build info (nil when the binary carries none).
func readVersion(link string, info *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: link, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if info == nil {
		if v.Version == "" {
			v.Version = "(devel)"
		}
		return v
	}
	if v.Version == "" {
		v.Version = info.Main.Version
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if info.GoVersion != "" {
		v.Go = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "GOOS":
			v.OS = s.Value
		case "GOARCH":
			v.Arch = s.Value
		}
	}
	return v
}

// String is the line `gpumesh version` prints, such as
// "gpumesh v0.0.0-… (rev 1a2b3c4d5e6f, 2026-12-06T04:43:00Z, modified) go1.26.8 linux/amd64".
func (v versionInfo) String() string {
	var vcs []string
	if v.Revision != "" {
		vcs = append(vcs, "rev "+short(v.Revision))
	}
	if v.Time != "" {
		vcs = append(vcs, v.Time)
	}
	if v.Modified {
		vcs = append(vcs, "modified")
	}
	s := "gpumesh " + v.Version
	if len(vcs) > 0 {
		s += " (" + strings.Join(vcs, ", ") + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, v.Go, v.OS, v.Arch)
}

// short is a revision's first 12 characters, as git and Go's
// pseudo-versions shorten it.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// thisVersion is the version of this binary.
func thisVersion() versionInfo {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return readVersion(version, info)
}

// buildVersion is the version a node reports to its peers and in its
// status: the module or link-time version, else "devel-" and the
// revision, else "devel".
func buildVersion() string {
	v := thisVersion()
	switch {
	case v.Version != "(devel)":
		return v.Version
	case v.Revision != "":
		return "devel-" + short(v.Revision)
	}
	return "devel"
}

func newVersionCommand(e env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the gpumesh version",
		Long: `Print the version of this binary: the module version, the VCS revision, its
commit time and "modified" when the tree had changes (as the Go toolchain
recorded them at build time), the Go version and the platform. --json prints
them as an object.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := thisVersion()
			if asJSON {
				return writeJSON(e.stdout, v)
			}
			_, err := fmt.Fprintln(e.stdout, v)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as a JSON object")
	return cmd
}
