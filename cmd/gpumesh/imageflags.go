package main

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/image"
)

// imageResolver turns an image reference as a person writes it
// ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime") into one by digest
// ("docker.io/pytorch/pytorch@sha256:…"), asking its registry.
type imageResolver func(ref string) (string, error)

// imageFlag is one --image: a reference for the shares on cards of
// Vendor, or for every vendor when Vendor is empty.
type imageFlag struct {
	vendor device.Vendor
	ref    string
}

// parseImageFlags reads --image [VENDOR=]REF entries. A reference holds
// no '=', so the first one splits off the vendor.
func parseImageFlags(entries []string) ([]imageFlag, error) {
	var out []imageFlag
	for _, e := range entries {
		v, ref, hasVendor := strings.Cut(e, "=")
		if !hasVendor {
			v, ref = "", e
		}
		v, ref = strings.ToLower(strings.TrimSpace(v)), strings.TrimSpace(ref)
		if hasVendor && !slices.Contains(device.Vendors(), device.Vendor(v)) {
			return nil, usagef("--image %s: unknown vendor %q (known: %s)", e, v, vendorList())
		}
		if _, err := image.ParseReference(ref); err != nil {
			return nil, usagef("--image %s: %v", e, err)
		}
		out = append(out, imageFlag{device.Vendor(v), ref})
	}
	return out, nil
}

func vendorList() string {
	var names []string
	for _, v := range device.Vendors() {
		names = append(names, string(v))
	}
	return strings.Join(names, ", ")
}

// placeholderImages stands in for the resolved images while the rest of
// the spec is validated (the digest is not known yet; the repository is
// not checked here).
func placeholderImages(images []imageFlag) []market.ImageRef {
	out := make([]market.ImageRef, len(images))
	for i, im := range images {
		out[i] = market.ImageRef{Vendor: im.vendor, Ref: "placeholder@sha256:" + strings.Repeat("0", 64)}
	}
	return out
}

// resolveImages resolves every image to its digest, before the spec is
// signed: the signature then covers the bits every share runs.
func resolveImages(images []imageFlag, resolve imageResolver) ([]market.ImageRef, error) {
	out := make([]market.ImageRef, len(images))
	for i, im := range images {
		if resolve == nil {
			return nil, usagef("--image %s: no way to reach registries here", im.ref)
		}
		ref, err := resolve(im.ref)
		if err != nil {
			return nil, usagef("--image: %v", err)
		}
		if err := market.ValidateImageRef(ref); err != nil {
			return nil, usagef("--image %s: %v", im.ref, err)
		}
		out[i] = market.ImageRef{Vendor: im.vendor, Ref: ref}
	}
	return out, nil
}

// dockerConfigDir is where the standard docker config file lives:
// $DOCKER_CONFIG, else ~/.docker.
func dockerConfigDir(e env) string {
	if d := e.getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home := e.getenv("HOME")
	if home == "" {
		home = e.getenv("USERPROFILE")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".docker")
}
