package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// An S3 input and output with their credentials as secrets: the node gets
// the values once, the spec their names and digest.
func TestSubmitS3InputOutputAndSecrets(t *testing.T) {
	n := newFakeNode(t)
	n.env["AWS_ACCESS_KEY_ID"] = "AKIDALICE"
	code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5",
		"--input", "s3://datasets/imagenet:/data", "--output", "out:s3://results/run-1",
		"--secret", "AWS_ACCESS_KEY_ID", "--secret", "AWS_SECRET_ACCESS_KEY=s3cret", "--", "python", "train.py")
	if code != 0 || errOut != "gpumesh: 2 secrets (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) given to the node; only the job's runners receive them\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	spec := n.b.Submitted()[0]
	d := spec.Data
	if d == nil || !reflect.DeepEqual(d.Inputs, []market.DataInput{{From: "s3://datasets/imagenet", To: "data"}}) ||
		!reflect.DeepEqual(d.Outputs, []market.DataOutput{{From: "out", To: "s3://results/run-1"}}) || d.Secrets == nil {
		t.Fatalf("spec data %+v", d)
	}
	if got, ok := n.b.Secrets(d.Secrets.Digest); !ok || got["AWS_ACCESS_KEY_ID"] != "AKIDALICE" || got["AWS_SECRET_ACCESS_KEY"] != "s3cret" {
		t.Errorf("the node holds %v", got)
	}
	if !reflect.DeepEqual(d.Secrets.Names, []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) {
		t.Errorf("secret names %q", d.Secrets.Names)
	}
}

// --input DIR:PATH sends a local directory as the payload, restored at
// PATH.
func TestSubmitLocalInput(t *testing.T) {
	n := newFakeNode(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "set.csv"), "1,2\n")
	if code, _, errOut := n.run("submit", "--gpus", "1", "--max-price", "5", "--input", dir+":/data", "--", "true"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	p := n.b.Submitted()[0].Payload
	if p == nil || p.Path != "data" {
		t.Fatalf("payload %+v", p)
	}
	if files, ok := n.b.Payload(p.Manifest); !ok || string(files["set.csv"]) != "1,2\n" {
		t.Errorf("the node holds %v", files)
	}
}

// Bad data flags are usage errors naming the flag; nothing reaches the
// node.
func TestSubmitBadDataFlags(t *testing.T) {
	dir := t.TempDir()
	creds := []string{"--secret", "AWS_ACCESS_KEY_ID=a", "--secret", "AWS_SECRET_ACCESS_KEY=b"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"--input", "s3:///prefix:/data"}, creds...), `--input: "s3:///prefix" has no bucket: want s3://BUCKET/PREFIX`},
		{append([]string{"--input", "s3://Bad_Bucket/x"}, creds...), "not a bucket name"},
		{append([]string{"--input", "s3://b1t/x:../../etc"}, creds...), "leaves the working directory"},
		{append([]string{"--output", "out"}, creds...), `--output "out": want PATH:s3://BUCKET/PREFIX`},
		{append([]string{"--output", "../x:s3://bkt/p"}, creds...), "leaves the working directory"},
		{[]string{"--input", "s3://bkt/p"}, "need its credentials: --secret AWS_ACCESS_KEY_ID --secret AWS_SECRET_ACCESS_KEY"},
		{[]string{"--secret", "NOT_SET_ANYWHERE"}, "--secret NOT_SET_ANYWHERE: $NOT_SET_ANYWHERE is not set here"},
		{[]string{"--secret", "GPUMESH_X=1"}, "set by the executor"},
		{[]string{"--secret", "A-B=1"}, "not a variable name"},
		{[]string{"--input", dir, "--input", dir + ":/b"}, "one local directory per job"},
		{[]string{"--input", dir, "--payload", dir}, "a job takes one local directory"},
	} {
		n := newFakeNode(t)
		args := append(append([]string{"submit", "--gpus", "1", "--max-price", "5"}, c.args...), "--", "true")
		code, out, errOut := n.run(args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit %d, stdout %q", c.args, code, out)
		}
		oneLineErr(t, strings.Join(c.args, " "), errOut, c.want)
		if len(n.b.Submitted()) != 0 {
			t.Errorf("%q: submitted", c.args)
		}
	}
}
