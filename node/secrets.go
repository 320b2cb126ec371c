package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Secrets. A job's secrets (market.SecretsRef: the credentials of its
// object storage, a token its command needs) reach its runners only, never
// a record, a replica or gossip:
//
//  1. The owner gives the values to a node (POST /v1/secrets), which keeps
//     them in memory for uploadTTL and answers their names, their digest
//     (over the values and a random nonce, so that it says nothing of
//     them) and itself as their holder.
//  2. The job, whose signed spec names them, is submitted through that
//     node, which then keeps them for the job in its data dir
//     (secrets/JOB.json, mode 0600) until the job ended
//     Config.KeepOutputs ago.
//  3. A runner asks the holder for them (secrets.get) before the attempt
//     starts; the holder answers only the node the job's record places
//     that attempt on, over the peers' encrypted stream, and the runner
//     checks them against the digest. They become the attempt's
//     environment, and the runner's credentials for its inputs and
//     outputs.
//
// The supplier whose node runs the attempt can read them, as it can read
// everything the job has.

const (
	kindSecrets      = "secrets.get" // secretsRequest → heldSecrets
	kindSecretsReply = "secrets"
)

// secretsRequest asks a job's secrets' holder for them, for one attempt.
type secretsRequest struct {
	Job   string `json:"job"`
	Share int    `json:"share"`
	Epoch uint64 `json:"epoch"`
}

// heldSecrets are secrets as their holder keeps them and a runner gets
// them.
type heldSecrets struct {
	Owner  string            `json:"owner,omitempty"` // not sent to runners
	Nonce  []byte            `json:"nonce"`
	Values map[string]string `json:"values"`
}

// digest is what a spec's data.secrets.digest names: the SHA-256 of the
// nonce and the values (JSON, the names sorted).
func (h heldSecrets) digest() string {
	b, _ := json.Marshal(struct {
		Nonce  []byte            `json:"nonce"`
		Values map[string]string `json:"values"`
	}{h.Nonce, h.Values})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (h heldSecrets) names() []string {
	names := make([]string, 0, len(h.Values))
	for k := range h.Values {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// pendingSecrets are the secrets given to this node that no job names
// yet, by digest.
type pendingSecrets struct {
	mu sync.Mutex
	m  map[string]pendingSecret
}

type pendingSecret struct {
	held    heldSecrets
	expires time.Time
}

// maxPendingSecrets bounds what the node keeps of secrets no job names.
const maxPendingSecrets = 4096

func (p *pendingSecrets) put(h heldSecrets, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]pendingSecret{}
	}
	for d, s := range p.m {
		if now.After(s.expires) {
			delete(p.m, d)
		}
	}
	if len(p.m) >= maxPendingSecrets {
		return api.Errorf(http.StatusServiceUnavailable, "this node keeps %d sets of secrets that no job names yet: try again later", len(p.m))
	}
	p.m[h.digest()] = pendingSecret{held: h, expires: now.Add(uploadTTL)}
	return nil
}

func (p *pendingSecrets) get(digest string, o owner.ID, now time.Time) (heldSecrets, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.m[digest]
	if !ok || now.After(s.expires) || s.held.Owner != string(o) {
		return heldSecrets{}, false
	}
	return s.held, true
}

// PutSecrets implements api.SecretStore for the calling owner.
func (t tenantAPI) PutSecrets(ctx context.Context, values map[string]string) (market.SecretsRef, error) {
	c, _ := api.CallerFrom(ctx)
	if c.Owner == "" {
		return market.SecretsRef{}, &api.HTTPError{Status: http.StatusForbidden, Err: errors.New("secrets need the owner's key: sign the request (header " + owner.Header +
			"; gpumesh submit --secret does, with --key or $GPUMESH_KEY) or use an owner token; nothing was kept")}
	}
	if len(values) == 0 || len(values) > market.MaxSecrets {
		return market.SecretsRef{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "values", Err: fmt.Errorf("want 1 to %d secrets, got %d", market.MaxSecrets, len(values))}
	}
	for k, v := range values {
		if err := market.CheckSecretName(k); err != nil || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			why := "its value is not UTF-8 without NUL"
			if err != nil {
				why = err.Error()
			}
			return market.SecretsRef{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "values", Err: fmt.Errorf("secret %.64q: %s", k, why)}
		}
	}
	h := heldSecrets{Owner: string(c.Owner), Nonce: make([]byte, 32), Values: values}
	if _, err := rand.Read(h.Nonce); err != nil {
		return market.SecretsRef{}, err
	}
	if err := t.secrets.put(h, time.Now()); err != nil {
		return market.SecretsRef{}, err
	}
	return market.SecretsRef{Names: h.names(), Digest: h.digest(), Holder: t.id.String()}, nil
}

// secretsFile is where this node keeps a job's secrets.
func (n *Node) secretsFile(job string) string {
	return filepath.Join(n.cfg.DataDir, "secrets", job+".json")
}

// keepSecrets makes this node, the one a job is submitted through, keep
// its secrets for it: it must be their holder and hold them for the
// job's owner.
func (n *Node) keepSecrets(spec *market.JobSpec) error {
	ref := spec.Data.Secrets
	if ref.Holder != n.self {
		return &api.HTTPError{Status: http.StatusBadRequest, Field: "data.secrets.holder",
			Err: fmt.Errorf("the secrets were given to %s: submit job %s through that node", shortID(ref.Holder), spec.ID)}
	}
	if held, err := n.loadSecrets(spec.ID); err == nil && held.digest() == ref.Digest {
		return nil // submitted again
	}
	h, ok := n.secrets.get(ref.Digest, owner.ID(spec.Owner), time.Now())
	if !ok || !slices.Equal(h.names(), ref.Names) {
		return &api.HTTPError{Status: http.StatusBadRequest, Field: "data.secrets",
			Err: fmt.Errorf("secrets %s are not on this node for owner %s (given over an hour ago, or never): give them again (gpumesh submit --secret does)", ref.Digest, owner.ID(spec.Owner).Short())}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(n.secretsFile(spec.ID)), 0o700); err != nil {
		return err
	}
	tmp := n.secretsFile(spec.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, n.secretsFile(spec.ID))
}

func (n *Node) loadSecrets(job string) (heldSecrets, error) {
	var h heldSecrets
	b, err := os.ReadFile(n.secretsFile(job))
	if err != nil {
		return h, err
	}
	return h, json.Unmarshal(b, &h)
}

// serveSecrets answers kindSecrets: the secrets of the job, to the node
// its record places the attempt on, while the attempt is live.
func (n *Node) serveSecrets(ctx context.Context, from peer.ID, req secretsRequest, reply func(string, []byte) error) error {
	h, err := n.loadSecrets(req.Job)
	if err != nil {
		return api.Errorf(http.StatusNotFound, "this node holds no secrets of job %s", req.Job)
	}
	rec, ok := n.view.Job(req.Job)
	if p, placed := attemptOn(rec, req.Share, req.Epoch); !ok || !placed || p.Node != from.String() {
		lctx, cancel := context.WithTimeout(ctx, callTimeout)
		rec, err = n.Job(lctx, req.Job) // the coordinator's word
		cancel()
		if err != nil {
			return fmt.Errorf("job %s: %w", req.Job, err)
		}
	}
	p, placed := attemptOn(rec, req.Share, req.Epoch)
	switch {
	case !placed || p.Node != from.String() || !p.State.Live():
		return api.Errorf(http.StatusForbidden, "job %s share %d epoch %d: no live attempt of it runs on %s", req.Job, req.Share, req.Epoch, from.ShortString())
	case rec.Spec.Owner != h.Owner || rec.Spec.Data == nil || rec.Spec.Data.Secrets == nil || rec.Spec.Data.Secrets.Digest != h.digest():
		return api.Errorf(http.StatusForbidden, "job %s names other secrets than this node holds for it", req.Job)
	}
	h.Owner = ""
	b, _ := json.Marshal(h)
	return reply(kindSecretsReply, b)
}

// attemptOn finds the placement of one attempt in a record.
func attemptOn(rec market.JobRecord, share int, epoch uint64) (market.Placement, bool) {
	for _, p := range rec.Placements {
		if p.Share == share && p.Epoch == epoch {
			return p, true
		}
	}
	return market.Placement{}, false
}

// fetchSecrets gets an attempt's secrets from their holder (nil for a job
// without), checked against the digest its spec names.
func (n *Node) fetchSecrets(e market.Execution) (map[string]string, error) {
	if e.Exec.Data == nil || e.Exec.Data.Secrets == nil {
		return nil, nil
	}
	ref := e.Exec.Data.Secrets
	var h heldSecrets
	if ref.Holder == n.self {
		var err error
		if h, err = n.loadSecrets(e.Job); err != nil {
			return nil, fmt.Errorf("secrets: this node, their holder, has none of job %s", e.Job)
		}
	} else {
		pid, err := peer.Decode(ref.Holder)
		if err != nil {
			return nil, fmt.Errorf("secrets: holder %q: %w", shortID(ref.Holder), err)
		}
		data, _ := json.Marshal(secretsRequest{Job: e.Job, Share: e.Share, Epoch: e.Epoch})
		ctx, cancel := context.WithTimeout(n.ctx, 2*callTimeout)
		defer cancel()
		n.dialable(pid)
		got := false
		err = n.direct.Call(ctx, pid, kindSecrets, data, func(m gossip.Message) error {
			if m.Kind != kindSecretsReply || json.Unmarshal(m.Data, &h) != nil {
				return fmt.Errorf("unexpected %q frame in a secrets reply", m.Kind)
			}
			got = true
			return nil
		})
		if err == nil && !got {
			err = errors.New("no answer")
		}
		if err != nil {
			return nil, fmt.Errorf("secrets from their holder %s: %w", pid.ShortString(), fromCallError(err))
		}
	}
	if h.digest() != ref.Digest || !slices.Equal(h.names(), ref.Names) {
		return nil, fmt.Errorf("secrets from %s are not those the owner signed (digest %s)", shortID(ref.Holder), ref.Digest)
	}
	return h.Values, nil
}

// sweepSecrets drops the secrets of jobs that ended more than
// Config.KeepOutputs ago, or that no one has a record of and that this
// node has kept that long.
func (n *Node) sweepSecrets(now time.Time) {
	dir := filepath.Join(n.cfg.DataDir, "secrets")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range entries {
		job, ok := strings.CutSuffix(de.Name(), ".json")
		info, ierr := de.Info()
		if !ok || ierr != nil {
			continue
		}
		rec, known := n.view.Job(job)
		if !known {
			ctx, cancel := context.WithTimeout(n.ctx, callTimeout)
			r, err := n.Job(ctx, job)
			cancel()
			switch {
			case err == nil:
				rec, known = r, true
			case !isNotFound(err):
				continue // not answered: ask again next time
			}
		}
		stale := (!known && now.Sub(info.ModTime()) > n.cfg.KeepOutputs) || (known && jobstate.Ended(rec) && now.Sub(rec.EndedAt) > n.cfg.KeepOutputs)
		if stale {
			_ = os.Remove(filepath.Join(dir, de.Name()))
		}
	}
}
