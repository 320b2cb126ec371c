package main

import (
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
)

// images sets what the node's image flags say: the kinds of job it runs,
// its OCI runtime, its registry mirrors and credentials, its image cache.
func (f nodeFlags) images(cfg *node.Config, e env) error {
	runsImages := true
	if len(f.jobKinds) > 0 {
		var list []string
		for _, v := range f.jobKinds {
			for _, k := range strings.Split(v, ",") {
				list = append(list, strings.TrimSpace(k))
			}
		}
		kinds, err := market.ParseJobKinds(list)
		if err != nil {
			return usagef("--job-kinds: %v", err)
		}
		cfg.Policy.JobKinds = kinds
		runsImages = slices.Contains(kinds, market.JobKindImage)
	}
	switch {
	case f.ociRuntime == "none":
		cfg.Policy.NoImages = "this supplier runs no OCI runtime (gpumesh node --oci-runtime none)"
	case !runsImages:
		// No runtime is probed for jobs this node does not run.
	case f.ociRuntime == "":
		cfg.Executor.Runtime = executor.RuntimeAuto
	default:
		cfg.Executor.Runtime = f.ociRuntime
	}
	cfg.Images.Mirrors = image.Mirrors{}
	for _, m := range f.mirrors {
		reg, mirror, err := image.ParseMirror(m)
		if err != nil {
			return usagef("--registry-mirror: %v", err)
		}
		cfg.Images.Mirrors.Add(reg, mirror)
	}
	if f.imageCache != "" {
		n, err := parseBytes(f.imageCache)
		if err != nil || n <= 0 {
			return usagef("--image-cache-max %q: want a size such as 100GiB", f.imageCache)
		}
		cfg.Images.MaxBytes = n
	}
	cfg.Images.Keychain = image.DockerConfig(dockerConfigDir(e))
	return nil
}
