package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// payloadTree writes a payload directory: a script that prints the
// SHA-256 of the dataset, and a dataset of size pseudo-random bytes.
func payloadTree(t *testing.T, seed uint64, size int) (dir string, sum string) {
	t.Helper()
	dir = t.TempDir()
	data := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(data)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "set.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\nsha256sum data/set.bin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	return dir, hex.EncodeToString(h[:])
}

// upload sends dir to n's API as key's owner, as gpumesh submit --payload
// does.
func upload(t *testing.T, n *Node, key *owner.Key, dir string) (client.PayloadStats, error) {
	t.Helper()
	p, err := client.ScanPayload(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return apiClient(t, n, key).UploadPayload(context.Background(), p)
}

func logsOf(t *testing.T, n *Node, key *owner.Key, job string) string {
	t.Helper()
	var out bytes.Buffer
	if _, err := apiClient(t, n, key).Logs(context.Background(), api.LogRequest{Job: job}, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// A payload uploaded to one node runs on another, where the job's
// coordinator is a third: the owner sends it once, the runner finds the
// dataset byte for byte in its work directory, and a second job with the
// same dataset sends nothing and moves nothing new between the nodes.
func TestPayloadIsSentOnceAndRunsElsewhere(t *testing.T) {
	alice := testOwner(1)
	sm, coord, runner, entry := threeRoles(t)
	dir, sum := payloadTree(t, 1, 5<<20+77)

	st, err := upload(t, entry, alice, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Chunks < 3 || st.Uploaded != st.Chunks || st.UploadedBytes != st.Bytes {
		t.Fatalf("first upload: %+v; want every chunk sent", st)
	}
	if st.Ref.Holder != entry.ID().String() {
		t.Errorf("holder %s, want the node uploaded to", st.Ref.Holder)
	}
	submit := func(id string, ref market.PayloadRef) market.JobRecord {
		t.Helper()
		_, err := apiClient(t, entry, alice).Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: id, Cards: 1, MaxPriceCNY: 20,
			Command: []string{"sh", "run.sh"}, Payload: &ref})
		if err != nil {
			t.Fatal(err)
		}
		rec := waitState(t, coord, id, 60*time.Second, market.JobSucceeded, market.JobFailed)
		if rec.State != market.JobSucceeded {
			t.Fatalf("job %s %s: %s", id, rec.State, rec.Reason)
		}
		return rec
	}
	rec := submit("payload-1", st.Ref)
	if p, _ := latestPlacement(rec, 0); p.Node != runner.ID().String() {
		t.Fatalf("ran on %s, want the runner", p.Node)
	}
	if out := logsOf(t, entry, alice, "payload-1"); !strings.HasPrefix(out, sum+"  data/set.bin") {
		t.Errorf("the job saw %q, want the dataset's sum %s", out, sum)
	}
	m, _ := blob.ParseDigest(st.Ref.Manifest)
	for _, n := range []*Node{entry, coord} {
		if err := n.holdsWhole(m); err != nil || n.payloadLeaseOf(string(alice.ID()), "payload-1") == "" {
			t.Errorf("%s does not keep the payload for the job: %v", n.ID().ShortString(), err)
		}
	}

	chunks := func() (out []int) {
		for _, n := range sm.nodes {
			out = append(out, n.blobs.Usage().Chunks)
		}
		return out
	}
	before := chunks()
	again, err := upload(t, entry, alice, dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Uploaded != 0 || again.UploadedBytes != 0 || again.Ref != st.Ref {
		t.Errorf("second upload of the dataset sent %d chunks, %d bytes (ref %+v)", again.Uploaded, again.UploadedBytes, again.Ref)
	}
	submit("payload-2", again.Ref)
	if out := logsOf(t, entry, alice, "payload-2"); !strings.HasPrefix(out, sum+"  data/set.bin") {
		t.Errorf("the second job saw %q", out)
	}
	if after := chunks(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("chunks per node went from %v to %v: the second job moved data", before, after)
	}
}

// A node refuses a payload over its --max-payload (413), and one that
// would take an owner past its --owner-quota (413 naming the quota), each
// saying why, and
// keeps nothing of it; another owner has a quota of its own.
func TestPayloadLimitsAndQuotas(t *testing.T) {
	alice, bob := testOwner(1), testOwner(2)
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		c.MaxPayload = 3 << 20
		c.OwnerQuota = 4 << 20
	}), "")
	n := sm.nodes[0]
	big, _ := payloadTree(t, 2, 3<<20+1)
	a, _ := payloadTree(t, 3, 2<<20)
	b, _ := payloadTree(t, 4, 2<<20+512<<10)
	usage := n.blobs.Usage()

	_, err := upload(t, n, alice, big)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge ||
		!strings.Contains(err.Error(), "payload of 3.0 MiB: this node takes payloads of at most 3 MiB (gpumesh node --max-payload)") {
		t.Errorf("a payload over --max-payload: %v", err)
	}
	if u := n.blobs.Usage(); u.Bytes != usage.Bytes || u.Leases != usage.Leases {
		t.Errorf("the refused payload left %d bytes and %d leases", u.Bytes-usage.Bytes, u.Leases-usage.Leases)
	}
	if _, err := upload(t, n, alice, a); err != nil {
		t.Fatal(err)
	}
	usage = n.blobs.Usage()
	_, err = upload(t, n, alice, b)
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge ||
		!strings.Contains(err.Error(), "over the owner's quota on this node: owner "+alice.ID().Short()+" keeps 2.0 MiB of payloads here, and may keep 4 MiB (gpumesh node --owner-quota)") {
		t.Errorf("a payload past the owner's quota: %v", err)
	}
	if u := n.blobs.Usage(); u.Bytes != usage.Bytes || u.Leases != usage.Leases {
		t.Errorf("the refused payload left %d bytes and %d leases", u.Bytes-usage.Bytes, u.Leases-usage.Leases)
	}
	if _, err := upload(t, n, bob, b); err != nil {
		t.Errorf("bob's payload, within his own quota: %v", err)
	}
	// alice's own payload again counts once.
	if _, err := upload(t, n, alice, a); err != nil {
		t.Errorf("alice's payload sent again: %v", err)
	}
}

// Chunks are taken only for a manifest the caller put, only if the
// manifest lists them, and only if their bytes are theirs.
func TestPayloadChunksAreChecked(t *testing.T) {
	alice, bob := testOwner(1), testOwner(2)
	sm := newSimMesh(t, "")
	n := sm.nodes[0]
	dir, _ := payloadTree(t, 5, 1<<20)
	man, scan, err := blob.Scan(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := man.Encode()
	as := func(k *owner.Key) context.Context {
		return api.WithCaller(context.Background(), api.Caller{Owner: k.ID()})
	}
	api := tenantAPI{n}
	up, err := api.PutPayloadManifest(as(alice), body)
	if err != nil {
		t.Fatal(err)
	}
	first := man.Chunks()[0]
	data, _ := os.ReadFile(filepath.Join(dir, "data", "set.bin"))
	m := scan.Manifest.String()
	for _, c := range []struct {
		who    *owner.Key
		chunk  string
		body   []byte
		status int
		want   string
	}{
		{alice, first.Digest.String(), bytes.Repeat([]byte{7}, int(first.Size)), http.StatusBadRequest, "refused: blob: chunk"},
		{alice, first.Digest.String(), data[:first.Size-1], http.StatusBadRequest, "refused"},
		{alice, first.Digest.String(), data[:first.Size+1], http.StatusBadRequest, "more than its"},
		{alice, blob.Sum([]byte("x")).String(), []byte("x"), http.StatusNotFound, "lists no chunk"},
		{bob, first.Digest.String(), data[:first.Size], http.StatusNotFound, "no upload of it by owner"},
		{alice, "sha256:xyz", []byte("x"), http.StatusBadRequest, "bad digest"},
	} {
		err := api.PutPayloadChunk(as(c.who), m, c.chunk, bytes.NewReader(c.body))
		if !isStatus(err, c.status) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chunk %.20s… as %s: %v, want %d saying %q", c.chunk, c.who.ID().Short(), err, c.status, c.want)
		}
	}
	if n.blobs.Has(blob.KindChunk, first.Digest) {
		t.Fatal("a refused chunk was stored")
	}
	if err := api.PutPayloadChunk(as(alice), m, first.Digest.String(), bytes.NewReader(data[:first.Size])); err != nil {
		t.Fatal(err)
	}
	if !n.blobs.Has(blob.KindChunk, first.Digest) || len(up.Missing) != len(man.Chunks()) {
		t.Errorf("the chunk is not stored (missing %d of %d)", len(up.Missing), len(man.Chunks()))
	}
	if _, err := api.PutPayloadManifest(as(alice), []byte(`{"version":1,"entries":[{"path":"../x","type":"dir"}]}`)); !isStatus(err, http.StatusBadRequest) ||
		!strings.Contains(err.Error(), `".." element`) {
		t.Errorf("a manifest with a path out of its tree: %v", err)
	}
}

// A payload is read only by those the job lets: its runner, its
// coordinator group; a peer that runs nothing of the job is refused.
func TestPayloadIsReadOnlyForItsJob(t *testing.T) {
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(nil), "", "a100-80g:1", "", "")
	coord, runner, entry, stranger := sm.nodes[0], sm.nodes[1], sm.nodes[2], sm.nodes[3]
	sm.neverCoordinate(runner, entry, stranger)
	sm.waitBook(entry, 1)
	dir, _ := payloadTree(t, 6, 1<<20)
	st, err := upload(t, entry, alice, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apiClient(t, entry, alice).Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "guarded", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sleep", "300"}, Payload: &st.Ref}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the job runs", func() bool {
		rec, _ := coord.Job(context.Background(), "guarded")
		_, ok := livePlacement(rec)
		return ok
	})
	m, _ := blob.ParseDigest(st.Ref.Manifest)
	if err := stranger.blobs.SetLease(blob.Lease{ID: "steal"}); err != nil {
		t.Fatal(err)
	}
	_, err = stranger.xfer.Fetch(context.Background(), m, []peer.ID{entry.ID(), coord.ID()}, "steal")
	if err == nil || !strings.Contains(err.Error(), "runs no share of job guarded") || stranger.holdsWhole(m) == nil {
		t.Errorf("a stranger fetched the payload: %v", err)
	}
	if _, err := apiClient(t, entry, alice).Cancel(context.Background(), "guarded"); err != nil {
		t.Fatal(err)
	}
}

// An upload needs the owner: without a key or owner token the node
// refuses it (403 saying so; 401 where the node wants an API token, or
// for a signature that does not verify) and keeps nothing of it, however
// much was sent.
func TestPayloadUploadNeedsTheOwner(t *testing.T) {
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		if i == 1 {
			c.API.Token = "admin-secret"
		}
	}), "", "")
	open, gated := sm.nodes[0], sm.nodes[1]
	dir, _ := payloadTree(t, 7, 1<<20)
	p, err := client.ScanPayload(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	man, _, _ := blob.Scan(context.Background(), dir, nil)
	body, _ := man.Encode()
	chunk := man.Chunks()[0]
	usage := open.blobs.Usage()

	// The client of gpumesh without a key.
	_, err = apiClient(t, open, nil).UploadPayload(context.Background(), p)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || !errors.Is(err, client.ErrForbidden) ||
		!strings.Contains(ae.Message, "a payload upload needs the owner's key") {
		t.Errorf("an upload without a key: %v; want 403 saying the owner's key is needed", err)
	}
	// Plain HTTP: 50 MB of junk as a chunk, and a manifest, with no token.
	put := func(n *Node, path string, body io.Reader, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, "http://"+n.APIAddr()+path, body)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	mpath := "/v1/payloads/" + p.Manifest().String()
	junk := io.LimitReader(rand.NewChaCha8([32]byte{9}), 50<<20)
	if code, msg := put(open, mpath+"/chunks/"+chunk.Digest.String(), junk, nil); code != http.StatusForbidden || !strings.Contains(msg, "needs the owner's key") {
		t.Errorf("50 MB of junk without a token: %d %q, want 403", code, msg)
	}
	if code, msg := put(open, mpath, bytes.NewReader(body), nil); code != http.StatusForbidden || !strings.Contains(msg, "needs the owner's key") {
		t.Errorf("a manifest without a token: %d %q, want 403", code, msg)
	}
	// A node with an API token wants it first.
	if code, msg := put(gated, mpath, bytes.NewReader(body), nil); code != http.StatusUnauthorized || msg != "missing or wrong API token" {
		t.Errorf("a manifest to a gated node without its token: %d %q, want 401", code, msg)
	}
	// alice's signature over another manifest's digest does not verify.
	other := blob.Sum([]byte("another manifest")).Hex()
	sig := owner.SignRequestHash(*alice, http.MethodPut, mpath, other, time.Now()).HeaderValue()
	if code, msg := put(open, mpath, bytes.NewReader(body), map[string]string{owner.Header: sig}); code != http.StatusUnauthorized || msg == "" {
		t.Errorf("a signature over another digest: %d %q, want 401", code, msg)
	}
	if u := open.blobs.Usage(); u.Bytes != usage.Bytes || u.Leases != usage.Leases || u.Chunks != usage.Chunks {
		t.Errorf("refused uploads left %d bytes, %d chunks, %d leases", u.Bytes-usage.Bytes, u.Chunks-usage.Chunks, u.Leases-usage.Leases)
	}
	// With the key, the same upload is taken.
	if _, err := apiClient(t, open, alice).UploadPayload(context.Background(), p); err != nil {
		t.Errorf("alice's signed upload: %v", err)
	}
}

// A payload with a path (gpumesh submit --input ./dir:/data/set) is
// restored there in the working directory, parents made.
func TestPayloadAtAPath(t *testing.T) {
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(nil), "", "a100-80g:1")
	coord := sm.nodes[0]
	sm.waitBook(coord, 1)
	dir, sum := payloadTree(t, 8, 300<<10)
	st, err := upload(t, coord, alice, dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := st.Ref
	ref.Path = "/inputs/set"
	if _, err := apiClient(t, coord, alice).Submit(context.Background(), market.JobSpec{AllowSimulated: true, ID: "at-path", Cards: 1, MaxPriceCNY: 20,
		Command: []string{"sh", "-c", "cd inputs/set && sh run.sh"}, Payload: &ref}); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, coord, "at-path", 60*time.Second, market.JobSucceeded, market.JobFailed)
	if out := logsOf(t, coord, alice, "at-path"); rec.State != market.JobSucceeded || !strings.HasPrefix(out, sum+"  data/set.bin") {
		t.Errorf("job %s (%s) printed %q", rec.State, rec.Reason, out)
	}
}
