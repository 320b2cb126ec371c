package image

import (
	"fmt"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// HostPlatform is the platform of the images this node runs: linux and
// the node's architecture (with arm64's variant v8, as registries list it).
func HostPlatform() v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if p.Architecture == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// pickPlatform chooses the image of a manifest list for platform p: the
// first entry of the same OS and architecture whose variant matches (an
// entry without one matches any; a missing platform is linux/amd64, as
// registries mean it). Its error lists what the list offers.
func pickPlatform(idx *v1.IndexManifest, p v1.Platform) (v1.Descriptor, error) {
	var offered []string
	for _, d := range idx.Manifests {
		dp := v1.Platform{OS: "linux", Architecture: "amd64"}
		if d.Platform != nil {
			dp = *d.Platform
		}
		if !d.MediaType.IsImage() && !d.MediaType.IsIndex() {
			continue
		}
		if dp.OS == "unknown" { // attestations
			continue
		}
		offered = append(offered, platformString(dp))
		if dp.OS == p.OS && dp.Architecture == p.Architecture && (dp.Variant == "" || p.Variant == "" || dp.Variant == p.Variant) {
			return d, nil
		}
	}
	if len(offered) == 0 {
		return v1.Descriptor{}, fmt.Errorf("the manifest list holds no image")
	}
	return v1.Descriptor{}, fmt.Errorf("the manifest list has no image for this node's platform %s (it has %s)",
		platformString(p), strings.Join(offered, ", "))
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}
