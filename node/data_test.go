package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/objstore/objstoretest"
)

// An owner's job reads its dataset from a real S3 server and writes its
// results back, with credentials only its runner receives: the record
// names the secrets, never their values; the runner stages the inputs
// before the command starts and sends the outputs after it ends; an output
// that is not there is the attempt's reason; a node that runs nothing of
// the job is refused the secrets.
func TestS3InputsAndOutputs(t *testing.T) {
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(nil), "", "a100-80g:1", "", "")
	coord, runner, entry, stranger := sm.nodes[0], sm.nodes[1], sm.nodes[2], sm.nodes[3]
	sm.neverCoordinate(runner, entry, stranger)
	sm.waitBook(entry, 1)
	s3 := objstoretest.Serve(t, "AKIDALICE", "s3cret-value")
	s3.CreateBucket(t, "datasets")
	s3.CreateBucket(t, "results")
	data := []byte(strings.Repeat("imagenet shard ", 100000)) // 1.5 MB
	s3.Put(t, "datasets", "imagenet/train/a.bin", data)
	s3.Put(t, "datasets", "imagenet/labels.csv", []byte("a,1\n"))
	sum := sha256.Sum256(data)
	c := apiClient(t, entry, alice)
	ctx := context.Background()

	ref, err := c.PutSecrets(ctx, map[string]string{market.SecretAccessKeyID: "AKIDALICE", market.SecretSecretAccessKey: "s3cret-value",
		market.SecretEndpointURL: s3.URL, "HF_TOKEN": "hf_visible_to_the_job"})
	if err != nil {
		t.Fatal(err)
	}
	if ref.Holder != entry.ID().String() || len(ref.Names) != 4 {
		t.Fatalf("secrets ref %+v", ref)
	}
	spec := market.JobSpec{AllowSimulated: true, ID: "s3-job", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", `mkdir -p out && cd data && sha256sum train/a.bin > ../out/sums.txt && cp labels.csv ../out/ && echo "token=$HF_TOKEN"`},
		Data: &market.DataSpec{
			Inputs:  []market.DataInput{{From: "s3://datasets/imagenet", To: "data"}},
			Outputs: []market.DataOutput{{From: "out", To: "s3://results/run-1"}, {From: "missing", To: "s3://results/none"}},
			Secrets: &ref,
		}}
	if _, err := c.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "s3-job", 60*time.Second, market.JobSucceeded, market.JobFailed)
	p, _ := latestPlacement(rec, 0)
	if rec.State != market.JobSucceeded || p.Node != runner.ID().String() {
		t.Fatalf("job %s (%s) on %s", rec.State, rec.Reason, p.Node)
	}
	if out := logsOf(t, entry, alice, "s3-job"); out != "token=hf_visible_to_the_job\n" {
		t.Errorf("the job printed %q", out)
	}
	if b, ok := s3.Get(t, "results", "run-1/sums.txt"); !ok || string(b) != hex.EncodeToString(sum[:])+"  train/a.bin\n" {
		t.Errorf("run-1/sums.txt: %q (%v)", b, ok)
	}
	if b, ok := s3.Get(t, "results", "run-1/labels.csv"); !ok || string(b) != "a,1\n" {
		t.Errorf("run-1/labels.csv: %q", b)
	}
	if want := "1 output of 2 outputs not sent: output missing → s3://results/none: missing is not in the working directory"; !strings.Contains(p.Reason, want) {
		t.Errorf("placement reason %q, want it to say %q", p.Reason, want)
	}
	for _, n := range []*Node{coord, entry, runner} {
		r, err := n.Job(ctx, "s3-job")
		b, _ := json.Marshal(r)
		if err != nil || strings.Contains(string(b), "s3cret-value") || strings.Contains(string(b), "hf_visible") {
			t.Errorf("%s's record of the job holds a secret's value (%v)", n.ID().ShortString(), err)
		}
	}
	held, err := os.Stat(filepath.Join(entry.cfg.DataDir, "secrets", "s3-job.json"))
	if err != nil || held.Mode().Perm() != 0o600 {
		t.Errorf("the holder keeps the secrets as %v (%v), want mode 0600", held, err)
	}
	// A stranger cannot have them.
	req, _ := json.Marshal(secretsRequest{Job: "s3-job", Share: 0, Epoch: p.Epoch})
	if err := callRaw(stranger, entry, kindSecrets, req); !isStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), "no live attempt of it runs on") {
		t.Errorf("a stranger asking for the secrets: %v", err)
	}

	// Wrong credentials: the start fails, naming the input and what S3 said.
	wrong, err := c.PutSecrets(ctx, map[string]string{market.SecretAccessKeyID: "AKIDWRONG", market.SecretSecretAccessKey: "x", market.SecretEndpointURL: s3.URL})
	if err != nil {
		t.Fatal(err)
	}
	spec.ID, spec.Data.Secrets, spec.Data.Outputs = "s3-wrong", &wrong, nil
	if _, err := c.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec = waitState(t, coord, "s3-wrong", 60*time.Second, market.JobSucceeded, market.JobFailed)
	if want := "did not start: input s3://datasets/imagenet/: listing s3://datasets/imagenet/ at 127.0.0.1"; rec.State != market.JobFailed ||
		!strings.Contains(rec.Reason, want) || !strings.Contains(rec.Reason, "(InvalidAccessKeyId)") {
		t.Errorf("job with wrong credentials: %s: %q; want failed saying %q … (InvalidAccessKeyId)", rec.State, rec.Reason, want)
	}
	if keys := s3.Keys(t, "results", ""); len(keys) != 2 {
		t.Errorf("results holds %q", keys)
	}

	// Secrets a job names must be on the node it is submitted through.
	spec.ID = "s3-elsewhere"
	_, err = apiClient(t, coord, alice).Submit(ctx, spec)
	if !isAPIStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "the secrets were given to") {
		t.Errorf("a job submitted elsewhere than its secrets: %v", err)
	}
}

// isAPIStatus reports whether err is the API's answer with status.
func isAPIStatus(err error, status int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status
}

// A sandboxed job reads (and may change) its inputs staged from S3, and its
// outputs reach S3 after it ends: the executor keeps its working directory
// until the runner has sent them (it used to remove it first, and the
// outputs were "not in the working directory").
func TestS3OutputsOfASandboxedJob(t *testing.T) {
	requireSandbox(t)
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(func(_ int, c *Config) { c.Executor.Isolation = executor.IsolationSandbox }), "", "a100-80g:1")
	coord, runner := sm.nodes[0], sm.nodes[1]
	sm.neverCoordinate(runner)
	sm.waitBook(coord, 1)
	s3 := objstoretest.Serve(t, "AKIDALICE", "s3cret-value")
	s3.CreateBucket(t, "results")
	s3.CreateBucket(t, "datasets")
	s3.Put(t, "datasets", "set/labels.csv", []byte("a,1\n"))
	c := apiClient(t, coord, alice)
	ctx := context.Background()
	ref, err := c.PutSecrets(ctx, map[string]string{market.SecretAccessKeyID: "AKIDALICE", market.SecretSecretAccessKey: "s3cret-value",
		market.SecretEndpointURL: s3.URL})
	if err != nil {
		t.Fatal(err)
	}
	spec := market.JobSpec{AllowSimulated: true, ID: "s3-sandboxed", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", `mkdir -p out && id -u > out/uid.txt && cp data/labels.csv out/ && echo more >> data/labels.csv`},
		Data: &market.DataSpec{Inputs: []market.DataInput{{From: "s3://datasets/set", To: "data"}},
			Outputs: []market.DataOutput{{From: "out", To: "s3://results/run-1"}}, Secrets: &ref}}
	if _, err := c.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "s3-sandboxed", 60*time.Second, market.JobSucceeded, market.JobFailed)
	p, _ := latestPlacement(rec, 0)
	if rec.State != market.JobSucceeded || strings.Contains(p.Reason, "not sent") {
		t.Fatalf("job %s, placement reason %q", rec.State, p.Reason)
	}
	b, ok := s3.Get(t, "results", "run-1/uid.txt")
	if !ok || strings.TrimSpace(string(b)) == "0" || strings.TrimSpace(string(b)) == "" {
		t.Errorf("run-1/uid.txt: %q (%v); want the job's own uid", b, ok)
	}
	if b, ok := s3.Get(t, "results", "run-1/labels.csv"); !ok || string(b) != "a,1\n" {
		t.Errorf("run-1/labels.csv (the input, read by the job): %q (%v)", b, ok)
	}
	if _, err := os.Stat(filepath.Join(runner.exec.Root(), attemptName("s3-sandboxed", 0, p.Epoch), "work")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runner still holds the working directory: %v", err)
	}
}
