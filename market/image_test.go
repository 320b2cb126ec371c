package market

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

var testDigest = "sha256:" + strings.Repeat("0f", 32)

func TestImageSpecs(t *testing.T) {
	cuda := ImageRef{Vendor: device.VendorNVIDIA, Ref: "registry.example.com:5000/team/cuda@" + testDigest}
	musa := ImageRef{Vendor: device.VendorMThreads, Ref: "mthreads/musa-torch@" + testDigest}
	every := ImageRef{Ref: "docker.io/library/ubuntu@" + testDigest}
	for _, tc := range []struct {
		name   string
		mod    func(*JobSpec)
		field  string // "" when valid
		reason string
	}{
		{"one image, no command", func(s *JobSpec) { s.Images, s.Command = []ImageRef{every}, nil }, "", ""},
		{"per vendor", func(s *JobSpec) { s.Images = []ImageRef{cuda, musa} }, "", ""},
		{"vendor and default", func(s *JobSpec) { s.Images = []ImageRef{cuda, every} }, "", ""},
		{"no command without image", func(s *JobSpec) { s.Command = nil }, "command", "required"},
		{"a tag", func(s *JobSpec) { s.Images = []ImageRef{{Ref: "ubuntu:22.04"}} }, "images[0].ref", "names no digest"},
		{"short digest", func(s *JobSpec) { s.Images = []ImageRef{{Ref: "ubuntu@sha256:abc"}} }, "images[0].ref", "64 lower-case hex"},
		{"upper-case repo", func(s *JobSpec) { s.Images = []ImageRef{{Ref: "Ubuntu@" + testDigest}} }, "images[0].ref", "not repository@sha256"},
		{"unknown vendor", func(s *JobSpec) { s.Images = []ImageRef{{Vendor: "acme", Ref: every.Ref}} }, "images[0].vendor", "unknown vendor"},
		{"vendor twice", func(s *JobSpec) { s.Images = []ImageRef{cuda, cuda} }, "images[1]", "second image for vendor nvidia"},
		{"default twice", func(s *JobSpec) { s.Images = []ImageRef{every, every} }, "images[1]", "second image for every vendor"},
		{"no image for the vendors", func(s *JobSpec) { s.Images, s.Vendors = []ImageRef{cuda}, []device.Vendor{device.VendorAMD} }, "images", "no image for the allowed vendors amd"},
		{"mixed models", func(s *JobSpec) { s.Images, s.MixedModels = []ImageRef{cuda, musa}, true }, "mixed_models", "one image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mod(&s)
			err := s.Validate(nil)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			se, ok := err.(*SpecError)
			if !ok || se.Field != tc.field || !strings.Contains(se.Msg, tc.reason) {
				t.Fatalf("got %v, want field %s saying %q", err, tc.field, tc.reason)
			}
		})
	}
}

func TestImagesNarrowVendors(t *testing.T) {
	s := validSpec()
	s.Images = []ImageRef{{Vendor: device.VendorNVIDIA, Ref: "a@" + testDigest}, {Vendor: device.VendorMThreads, Ref: "b@" + testDigest}}
	f := FilterOf(&s)
	if got := joinVendors(f.ImageVendors); got != "nvidia, mthreads" {
		t.Errorf("a job with images for nvidia and mthreads may run on %q", got)
	}
	m := newMatcher(f)
	amd := &cardFacts{model: "mi300x-192g", vendor: device.VendorAMD, memMiB: 192 << 10, cu: 4, price: 1}
	if r := m.check(amd); r != ReasonImage || !strings.Contains(m.detail(r, amd), "no image for vendor amd (images for nvidia, mthreads)") {
		t.Errorf("an AMD card: %v, %q", r, m.detail(r, amd))
	}
	if got := declineText(&f, 0, 0, 1, cardMisses{ReasonImage: 2}); !strings.Contains(got, "vendor the job's images serve (nvidia, mthreads)") {
		t.Errorf("a supplier of AMD cards declines with %q", got)
	}
	if ref, ok := s.ImageFor(device.VendorMThreads); !ok || ref != "b@"+testDigest {
		t.Errorf("mthreads share runs %q %v", ref, ok)
	}
	if _, ok := s.ImageFor(device.VendorAMD); ok {
		t.Error("an AMD share has an image")
	}
	s.Images = append(s.Images, ImageRef{Ref: "c@" + testDigest})
	if f := FilterOf(&s); len(f.ImageVendors) != 0 {
		t.Errorf("with an image for every vendor the filter allows %v", f.Vendors)
	}
	if ref, _ := s.ImageFor(device.VendorAMD); ref != "c@"+testDigest {
		t.Errorf("an AMD share runs %q", ref)
	}
}

func TestPolicyJobKinds(t *testing.T) {
	image, host := JobFacts{Image: true, Network: NetworkNone}, JobFacts{Network: NetworkNone}
	for _, tc := range []struct {
		p           Policy
		image, host string // "" admitted, else part of the reason
	}{
		{Policy{}, "", ""},
		{Policy{JobKinds: []JobKind{JobKindHost}}, "host-command jobs only", ""},
		{Policy{JobKinds: []JobKind{JobKindImage}}, "", "images only"},
		{Policy{NoImages: "no OCI runtime (install crun or runc)"}, "cannot run images: no OCI runtime", ""},
	} {
		for _, c := range []struct {
			f    JobFacts
			want string
		}{{image, tc.image}, {host, tc.host}} {
			ok, why := tc.p.Admit(c.f)
			if c.want == "" && !ok || c.want != "" && (ok || !strings.Contains(why, c.want)) {
				t.Errorf("policy %+v, image %v: admit %v %q, want %q", tc.p, c.f.Image, ok, why, c.want)
			}
		}
	}
	if _, err := ParseJobKinds([]string{"image", "vm"}); err == nil || !strings.Contains(err.Error(), `"vm"`) {
		t.Errorf("vm: %v", err)
	}
	if k, err := ParseJobKinds([]string{"image", "host"}); err != nil || len(k) != 2 {
		t.Errorf("image,host: %v %v", k, err)
	}
}
