package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
)

// imageNodeConfig is the config `gpumesh node` would start with the
// given image flags.
func imageNodeConfig(t *testing.T, mod func(*nodeFlags)) (node.Config, error) {
	t.Helper()
	f := nodeFlags{data: t.TempDir(), api: "127.0.0.1:0", network: "gpumesh", coordinator: "auto", isolation: "process",
		policy: policyFlags{maxMemory: "0", network: "egress"}, ckptEvery: node.DefaultCheckpointInterval, ckptKeep: node.DefaultCheckpointKeep, keepOutputs: node.DefaultKeepOutputs, keepLogs: executor.DefaultKeepLogs, keepJobs: node.DefaultKeepJobs,
		ociRuntime: executor.RuntimeAuto, log: &logFlags{format: "text", level: logLevel(slog.LevelInfo)}}
	mod(&f)
	return f.config(env{getenv: func(k string) string {
		if k == "DOCKER_CONFIG" {
			return "/etc/gpumesh/docker"
		}
		return ""
	}, stderr: io.Discard})
}

// The image flags of gpumesh node: the kinds of job it runs, its runtime,
// its mirrors and its cache; bad values are usage errors naming the flag.
func TestNodeImageFlags(t *testing.T) {
	cfg, err := imageNodeConfig(t, func(f *nodeFlags) {
		f.jobKinds = []string{"image"}
		f.mirrors = []string{"docker.io=https://mirror.example.com", "docker.io=http://10.0.0.5:5000", "nvcr.io=https://nv.example.com"}
		f.imageCache = "100GiB"
	})
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Policy.JobKinds; len(k) != 1 || k[0] != market.JobKindImage || cfg.Executor.Runtime != executor.RuntimeAuto {
		t.Errorf("kinds %v runtime %q", k, cfg.Executor.Runtime)
	}
	want := image.Mirrors{"docker.io": {{Host: "mirror.example.com"}, {Host: "10.0.0.5:5000", Insecure: true}}, "nvcr.io": {{Host: "nv.example.com"}}}
	if len(cfg.Images.Mirrors) != 2 || len(cfg.Images.Mirrors["docker.io"]) != 2 || cfg.Images.Mirrors["docker.io"][1] != want["docker.io"][1] {
		t.Errorf("mirrors %+v", cfg.Images.Mirrors)
	}
	if cfg.Images.MaxBytes != 100<<30 || cfg.Images.Keychain == nil {
		t.Errorf("cache %d keychain %v", cfg.Images.MaxBytes, cfg.Images.Keychain)
	}
	cfg, err = imageNodeConfig(t, func(f *nodeFlags) { f.jobKinds = []string{"host"} })
	if err != nil || cfg.Executor.Runtime != "" || len(cfg.Policy.JobKinds) != 1 {
		t.Errorf("host only: runtime %q kinds %v %v", cfg.Executor.Runtime, cfg.Policy.JobKinds, err)
	}
	cfg, err = imageNodeConfig(t, func(f *nodeFlags) { f.ociRuntime = "none" })
	if err != nil || !strings.Contains(cfg.Policy.NoImages, "--oci-runtime none") {
		t.Errorf("no runtime: %q %v", cfg.Policy.NoImages, err)
	}
	for _, c := range []struct {
		mod  func(*nodeFlags)
		want string
	}{
		{func(f *nodeFlags) { f.jobKinds = []string{"image,vm"} }, `--job-kinds: unknown job kind "vm"`},
		{func(f *nodeFlags) { f.mirrors = []string{"docker.io"} }, "--registry-mirror: "},
		{func(f *nodeFlags) { f.mirrors = []string{"docker.io=ftp://x"} }, "not an http:// or https:// URL"},
		{func(f *nodeFlags) { f.imageCache = "lots" }, `--image-cache-max "lots"`},
	} {
		if _, err := imageNodeConfig(t, c.mod); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
