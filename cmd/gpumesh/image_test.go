package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/image/imagetest"
)

// submit --image resolves each tag to its digest before signing: the
// node gets, and the record shows, repo@sha256:… — for every vendor, or
// one per vendor; the command after -- replaces the image's Cmd and may
// be left out.
func TestSubmitImageResolvesTagsBeforeSigning(t *testing.T) {
	reg := imagetest.New(t)
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	byDigest := reg.Push(t, "team/cuda:12.4", img)
	idx, err := random.Index(512, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	multi := reg.PushIndex(t, "team/musa:latest", idx)

	n := newFakeNode(t)
	code, out, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--json", "--image", reg.Host+"/team/cuda:12.4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rec struct {
		Spec struct {
			Images  []map[string]string `json:"images"`
			Command []string            `json:"command"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rec.Spec.Images) != 1 || rec.Spec.Images[0]["ref"] != byDigest || rec.Spec.Images[0]["vendor"] != "" || len(rec.Spec.Command) != 0 {
		t.Errorf("record's spec: images %v command %q, want %s and the image's own command", rec.Spec.Images, rec.Spec.Command, byDigest)
	}
	if !strings.Contains(byDigest, "@sha256:") {
		t.Fatalf("pushed %s", byDigest)
	}

	// One image per vendor (the second a manifest list: its digest is the
	// list's, each node picks its platform), and a command.
	code, _, errOut = n.run("submit", "--gpus", "2", "--max-price", "5",
		"--image", "nvidia="+reg.Host+"/team/cuda:12.4", "--image", "MThreads="+reg.Host+"/team/musa", "--", "python", "train.py")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got := n.b.Submitted()
	if len(got) != 2 {
		t.Fatalf("%d submits", len(got))
	}
	want := []market.ImageRef{{Vendor: device.VendorNVIDIA, Ref: byDigest}, {Vendor: device.VendorMThreads, Ref: multi}}
	if fmt.Sprint(got[1].Images) != fmt.Sprint(want) || strings.Join(got[1].Command, " ") != "python train.py" {
		t.Errorf("node got images %v command %q, want %v", got[1].Images, got[1].Command, want)
	}
	if got[1].Owner == "" {
		t.Error("the spec is not signed")
	}
}

// A private registry: credentials come from the docker config file
// ($DOCKER_CONFIG/config.json, as docker login writes it); without them
// the registry's 401 is said in words, with exit 2 and nothing submitted.
func TestSubmitImageCredentialsFromDockerConfig(t *testing.T) {
	reg := imagetest.New(t, imagetest.WithBasicAuth("alice", "s3cret"))
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	byDigest := reg.Push(t, "private/app:v1", img)

	n := newFakeNode(t)
	n.env["DOCKER_CONFIG"] = t.TempDir()
	code, out, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--image", reg.Host+"/private/app:v1")
	if code != exitUsage || out != "" {
		t.Errorf("without credentials: exit %d, stdout %q", code, out)
	}
	oneLineErr(t, "without credentials", errOut, "--image: ", "401", "private or the credentials are wrong", "docker login "+reg.Host)

	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	writeFile(t, filepath.Join(n.env["DOCKER_CONFIG"], "config.json"), fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, auth))
	code, _, errOut = n.run("submit", "--gpus", "1", "--max-price", "5", "--image", reg.Host+"/private/app:v1")
	if code != 0 {
		t.Fatalf("with credentials: exit %d: %s", code, errOut)
	}
	if s := n.b.Submitted(); len(s) != 1 || s[0].Images[0].Ref != byDigest {
		t.Errorf("submitted %+v", s)
	}
}

// Bad --image input: a clear error naming the flag, exit 2, nothing
// submitted, and no registry asked when another flag is wrong.
func TestSubmitImageBadInput(t *testing.T) {
	reg := imagetest.New(t)
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "team/app:v1", img)
	broken := imagetest.New(t)
	broken.Push(t, "team/app:v1", img)
	broken.Fail("/v2/", 503)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--image", reg.Host + "/team/app:nope"}, []string{"--image: ", "no such image on " + reg.Host}},
		{[]string{"--image", reg.Host + "/team/app@sha256:" + strings.Repeat("ab", 32)}, []string{"--image: ", "no such image"}},
		{[]string{"--image", reg.Host + "/team/nothing:v1"}, []string{"--image: ", "no such image"}},
		{[]string{"--image", "Bad Ref!"}, []string{"--image Bad Ref!: ", "not an image reference"}},
		{[]string{"--image", "acme=" + reg.Host + "/team/app:v1"}, []string{"--image acme=", `unknown vendor "acme"`}},
		{[]string{"--image", "nvidia=" + reg.Host + "/team/app:v1", "--image", "nvidia=" + reg.Host + "/team/app:v1"}, []string{"--image: ", "second image for vendor nvidia"}},
		{[]string{"--image", broken.Host + "/team/app:v1"}, []string{"--image: ", broken.Host + " answered 503"}},
		{[]string{"--image", "127.0.0.1:1/team/app:v1"}, []string{"--image: ", "cannot reach 127.0.0.1:1"}},
		{[]string{"--vendor", "amd", "--image", "nvidia=" + reg.Host + "/team/app:v1"}, []string{"--image: ", "no image for the allowed vendors amd"}},
	} {
		n := newFakeNode(t)
		before := reg.BlobGets()
		code, out, errOut := n.run(append([]string{"submit", "--gpus", "1", "--max-price", "5"}, tc.args...)...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, stdout %q", tc.args, code, out)
		}
		oneLineErr(t, fmt.Sprint(tc.args), errOut, tc.want...)
		if s := n.b.Submitted(); len(s) != 0 {
			t.Errorf("%q: the node got %d submits", tc.args, len(s))
		}
		if fmt.Sprint(reg.BlobGets()) != fmt.Sprint(before) {
			t.Errorf("%q: resolving downloaded blobs", tc.args)
		}
	}
	if _, err := os.Stat("config.json"); err == nil {
		t.Error("a docker config was written in the working directory")
	}
}
