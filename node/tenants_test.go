package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
)

// testOwner is a fixed owner key: seed i, so failures reproduce.
// testOwner(0) is the owner every simMesh node acts as in-process.
func testOwner(i byte) *owner.Key {
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{i + 1}, ed25519.SeedSize))
	if err != nil {
		panic(err)
	}
	return &k
}

// withAPI serves every node's API on a loopback port of its own, and lets
// tweak change the config of the i-th node started.
func withAPI(tweak func(i int, c *Config)) func(*Config) {
	var i atomic.Int32
	return func(c *Config) {
		c.API = &api.Config{Addr: "127.0.0.1:0"}
		if tweak != nil {
			tweak(int(i.Add(1)-1), c)
		}
	}
}

// apiClient is a client of n's API that signs as key (none when nil).
func apiClient(t *testing.T, n *Node, key *owner.Key) *client.Client {
	t.Helper()
	var opts []client.Option
	if key != nil {
		opts = append(opts, client.WithOwnerKey(*key))
	}
	c, err := client.New(n.APIAddr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Alice's job, its output, its checkpoint and its controls are hers alone
// through the API of every node; bob, and anyone without a key, gets a
// clear refusal and changes nothing. Between nodes, a peer acting as bob,
// or a call without the owner's proof, is refused where it would act.
func TestOwnersReadAndSteerOnlyTheirOwnJobsThroughAnyPeer(t *testing.T) {
	alice, bob := testOwner(1), testOwner(2)
	// Node 2 acts as bob in-process: a peer whose operator is bob.
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		c.CheckpointInterval = 150 * time.Millisecond
		if i == 2 {
			c.Owner = bob
		}
	}), "", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...) // node 0 coordinates; the job runs on 1 or 2
	sm.waitBook(coord, 2)
	ctx := context.Background()

	rec, err := apiClient(t, sm.nodes[1], alice).Submit(ctx, market.JobSpec{
		AllowSimulated: true,
		Cards:          1, MaxPriceCNY: 20, Elastic: &market.Elastic{Min: 1, Max: 2},
		Command: []string{"sh", "-c", "echo secret-of-alice; echo 7 > $GPUMESH_CHECKPOINT_DIR/step; sleep 300"},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := rec.ID
	if rec.Spec.Owner != string(alice.ID()) || rec.Signature == nil {
		t.Fatalf("record of the submission: owner %q, signature %v", rec.Spec.Owner, rec.Signature)
	}
	var last string // what was missing at the last look, for the failure
	defer func() {
		if t.Failed() {
			t.Logf("last look: %s", last)
		}
	}()
	eventually(t, 20*time.Second, "alice's job runs and has a checkpoint", func() bool {
		r, err := apiClient(t, sm.nodes[2], alice).Job(ctx, id)
		if err != nil || r.State != market.JobRunning {
			last = fmt.Sprintf("job: %s %v (%s)", r.State, err, r.Reason)
			return false
		}
		var ck bytes.Buffer
		_, err = apiClient(t, sm.nodes[2], alice).Checkpoint(ctx, id, 0, &ck)
		last = fmt.Sprintf("job running; checkpoint: %d bytes, %v", ck.Len(), err)
		return err == nil && ck.Len() > 0
	})

	for i, n := range sm.nodes {
		asBob, anon, asAlice := apiClient(t, n, bob), apiClient(t, n, nil), apiClient(t, n, alice)
		where := fmt.Sprintf("node %d", i)
		refused := func(what string, err error, want error) {
			t.Helper()
			if !errors.Is(err, want) {
				t.Errorf("%s: %s: err = %v, want %v", where, what, err, want)
			}
		}
		_, err := asBob.Job(ctx, id)
		refused("bob reads alice's record", err, client.ErrForbidden)
		if err != nil && !strings.Contains(err.Error(), "belongs to another owner") {
			t.Errorf("%s: bob's refusal does not say why: %v", where, err)
		}
		var out bytes.Buffer
		_, err = asBob.Logs(ctx, api.LogRequest{Job: id}, &out)
		refused("bob reads alice's logs", err, client.ErrForbidden)
		_, err = asBob.Checkpoint(ctx, id, 0, &out)
		refused("bob fetches alice's checkpoint", err, client.ErrForbidden)
		_, err = asBob.Cancel(ctx, id)
		refused("bob cancels alice's job", err, client.ErrForbidden)
		_, err = asBob.Scale(ctx, id, 2)
		refused("bob scales alice's job", err, client.ErrForbidden)
		if strings.Contains(out.String(), "secret") {
			t.Errorf("%s: bob got alice's output: %q", where, out.String())
		}
		jobs, err := asBob.Jobs(ctx)
		if err != nil || len(jobs) != 0 {
			t.Errorf("%s: bob's job list: %d jobs, %v; want none of alice's", where, len(jobs), err)
		}
		_, err = anon.Job(ctx, id)
		refused("no key reads alice's record", err, client.ErrForbidden)
		if err != nil && !strings.Contains(err.Error(), "needs the owner's key") {
			t.Errorf("%s: the refusal without a key does not say why: %v", where, err)
		}
		_, err = anon.Cancel(ctx, id)
		refused("no key cancels", err, client.ErrForbidden)
		if jobs, err := anon.Jobs(ctx); err != nil || len(jobs) != 0 {
			t.Errorf("%s: no key lists %d jobs, %v; want none", where, len(jobs), err)
		}

		// Alice reads everything through the same node.
		out.Reset()
		if _, err := asAlice.Logs(ctx, api.LogRequest{Job: id}, &out); err != nil || !strings.Contains(out.String(), "secret-of-alice") {
			t.Errorf("%s: alice's logs: %q, %v", where, out.String(), err)
		}
		var ck bytes.Buffer
		if _, err := asAlice.Checkpoint(ctx, id, 0, &ck); err != nil || ck.Len() == 0 {
			t.Errorf("%s: alice's checkpoint: %d bytes, %v", where, ck.Len(), err)
		}
		// Every node lists her job, gathered from the members that hold
		// it: node 2 neither coordinates nor took it in.
		jobs, err = asAlice.Jobs(ctx)
		if err != nil || len(jobs) != 1 || jobs[0].ID != id {
			t.Errorf("%s: alice's job list: %+v, %v", where, jobs, err)
		}
	}

	// A peer whose operator is bob cannot steer alice's job either: the
	// coordinator and the runner check the owner themselves.
	bobsNode := sm.nodes[2]
	if _, err := bobsNode.Cancel(ctx, id); !isStatus(err, http.StatusForbidden) {
		t.Errorf("bob's node cancels alice's job in-process: %v", err)
	}
	if err := bobsNode.Logs(ctx, api.LogRequest{Job: id}, io.Discard, func() {}); err == nil {
		r, _ := coord.Job(ctx, id)
		if p, _ := livePlacement(r); p.Node != bobsNode.ID().String() {
			t.Errorf("bob's node read alice's logs from another runner")
		}
	}
	// A call without the owner's proof, or with a proof of another request.
	raw, _ := json.Marshal(id)
	if err := callRaw(bobsNode, coord, kindCancel, raw); !isStatus(err, http.StatusUnauthorized) {
		t.Errorf("an unsealed cancel: %v", err)
	}
	read := owner.SignRequest(*alice, http.MethodGet, "/v1/jobs/"+id+"/logs", nil, time.Now())
	sealed, _ := json.Marshal(sealedCall{Proof: read, Call: raw})
	if err := callRaw(bobsNode, coord, kindCancel, sealed); !isStatus(err, http.StatusUnauthorized) || !strings.Contains(err.Error(), "not this") {
		t.Errorf("alice's log read replayed as a cancel: %v", err)
	}
	if r, _ := coord.Job(ctx, id); r.State != market.JobRunning || r.Cards != 1 {
		t.Fatalf("after the refusals the job is %s with %d cards; want it running untouched", r.State, r.Cards)
	}

	// Alice cancels through the node bob runs.
	if _, err := apiClient(t, bobsNode, alice).Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitState(t, coord, id, 10*time.Second, market.JobCancelled)
}

func isStatus(err error, status int) bool {
	var he *api.HTTPError
	return errors.As(err, &he) && he.Status == status
}

// callRaw makes call kind from one node to another with data as it is.
func callRaw(from, to *Node, kind string, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from.dialable(to.ID())
	err := from.direct.Call(ctx, to.ID(), kind, data, func(gossip.Message) error { return nil })
	return fromCallError(err)
}

// A spec that is not its owner's as signed, or not signed lately, or not
// signed at all, is refused by the entry node and by the coordinator, with
// the reason; nothing is submitted. A bad signature is bad input (400); no
// signature and no owner token is a caller the node cannot act for (403).
func TestForgedOrUnsignedSpecsAreRefused(t *testing.T) {
	alice := testOwner(1)
	sm := newSimMeshWith(t, withAPI(nil), "", "a100-80g:1")
	entry, coord := sm.nodes[1], sm.nodes[0]
	sm.neverCoordinate(entry)
	ctx := context.Background()
	spec := market.JobSpec{AllowSimulated: true, ID: "j-forged", Cards: 1, MaxPriceCNY: 20, Command: []string{"true"}}

	signed, err := market.SignSpec(*alice, entry.mesh.Network(), spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	altered := signed
	altered.Spec.Command = []string{"sh", "-c", "mine-coins"}
	otherMesh, _ := market.SignSpec(*alice, "another-mesh", spec, time.Now())
	stale, _ := market.SignSpec(*alice, entry.mesh.Network(), spec, time.Now().Add(-SpecMaxAge-time.Minute))
	for _, c := range []struct {
		name   string
		body   any
		status int
		want   string
	}{
		{"altered after signing", altered, http.StatusBadRequest, "does not verify"},
		{"signed for another mesh", otherMesh, http.StatusBadRequest, "does not verify"},
		{"signed long ago", stale, http.StatusBadRequest, "sign it again"},
		{"unsigned", spec, http.StatusForbidden, "not signed by its owner"},
	} {
		code, body := postJSON(t, entry.APIAddr(), "/v1/jobs", c.body)
		if code != c.status || !strings.Contains(body, c.want) || !strings.Contains(body, `"field": "signature"`) {
			t.Errorf("%s: %d %s; want %d on field signature saying %q", c.name, code, body, c.status, c.want)
		}
		// The coordinator checks for itself what a peer hands it.
		s, ok := c.body.(market.SignedSpec)
		if !ok {
			s = market.SignedSpec{Spec: spec}
		}
		req := submitRequest{Spec: s.Spec}
		if s.Signed() {
			req.Signature = &s.Signature
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := entry.call(cctx, coord.ID(), kindSubmit, req)
		cancel()
		if !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s, handed to the coordinator by a peer: %v", c.name, err)
		}
	}
	if _, err := coord.Job(ctx, "j-forged"); !isNotFound(err) {
		t.Fatalf("the job exists after only refusals: %v", err)
	}
	// The owner's own spec goes through.
	if code, body := postJSON(t, entry.APIAddr(), "/v1/jobs", signed); code != http.StatusCreated {
		t.Fatalf("alice's signed spec: %d %s", code, body)
	}
}

// A bare spec sent with an owner token, which the node signs, may leave
// max_price_cny out or 0: the node fills in the default gpumesh submit
// uses (market.DefaultMaxPrice), rather than refuse it.
func TestBareSpecGetsTheDefaultMaxPrice(t *testing.T) {
	alice := testOwner(1)
	const token = "alice-owner-token-0123"
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		c.API.OwnerTokens = map[string]owner.Key{token: *alice}
	}), "", "a100-80g:1")
	entry := sm.nodes[0]
	sm.waitBook(entry, 1)
	want, err := market.DefaultMaxPrice(&market.JobSpec{AllowSimulated: true, Models: []string{"a100-80g"}}, nil)
	if err != nil || want <= 0 {
		t.Fatalf("default max price of an a100-80g: %v %v", want, err)
	}
	post := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+entry.APIAddr()+"/v1/jobs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, tc := range []struct{ id, price string }{
		{"j-no-price", ""},
		{"j-zero-price", `"max_price_cny": 0, `},
	} {
		code, body := post(`{"id": "` + tc.id + `", "cards": 1, "models": ["a100-80g"], ` + tc.price + `"command": ["true"]}`)
		if code != http.StatusCreated {
			t.Fatalf("%s: %d %s; want 201", tc.id, code, body)
		}
		var rec market.JobRecord
		if err := json.Unmarshal([]byte(body), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Spec.MaxPriceCNY != want || rec.Spec.Owner != string(alice.ID()) {
			t.Errorf("%s: max price %v of owner %s, want %v of %s", tc.id, rec.Spec.MaxPriceCNY, rec.Spec.Owner, want, alice.ID())
		}
	}
	// Cards outside the catalog have no default: the price is required.
	code, body := post(`{"id": "j-uncatalogued", "cards": 1, "models": ["x-tesla-t4-15g"], "command": ["true"]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `"field": "max_price_cny"`) || !strings.Contains(body, "outside the catalog (x-tesla-t4-15g)") {
		t.Errorf("uncatalogued model without a price: %d %s", code, body)
	}
	if _, err := entry.Job(context.Background(), "j-uncatalogued"); !isNotFound(err) {
		t.Errorf("the refused job exists: %v", err)
	}
}

func postJSON(t *testing.T, addr, path string, v any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post("http://"+addr+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A coordinator that hands out an unsigned job gets it run nowhere: every
// supplier checks the owner's signature in the award itself.
func TestSuppliersRefuseAwardsWithoutTheOwnersSignature(t *testing.T) {
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		if i == 0 { // a coordinator that skips the check
			c.Market = func(m *market.Config) { m.RequireSigned = false }
		}
	}), "", "a100-80g:1", "a100-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 2)
	spec := market.JobSpec{AllowSimulated: true, ID: "j-unsigned", Cards: 1, MaxPriceCNY: 20, Command: []string{"sh", "-c", "echo ran"}}
	var stepErr error
	if err := coord.do(context.Background(), func() {
		stepErr = coord.mk.Step(market.JobSubmitted{Now: time.Now(), Spec: spec})
		coord.drain()
	}); err != nil || stepErr != nil {
		t.Fatal(err, stepErr)
	}
	var rec market.JobRecord
	eventually(t, 20*time.Second, "both suppliers reject the unsigned award", func() bool {
		rec, _ = coord.Job(context.Background(), "j-unsigned")
		nodes := map[string]bool{}
		for _, p := range rec.Placements {
			if p.State == market.PlacementRejected && strings.Contains(p.Reason, "no signed spec") {
				nodes[p.Node] = true
			}
		}
		return len(nodes) == 2
	})
	for _, n := range sm.nodes[1:] {
		if len(n.exec.Running()) != 0 {
			t.Errorf("node %s runs the unsigned job", n.ID().ShortString())
		}
	}
	// The coordinator goes on awarding the job (a spare, the next round):
	// an award still waiting for its answer is no fault, but none may
	// have been taken.
	for _, p := range rec.Placements {
		if p.State != market.PlacementRejected && p.State != market.PlacementAwarded || !p.StartedAt.IsZero() {
			t.Errorf("placement %+v was taken", p)
		}
	}
}

// A supplier's policy keeps it from bidding, and --explain says why.
func TestPolicyDeclineShowsInExplain(t *testing.T) {
	me := string(testOwner(0).ID())
	sm := newSimMeshWith(t, withAPI(func(i int, c *Config) {
		switch i {
		case 1:
			c.Policy.DenyOwners = []string{me}
		case 2:
			c.Policy.MaxNetwork = market.NetworkNone
		}
	}), "", "a100-80g:1", "h100-sxm-80g:1")
	coord := sm.nodes[0]
	sm.neverCoordinate(sm.nodes[1:]...)
	sm.waitBook(coord, 2)
	ctx := context.Background()
	if _, err := coord.Submit(ctx, market.JobSpec{AllowSimulated: true, ID: "j-policy", Cards: 1, MaxPriceCNY: 50, Network: market.NetworkEgress, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		sm.nodes[1].ID().String(): "deny list",
		sm.nodes[2].ID().String(): "needs network egress; this supplier allows at most none",
	}
	var rec market.JobRecord
	eventually(t, 20*time.Second, "both suppliers decline for their policies", func() bool {
		rec, _ = coord.Job(ctx, "j-policy")
		if rec.Explanation == nil {
			return false
		}
		got := 0
		for _, e := range rec.Explanation.Entries {
			if e.Reason == market.ReasonDeclined && strings.HasPrefix(e.Detail, "policy: ") && strings.Contains(e.Detail, want[e.Node]) {
				got++
			}
		}
		return got == 2
	})
	if rec.State.Terminal() || rec.State == market.JobRunning {
		t.Errorf("job %s; no supplier admits it", rec.State)
	}
	// The reason the owner sees without --explain counts the declines.
	eventually(t, 20*time.Second, "the pending reason counts both declines", func() bool {
		rec, _ = coord.Job(ctx, "j-policy")
		return rec.State == market.JobPending && strings.HasPrefix(rec.Reason, "waiting for capacity: 2 of 2 suppliers asked declined: policy: ") &&
			strings.Contains(rec.Reason, "deny list (1)") && strings.Contains(rec.Reason, "allows at most none (1)")
	})
	if len(sm.nodes[1].exec.Running())+len(sm.nodes[2].exec.Running()) != 0 {
		t.Error("a supplier runs a job its policy refuses")
	}
	t.Logf("explain:\n%s", rec.Explanation)
}
