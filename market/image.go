package market

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/device"
)

// ImageRef names the OCI image a job's shares run (JobSpec.Images): for
// the shares on cards of Vendor, or for every vendor when Vendor is empty.
//
// Ref names the image by digest, "registry/repository@sha256:<64 hex>",
// never by tag: the owner's signature covers the digest, so every share of
// every attempt runs the same bits (invariant 6). gpumesh submit resolves
// a tag to its digest on the owner's machine before signing.
type ImageRef struct {
	Vendor device.Vendor `json:"vendor,omitempty"`
	Ref    string        `json:"ref"`
}

// MaxImages is the most images a spec may name: one per vendor, and one
// for every other vendor.
const MaxImages = 16

// imageRefPattern is a reference by digest: a repository name as the
// distribution spec writes it (lower-case components separated by '/',
// the first optionally a registry host with a port) and a sha256 digest.
var imageRefPattern = regexp.MustCompile(`^` +
	`(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]{1,5})?/)?` + // registry host[:port]/
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*` + // first path component
	`(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` + // more components
	`@sha256:[0-9a-f]{64}$`)

// ValidateImageRef checks that ref names an image by digest
// (repository@sha256:…), the only form a spec may carry.
func ValidateImageRef(ref string) error {
	if len(ref) > 512 {
		return fmt.Errorf("at most 512 bytes, got %d", len(ref))
	}
	if !strings.Contains(ref, "@") {
		return fmt.Errorf("%q names no digest: a spec names images as repository@sha256:… (gpumesh submit resolves tags before signing)", ref)
	}
	if !imageRefPattern.MatchString(ref) {
		return fmt.Errorf("%q is not repository@sha256:<64 lower-case hex digits>", ref)
	}
	return nil
}

// ImageFor returns the image the shares on cards of vendor v run: the
// entry naming v, else the entry naming no vendor. ok is false when the
// spec names no image for v (a host-command job when it names none).
func (s *JobSpec) ImageFor(v device.Vendor) (ref string, ok bool) {
	return imageFor(s.Images, v)
}

func imageFor(images []ImageRef, v device.Vendor) (string, bool) {
	any := ""
	for _, im := range images {
		switch im.Vendor {
		case v:
			return im.Ref, true
		case "":
			any = im.Ref
		}
	}
	return any, any != ""
}

// ImageFor returns the image of a share on cards of vendor v (see
// JobSpec.ImageFor).
func (e *ExecSpec) ImageFor(v device.Vendor) (string, bool) { return imageFor(e.Images, v) }

// imageVendors returns the vendors a job's images serve, for its filter
// (Filter.ImageVendors): a job whose image list lacks a vendor is not
// placed on it. Nil without images, or with an image for every vendor.
func imageVendors(images []ImageRef) []device.Vendor {
	if len(images) == 0 || slices.ContainsFunc(images, func(im ImageRef) bool { return im.Vendor == "" }) {
		return nil
	}
	out := make([]device.Vendor, 0, len(images))
	for _, im := range images {
		out = append(out, im.Vendor)
	}
	return out
}

func (s *JobSpec) validateImages() error {
	if len(s.Images) > MaxImages {
		return specErr("images", "at most %d images, got %d", MaxImages, len(s.Images))
	}
	seen := map[device.Vendor]bool{}
	for i, im := range s.Images {
		field := fmt.Sprintf("images[%d]", i)
		if im.Vendor != "" && !slices.Contains(device.Vendors(), im.Vendor) {
			return specErr(field+".vendor", "unknown vendor %q (known: %s)", im.Vendor, joinVendors(device.Vendors()))
		}
		if seen[im.Vendor] {
			if im.Vendor == "" {
				return specErr(field, "a second image for every vendor; name one, or one per vendor (nvidia=REF)")
			}
			return specErr(field, "a second image for vendor %s", im.Vendor)
		}
		seen[im.Vendor] = true
		if err := ValidateImageRef(im.Ref); err != nil {
			return specErr(field+".ref", "%v", err)
		}
	}
	if len(s.Images) == 0 {
		return nil
	}
	if iv := imageVendors(s.Images); len(s.Vendors) > 0 && iv != nil && !slices.ContainsFunc(s.Vendors, func(v device.Vendor) bool { return slices.Contains(iv, v) }) {
		return specErr("images", "no image for the allowed vendors %s", joinVendors(s.Vendors))
	}
	if s.MixedModels && len(s.Images) > 1 {
		return specErr("mixed_models", "a share runs one image: per-vendor images need shares of one model")
	}
	return nil
}
