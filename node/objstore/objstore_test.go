package objstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/objstore"
	"github.com/gpumesh/gpumesh/node/objstore/objstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func loc(t *testing.T, s string) market.S3Location {
	t.Helper()
	l, err := market.ParseS3URL(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func client(t *testing.T, srv *objstoretest.Server, keyID string) *objstore.Client {
	t.Helper()
	c, err := objstore.New(objstore.Credentials{AccessKeyID: keyID, SecretAccessKey: srv.SecretAccessKey, Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// What is under a prefix lands under the directory, folders and all;
// what is beside it does not.
func TestDownloadAndUploadThroughARealS3Server(t *testing.T) {
	srv := objstoretest.Serve(t, "AKIDTEST", "secret")
	srv.CreateBucket(t, "datasets")
	srv.CreateBucket(t, "results")
	big := []byte(strings.Repeat("0123456789abcdef", 1<<16)) // 1 MiB
	srv.Put(t, "datasets", "imagenet/train/a.bin", big)
	srv.Put(t, "datasets", "imagenet/labels.csv", []byte("a,1\n"))
	srv.Put(t, "datasets", "imagenet-other/x", []byte("not under the prefix"))
	c := client(t, srv, "AKIDTEST")
	ctx := context.Background()

	dir := filepath.Join(t.TempDir(), "data")
	st, err := c.Download(ctx, loc(t, "s3://datasets/imagenet"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 2 || st.Bytes != int64(len(big))+4 {
		t.Errorf("downloaded %+v", st)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "train", "a.bin")); err != nil || string(b) != string(big) {
		t.Errorf("train/a.bin: %d bytes, %v", len(b), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("an object beside the prefix was downloaded")
	}

	out := t.TempDir()
	os.MkdirAll(filepath.Join(out, "ckpt"), 0o755)
	os.WriteFile(filepath.Join(out, "ckpt", "w.bin"), big, 0o644)
	os.WriteFile(filepath.Join(out, "metrics.json"), []byte(`{"loss":0.1}`), 0o644)
	os.Symlink("metrics.json", filepath.Join(out, "latest"))
	st, skipped, err := c.Upload(ctx, out, loc(t, "s3://results/run-1"))
	if err != nil || st.Objects != 2 || skipped != 1 {
		t.Fatalf("upload: %+v, %d skipped, %v", st, skipped, err)
	}
	if keys := srv.Keys(t, "results", ""); !slices.Equal(keys, []string{"run-1/ckpt/w.bin", "run-1/metrics.json"}) {
		t.Errorf("keys %q", keys)
	}
	if b, ok := srv.Get(t, "results", "run-1/ckpt/w.bin"); !ok || string(b) != string(big) {
		t.Errorf("run-1/ckpt/w.bin: %d bytes", len(b))
	}
	// One file alone lands at the prefix under its name.
	if st, _, err := c.Upload(ctx, filepath.Join(out, "metrics.json"), loc(t, "s3://results/final")); err != nil || st.Objects != 1 {
		t.Errorf("one file: %+v %v", st, err)
	}
	if _, ok := srv.Get(t, "results", "final/metrics.json"); !ok {
		t.Error("final/metrics.json is not there")
	}
}

// Wrong or missing credentials, a missing bucket and keys that would land
// outside the directory fail, saying what.
func TestRefusals(t *testing.T) {
	srv := objstoretest.Serve(t, "AKIDTEST", "secret")
	srv.CreateBucket(t, "datasets")
	srv.Put(t, "datasets", "evil/../../escape", []byte("x"))
	ctx := context.Background()
	if _, err := objstore.New(objstore.Credentials{Endpoint: srv.URL}, nil); !errors.Is(err, objstore.ErrNoCredentials) {
		t.Errorf("no credentials: %v", err)
	}
	if _, err := objstore.New(objstore.Credentials{AccessKeyID: "a", SecretAccessKey: "b", Endpoint: "ftp://x"}, nil); err == nil || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL") {
		t.Errorf("a bad endpoint: %v", err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		keyID, url, want string
	}{
		{"WRONG", "s3://datasets/x", "listing s3://datasets/x/ at 127.0.0.1"},
		{"WRONG", "s3://datasets/x", "(InvalidAccessKeyId)"},
		{"AKIDTEST", "s3://nobucket/x", "(NoSuchBucket)"},
		{"AKIDTEST", "s3://datasets/evil", `a key with an empty, "." or ".." element`},
	} {
		_, err := client(t, srv, c.keyID).Download(ctx, loc(t, c.url), dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("download of %s as %s: %v; want %q", c.url, c.keyID, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Errorf("%d entries beside the download's directory", len(entries))
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	if _, _, err := client(t, srv, "WRONG").Upload(ctx, dir, loc(t, "s3://datasets/out")); err == nil || !strings.Contains(err.Error(), "writing s3://datasets/out/f") {
		t.Errorf("upload with a wrong key: %v", err)
	}
}
