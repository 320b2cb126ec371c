package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Tenancy: every job belongs to the owner whose key signed its spec, and
// only that owner reads or steers it.
//
//   - Submission. A spec reaches the coordinator with its owner's signature
//     (market.SignedSpec), for this mesh, signed at most SpecMaxAge ago;
//     the entry node and the coordinator both verify it, the market refuses
//     an unsigned one (RequireSigned), and every supplier verifies it again
//     in the award before it runs anything. A spec submitted unsigned
//     through the API is signed by the node only for an owner whose key it
//     holds (an owner token); one submitted through the Go API in-process
//     is signed with the node's own owner key (Config.Owner).
//   - The API (tenantAPI) serves a job's record, bill, logs and checkpoint,
//     and cancels or scales it, only for the owner the request
//     authenticated as (api.Caller); GET /v1/jobs lists the caller's jobs,
//     gathered from the members that hold records (joblist.go).
//   - Between nodes, a cancel, a scale, a log read, a checkpoint read and a
//     job list carry the owner's signed request (sealedCall): the peer that acts —
//     the coordinator, the runner — verifies it and the owner itself. An
//     in-process call is signed with the node's owner key, so a peer obeys
//     it only for that key's jobs. Job records themselves are shared among
//     the members that hold replicas, and peers read them freely.

// SpecMaxAge is how long after signing a spec may be submitted: a captured
// submission cannot be replayed later to run the job again.
const SpecMaxAge = 15 * time.Minute

// kindCheckpointOwner asks a holder of a share's newest checkpoint to let
// the calling node read it, on behalf of the job's owner: checkpointQuery
// → checkpointGrant (the manifest the caller may now fetch), or nothing
// when the holder does not have it whole.
const (
	kindCheckpointOwner = "ckpt.owner"
	kindCheckpointGrant = "ckpt.grant"
)

// checkpointQuery names a share's newest checkpoint, for its owner.
type checkpointQuery struct {
	Job   string `json:"job"`
	Share int    `json:"share"`
}

// checkpointGrant says which manifest a holder lets the caller read.
type checkpointGrant struct {
	Manifest string `json:"manifest"`
}

// grantTTL is how long a holder lets a node fetch a checkpoint it asked
// for on behalf of the job's owner.
const grantTTL = 10 * time.Minute

// ownerKinds are the calls that act for an owner and must carry the
// owner's signed request.
var ownerKinds = map[string]bool{kindCancel: true, kindScale: true, kindLogs: true, kindCheckpointOwner: true, kindJobsList: true, kindFiles: true}

// sealedCall is a call made for an owner: the owner's signed request, the
// body it covers, and the call's own data.
type sealedCall struct {
	Proof owner.Proof     `json:"owner_proof"`
	Body  []byte          `json:"body,omitempty"`
	Call  json.RawMessage `json:"call"`
}

// signAsNode signs a spec submitted in-process with the node's owner key.
func (n *Node) signAsNode(spec market.JobSpec) (market.SignedSpec, error) {
	s, err := market.SignSpec(n.ownerKey, n.mesh.Network(), spec, time.Now())
	if err != nil {
		return s, &api.HTTPError{Status: http.StatusBadRequest, Field: "owner", Err: err}
	}
	return s, nil
}

// checkSubmission verifies a submitted spec's signature for this mesh and
// that it was signed lately.
func (n *Node) checkSubmission(s *market.SignedSpec, now time.Time) error {
	defer n.stages.Since(metrics.StageSignature, time.Now())
	bad := func(format string, args ...any) error {
		return &api.HTTPError{Status: http.StatusBadRequest, Field: "signature", Err: fmt.Errorf(format, args...)}
	}
	if err := s.Verify(n.mesh.Network()); err != nil {
		return bad("job %s: %w", s.Spec.ID, err)
	}
	switch age := now.Sub(s.Signature.SignedAt); {
	case age > SpecMaxAge:
		return bad("job %s was signed at %s, %v ago; a submission must be signed within %v: sign it again",
			s.Spec.ID, s.Signature.SignedAt.Format(time.RFC3339), age.Round(time.Second), SpecMaxAge)
	case age < -owner.RequestWindow:
		return bad("job %s was signed at %s, %v in the future: is a clock wrong?", s.Spec.ID, s.Signature.SignedAt.Format(time.RFC3339), (-age).Round(time.Second))
	}
	return nil
}

// sealCall wraps the data of an owner's call with the owner's signed
// request: the one the API verified, else one signed now with the key of an
// owner-token caller, else (an in-process call) with the node's own key.
func (n *Node) sealCall(ctx context.Context, kind string, data []byte, req any) []byte {
	if !ownerKinds[kind] {
		return data
	}
	c, ok := api.CallerFrom(ctx)
	sc := sealedCall{Call: data}
	if ok && c.Proof != nil {
		sc.Proof, sc.Body = *c.Proof, c.Body
	} else {
		key := n.ownerKey
		if ok && c.Key != nil {
			key = *c.Key
		}
		method, target, body := ownerRequest(req)
		sc.Proof, sc.Body = owner.SignRequest(key, method, target, body, time.Now()), body
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return data // unreachable: every field encodes
	}
	return b
}

// ownerRequest is the API request an owner would make for a call.
func ownerRequest(req any) (method, target string, body []byte) {
	switch r := req.(type) {
	case string: // a cancel names the job
		return http.MethodDelete, "/v1/jobs/" + r, nil
	case scaleRequest:
		b, _ := json.Marshal(api.ScaleRequest{Cards: r.Cards})
		return http.MethodPost, "/v1/jobs/" + r.Job + "/scale", b
	case logsRequest:
		return http.MethodGet, "/v1/jobs/" + r.Job + "/logs", nil
	case checkpointQuery:
		return http.MethodGet, "/v1/jobs/" + r.Job + "/checkpoint", nil
	case filesRequest:
		return http.MethodGet, "/v1/jobs/" + r.Job + "/files", nil
	case jobsListRequest:
		return http.MethodGet, "/v1/jobs", nil
	}
	return http.MethodGet, "/v1/jobs", nil
}

// guardCall checks a peer's call before it is served: an owner's call must
// carry that owner's signed request for the job (unsealed here, so the
// call's handler reads its own data). It serves kindCheckpointOwner
// itself. handled says the call is answered (err is the answer).
func (n *Node) guardCall(ctx context.Context, req *gossip.Message, reply func(string, []byte) error) (handled bool, err error) {
	if !ownerKinds[req.Kind] {
		return false, nil
	}
	var sc sealedCall
	if err := strictJSON(req.Data, &sc); err != nil {
		return true, asCallError(api.Errorf(http.StatusUnauthorized, "%s must carry the job owner's signed request: %v", req.Kind, err))
	}
	req.Data = sc.Call
	if req.Kind == kindJobsList {
		return true, n.serveJobsList(&sc, reply)
	}
	var job string
	var scale scaleRequest
	var query checkpointQuery
	var files filesRequest
	switch req.Kind {
	case kindCancel:
		err = strictJSON(sc.Call, &job)
	case kindScale:
		err = strictJSON(sc.Call, &scale)
		job = scale.Job
	case kindLogs:
		var lr logsRequest
		err = strictJSON(sc.Call, &lr)
		job = lr.Job
	case kindCheckpointOwner:
		err = strictJSON(sc.Call, &query)
		job = query.Job
	case kindFiles:
		err = strictJSON(sc.Call, &files)
		job = files.Job
	}
	if err != nil {
		return true, asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
	}
	if err := n.authorize(ctx, req.Kind, &sc, job, scale.Cards); err != nil {
		if isNotFound(err) && (req.Kind == kindCancel || req.Kind == kindScale) {
			return false, nil // not held here: the handler answers 404 as it would
		}
		return true, asCallError(err)
	}
	switch req.Kind {
	case kindCheckpointOwner:
		return true, n.serveOwnerCheckpoint(req.Sender, query, reply)
	case kindFiles:
		return true, n.serveFiles(ctx, req.Sender, files, reply)
	}
	return false, nil
}

// authorize checks that sc proves the job's owner asks for what the call
// does.
func (n *Node) authorize(ctx context.Context, kind string, sc *sealedCall, job string, cards int) error {
	p := &sc.Proof
	if err := p.Verify(time.Now(), owner.RequestWindow); err != nil {
		return api.Errorf(http.StatusUnauthorized, "%s for job %s: the owner's signed request: %v", kind, job, err)
	}
	rec, ok := n.view.Job(job)
	if !ok && (kind == kindLogs || kind == kindFiles) { // a runner may hold no record
		var err error
		if rec, err = n.Job(context.WithoutCancel(ctx), job); err == nil {
			ok = true
		}
	}
	if !ok {
		return api.Errorf(http.StatusNotFound, "no job %s", job)
	}
	if string(p.Owner) != rec.Spec.Owner {
		return forbidden(job, p.Owner)
	}
	want := func(method, path string) error {
		if p.Method != method || p.Path() != path {
			return api.Errorf(http.StatusUnauthorized, "%s for job %s: the owner signed %s %s, not this", kind, job, p.Method, p.Path())
		}
		return nil
	}
	switch kind {
	case kindCancel:
		return want(http.MethodDelete, "/v1/jobs/"+job)
	case kindScale:
		if err := want(http.MethodPost, "/v1/jobs/"+job+"/scale"); err != nil {
			return err
		}
		var body api.ScaleRequest
		if owner.BodyHash(sc.Body) != p.BodySHA256 || json.Unmarshal(sc.Body, &body) != nil || body.Cards != cards {
			return api.Errorf(http.StatusUnauthorized, "scale of job %s to %s: the owner signed another request", job, text.Count(cards, "card"))
		}
		return nil
	case kindFiles:
		return want(http.MethodGet, "/v1/jobs/"+job+"/files")
	}
	if p.Method != http.MethodGet {
		return api.Errorf(http.StatusUnauthorized, "%s for job %s: the owner signed a %s, not a read", kind, job, p.Method)
	}
	return nil
}

// refusedOwner reports whether err is a peer's refusal of an owner's call
// (401 or 403): an answer, not a peer that did not answer.
func refusedOwner(err error) bool {
	var he *api.HTTPError
	return errors.As(err, &he) && (he.Status == http.StatusUnauthorized || he.Status == http.StatusForbidden)
}

func forbidden(job string, who owner.ID) error {
	if who == "" {
		return &api.HTTPError{Status: http.StatusForbidden, Err: api.ErrOwnerRequired}
	}
	return api.Errorf(http.StatusForbidden, "job %s belongs to another owner (this request is owner %s)", job, who.Short())
}

func placedOn(rec market.JobRecord, node string) bool {
	for _, p := range rec.Placements {
		if p.Node == node {
			return true
		}
	}
	return false
}

// serveOwnerCheckpoint answers kindCheckpointOwner: when this node holds
// the share's newest checkpoint whole, it lets the caller fetch it for a
// while and names it; else it answers nothing.
func (n *Node) serveOwnerCheckpoint(caller peer.ID, q checkpointQuery, reply func(string, []byte) error) error {
	rec, ok := n.view.Job(q.Job)
	if !ok {
		return nil
	}
	cp := newestCheckpoint(rec, q.Share)
	if cp == nil {
		return nil
	}
	m, err := blob.ParseDigest(cp.Manifest)
	if err != nil || n.holdsWhole(m) != nil {
		return nil
	}
	n.grants.allow(caller, m, time.Now().Add(grantTTL))
	b, _ := json.Marshal(checkpointGrant{Manifest: cp.Manifest})
	return reply(kindCheckpointGrant, b)
}

// newestCheckpoint is a share's newest checkpoint in a record, nil for
// none.
func newestCheckpoint(rec market.JobRecord, share int) *market.Checkpoint {
	var best *market.Checkpoint
	for i := range rec.Checkpoints {
		cp := &rec.Checkpoints[i]
		if cp.Share == share && (best == nil || !cp.At.Before(best.At)) {
			best = cp
		}
	}
	return best
}

// tenantAPI is the Node as the API serves it: every job operation for the
// owner the request authenticated as, and for nobody else.
type tenantAPI struct{ *Node }

var (
	_ api.Backend          = tenantAPI{}
	_ api.SignedSubmitter  = tenantAPI{}
	_ api.CheckpointReader = tenantAPI{}
	_ api.JobLister        = tenantAPI{}
	_ api.PayloadStore     = tenantAPI{}
	_ api.FileCopier       = tenantAPI{}
	_ api.SecretStore      = tenantAPI{}
)

// callerOwner is the owner an API request authenticated as. A request
// without one passed the node's gate (it is no stranger) but may not touch
// jobs: 403, so that a client that holds the admin token is not asked for
// another token.
func callerOwner(ctx context.Context) (owner.ID, error) {
	c, _ := api.CallerFrom(ctx)
	if c.Owner == "" {
		return "", &api.HTTPError{Status: http.StatusForbidden, Err: api.ErrOwnerRequired}
	}
	return c.Owner, nil
}

// own returns the job's record if the caller owns it.
func (t tenantAPI) own(ctx context.Context, id string) (market.JobRecord, error) {
	who, err := callerOwner(ctx)
	if err != nil {
		return market.JobRecord{}, err
	}
	rec, err := t.Node.Job(ctx, id)
	if err != nil {
		return market.JobRecord{}, err
	}
	if rec.Spec.Owner != string(who) {
		return market.JobRecord{}, forbidden(id, who)
	}
	return rec, nil
}

// Submit implements api.Backend: a bare spec, signed for an owner-token
// caller or refused.
func (t tenantAPI) Submit(ctx context.Context, spec market.JobSpec) (market.JobRecord, error) {
	return t.SubmitSigned(ctx, market.SignedSpec{Spec: spec})
}

// SubmitSigned implements api.SignedSubmitter.
func (t tenantAPI) SubmitSigned(ctx context.Context, s market.SignedSpec) (market.JobRecord, error) {
	t.stages.API(ctx)
	if !s.Signed() {
		// Nobody vouches for the spec: the caller is no owner this node
		// holds the key of, so it is forbidden rather than malformed.
		c, _ := api.CallerFrom(ctx)
		if c.Key == nil {
			return market.JobRecord{}, &api.HTTPError{Status: http.StatusForbidden, Field: "signature",
				Err: fmt.Errorf("%w: sign it with the owner's key (gpumesh submit does), or submit with an owner token", market.ErrUnsigned)}
		}
		if err := completeSpec(&s.Spec); err != nil {
			return market.JobRecord{}, err
		}
		signed, err := market.SignSpec(*c.Key, t.mesh.Network(), s.Spec, time.Now())
		if err != nil {
			return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "owner", Err: err}
		}
		s = signed
	}
	return t.submitSigned(ctx, s)
}

// Jobs implements api.Backend: the caller's jobs wherever they are
// coordinated (ListJobs); none for a caller that is no owner (the admin's
// dashboard lists none).
func (t tenantAPI) Jobs(ctx context.Context) ([]market.JobRecord, error) {
	list, err := t.ListJobs(ctx)
	return list.Jobs, err
}

// Job implements api.Backend for the job's owner.
func (t tenantAPI) Job(ctx context.Context, id string) (market.JobRecord, error) {
	return t.own(ctx, id)
}

// Cancel implements api.Backend for the job's owner.
func (t tenantAPI) Cancel(ctx context.Context, id string) (market.JobRecord, error) {
	if _, err := t.own(ctx, id); err != nil {
		return market.JobRecord{}, err
	}
	return t.Node.Cancel(ctx, id)
}

// Scale implements api.Backend for the job's owner.
func (t tenantAPI) Scale(ctx context.Context, id string, cards int) (market.JobRecord, error) {
	if _, err := t.own(ctx, id); err != nil {
		return market.JobRecord{}, err
	}
	return t.Node.Scale(ctx, id, cards)
}

// Logs implements api.Backend for the job's owner.
func (t tenantAPI) Logs(ctx context.Context, req api.LogRequest, w io.Writer, flush func()) error {
	if _, err := t.own(ctx, req.Job); err != nil {
		return err
	}
	return t.Node.Logs(ctx, req, w, flush)
}

// Checkpoint implements api.CheckpointReader for the job's owner: it
// brings the share's newest checkpoint here from a holder that lets it
// (kindCheckpointOwner, with the owner's signed request), and streams it
// as a gzip-compressed tar archive.
func (t tenantAPI) Checkpoint(ctx context.Context, req api.CheckpointRequest, w io.Writer) error {
	rec, err := t.own(ctx, req.Job)
	if err != nil {
		return err
	}
	cp := newestCheckpoint(rec, req.Share)
	if cp == nil {
		return &api.HTTPError{Status: http.StatusNotFound, Field: "share", Err: fmt.Errorf("job %s share %d has no checkpoint yet", req.Job, req.Share)}
	}
	m, err := blob.ParseDigest(cp.Manifest)
	if err != nil {
		return err
	}
	lease := fmt.Sprintf("download/%s/%d/%d", req.Job, req.Share, time.Now().UnixNano())
	if err := t.blobs.SetLease(blob.Lease{ID: lease, Manifests: []blob.Digest{m}, Expires: time.Now().Add(grantTTL)}); err != nil {
		return err
	}
	defer t.blobs.DeleteLease(lease)
	if t.holdsWhole(m) != nil {
		if err := t.fetchForOwner(ctx, rec, cp, m, lease); err != nil {
			return api.Errorf(http.StatusBadGateway, "checkpoint of job %s share %d: %v", req.Job, req.Share, err)
		}
	}
	tmp, err := os.MkdirTemp(t.cfg.DataDir, ".download-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "checkpoint")
	if err := t.blobs.Restore(ctx, m, dir); err != nil {
		return err
	}
	return client.WriteTarGz(w, dir)
}

// fetchForOwner fetches a checkpoint from the first of its holders that
// lets this node read it for the owner.
func (t tenantAPI) fetchForOwner(ctx context.Context, rec market.JobRecord, cp *market.Checkpoint, m blob.Digest, lease string) error {
	q := checkpointQuery{Job: rec.ID, Share: cp.Share}
	var last error = errors.New("no holder answered")
	for _, h := range cp.Holders {
		pid, err := peer.Decode(h)
		if err != nil || pid == t.id {
			continue
		}
		data, _ := json.Marshal(q)
		data = t.sealCall(ctx, kindCheckpointOwner, data, q)
		granted := false
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		t.dialable(pid)
		err = t.direct.Call(cctx, pid, kindCheckpointOwner, data, func(msg gossip.Message) error {
			var g checkpointGrant
			if msg.Kind != kindCheckpointGrant || json.Unmarshal(msg.Data, &g) != nil || g.Manifest != cp.Manifest {
				return fmt.Errorf("unexpected %q frame in a checkpoint reply", msg.Kind)
			}
			granted = true
			return nil
		})
		cancel()
		if err != nil {
			if err = fromCallError(err); refusedOwner(err) {
				return err
			}
			last = err
			continue
		}
		if !granted {
			last = fmt.Errorf("%s does not hold it whole", pid.ShortString())
			continue
		}
		if _, err := t.xfer.Fetch(ctx, m, []peer.ID{pid}, lease); err != nil {
			last = err
			continue
		}
		return nil
	}
	return last
}
