package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Payloads. A job's payload is a tree in the content store (blobs.go),
// named in its signed spec by its manifest's digest (market.PayloadRef),
// so a share runs only the bytes its owner signed (DESIGN invariant 6).
//
//  1. The owner's machine computes the manifest (blob.Scan) and puts it
//     to its node (PUT /v1/payloads/MANIFEST), which keeps it under the
//     owner's upload lease for uploadTTL and answers which chunks it
//     lacks; the owner puts only those, each checked against its digest
//     as it is written. A dataset sent before moves nothing but its
//     manifest.
//  2. The job is submitted through that node (its spec's payload.holder).
//     Before it hands the spec to the job's coordinator it has the
//     coordinator hold the payload (payload.hold, with the signed spec),
//     then pushes it: the coordinator fetches the chunks it lacks. So an
//     acknowledged job's payload is on two nodes, the one it came through
//     and its coordinator; each keeps it under the lease
//     payload/OWNER/JOB/NANOS until the job ended Config.KeepOutputs ago.
//  3. A runner fetches the payload from every node that may hold it at
//     once (the holder, the job's coordinator group), restores it into
//     the attempt's work directory before the command starts, and lets
//     its own copy go (the chunks stay as a cache). A holder serves it to
//     the runners of the job's live attempts and to its coordinator
//     group (blobAuth).
//
// Uploads need an owner: an owner token, or a request signed with the
// owner's key (403 without; 401 for a wrong token or signature).
// Quotas: a payload over Config.MaxPayload is refused (413); what a node
// keeps for one owner (the distinct payloads of its upload and payload
// leases) may not pass Config.OwnerQuota (413, naming the quota), nor the
// store its limit (507). The coordinator's successors do not fetch the payload: when
// both the node it came through and its first coordinator are gone, a
// new attempt cannot start, and says so.

const (
	kindPayloadHold = "payload.hold" // payloadHold → ack: the coordinator will fetch the payload when pushed
	// uploadTTL is how long a node keeps an uploaded payload that no job
	// names.
	uploadTTL = time.Hour
)

// payloadHold asks a job's coordinator to hold its payload before the
// job is submitted to it: the owner's signed spec says which, and whose.
type payloadHold struct {
	Spec      market.JobSpec       `json:"spec"`
	Signature market.SpecSignature `json:"signature"`
}

// uploadLease names the lease that keeps an owner's upload of manifest m.
func uploadLease(o owner.ID, m blob.Digest) string {
	return "upload/" + string(o) + "/" + m.Hex()
}

// payloadLeasePrefix starts the name of the lease that keeps a job's
// payload on a holder; payloadLease makes one.
func payloadLeasePrefix(o, job string) string { return "payload/" + o + "/" + job + "/" }

func payloadLease(o, job string, at time.Time) string {
	return fmt.Sprintf("%s%020d", payloadLeasePrefix(o, job), at.UnixNano())
}

// leaseOwner returns the owner an upload or payload lease is kept for.
func leaseOwner(id string) (owner.ID, bool) {
	kind, rest, ok := strings.Cut(id, "/")
	if !ok || (kind != "upload" && kind != "payload") {
		return "", false
	}
	o, _, ok := strings.Cut(rest, "/")
	return owner.ID(o), ok
}

// manifestSizes caches the file size of the payload manifests the node
// counts against owners' quotas.
type manifestSizes struct {
	mu    sync.Mutex
	sizes map[blob.Digest]int64
}

func (c *manifestSizes) size(st *blob.Store, m blob.Digest) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sizes[m]; ok {
		return s
	}
	man, err := st.Manifest(m)
	if err != nil {
		return 0 // not held (yet): nothing to count
	}
	if c.sizes == nil || len(c.sizes) > 4096 {
		c.sizes = map[blob.Digest]int64{}
	}
	c.sizes[m] = man.Size()
	return c.sizes[m]
}

// ownerQuota is the most this node keeps of payloads for one owner.
func (n *Node) ownerQuota() int64 {
	if n.cfg.OwnerQuota > 0 {
		return n.cfg.OwnerQuota
	}
	if lim := n.blobs.Usage().Limit; lim > 0 {
		return lim / 2
	}
	return 0 // no limit
}

// ownerPayloadBytes is the size of the distinct payloads this node keeps
// for owner o (its live upload and payload leases), m left out.
func (n *Node) ownerPayloadBytes(o owner.ID, m blob.Digest) int64 {
	seen := map[blob.Digest]bool{m: true}
	now := time.Now()
	var sum int64
	for _, l := range n.blobs.Leases() {
		if who, ok := leaseOwner(l.ID); !ok || who != o || (!l.Expires.IsZero() && now.After(l.Expires)) {
			continue
		}
		for _, d := range l.Manifests {
			if !seen[d] {
				seen[d] = true
				sum += n.sizes.size(n.blobs, d)
			}
		}
	}
	return sum
}

// admitPayload checks that this node may keep a payload of size bytes
// (manifest m) for owner o: 413 over Config.MaxPayload, and 413 past the
// owner's quota (naming it).
func (n *Node) admitPayload(o owner.ID, m blob.Digest, size int64) error {
	if max := n.cfg.MaxPayload; max > 0 && size > max {
		return &api.HTTPError{Status: http.StatusRequestEntityTooLarge, Field: "payload",
			Err: fmt.Errorf("payload of %s: this node takes payloads of at most %s (gpumesh node --max-payload)", text.Bytes(size), text.Bytes(max))}
	}
	q := n.ownerQuota()
	if q <= 0 {
		return nil
	}
	if used := n.ownerPayloadBytes(o, m); used+size > q {
		return &api.HTTPError{Status: http.StatusRequestEntityTooLarge, Field: "payload",
			Err: fmt.Errorf("payload of %s: over the owner's quota on this node: owner %s keeps %s of payloads here, and may keep %s (gpumesh node --owner-quota); a job's payload goes %s after the job ends",
				text.Bytes(size), o.Short(), text.Bytes(used), text.Bytes(q), n.cfg.KeepOutputs)}
	}
	return nil
}

// storeFull maps a store quota error to a 507.
func storeFull(what string, err error) error {
	if errors.Is(err, blob.ErrQuota) {
		return &api.HTTPError{Status: http.StatusInsufficientStorage, Field: "payload", Err: fmt.Errorf("%s: %w", what, err)}
	}
	return err
}

// uploader is the owner a payload upload authenticated as: 403 for a
// request without one (a wrong token or signature never gets here: 401).
func uploader(ctx context.Context) (owner.ID, error) {
	c, _ := api.CallerFrom(ctx)
	if c.Owner == "" {
		return "", &api.HTTPError{Status: http.StatusForbidden, Err: errUploadOwner}
	}
	return c.Owner, nil
}

// errUploadOwner is the refusal of an upload that names no owner.
var errUploadOwner = errors.New("a payload upload needs the owner's key: sign it (header " + owner.Header +
	"; gpumesh submit --payload does, with --key or $GPUMESH_KEY) or use an owner token; nothing was kept")

// PutPayloadManifest implements api.PayloadStore for the calling owner.
func (t tenantAPI) PutPayloadManifest(ctx context.Context, body []byte) (api.PayloadUpload, error) {
	who, err := uploader(ctx)
	if err != nil {
		return api.PayloadUpload{}, err
	}
	man, err := blob.DecodeManifest(body)
	if err != nil {
		return api.PayloadUpload{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "payload", Err: err}
	}
	m := blob.Sum(body)
	if err := t.admitPayload(who, m, man.Size()); err != nil {
		return api.PayloadUpload{}, err
	}
	expires := time.Now().Add(uploadTTL)
	up := api.PayloadUpload{Ref: market.PayloadRef{Manifest: m.String(), Size: man.Size(), Holder: t.id.String()}, Missing: []string{}, Expires: expires}
	for _, c := range man.Chunks() {
		if !t.blobs.Has(blob.KindChunk, c.Digest) {
			up.Missing = append(up.Missing, c.Digest.String())
			up.MissingBytes += c.Size
		}
	}
	// Refused before anything is kept: a refusal changes nothing.
	if err := t.blobs.Fits(up.MissingBytes + int64(len(body))); err != nil {
		return api.PayloadUpload{}, storeFull(fmt.Sprintf("payload of %s, %s of it not held here", text.Bytes(man.Size()), text.Bytes(up.MissingBytes)), err)
	}
	lease := uploadLease(who, m)
	_, leaseErr := t.blobs.Lease(lease)
	if err := t.blobs.SetLease(blob.Lease{ID: lease, Manifests: []blob.Digest{m}, Expires: expires}); err != nil {
		return api.PayloadUpload{}, err
	}
	if err := t.putManifest(m, body); err != nil {
		if leaseErr != nil { // made now: let it go
			_ = t.blobs.DeleteLease(lease)
		}
		return api.PayloadUpload{}, storeFull("payload manifest", err)
	}
	t.log.Info("payload manifest taken", "owner", who.Short(), "manifest", m.Short(), "bytes", man.Size(), "missing_bytes", up.MissingBytes)
	return up, nil
}

// putManifest stores a manifest's encoding under its digest.
func (n *Node) putManifest(m blob.Digest, body []byte) error {
	w, err := n.blobs.Writer(blob.KindManifest, m, int64(len(body)))
	if errors.Is(err, blob.ErrExists) {
		return nil
	}
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.Commit()
}

// PutPayloadChunk implements api.PayloadStore for the calling owner.
func (t tenantAPI) PutPayloadChunk(ctx context.Context, manifest, chunk string, body io.Reader) error {
	who, err := uploader(ctx)
	if err != nil {
		return err
	}
	m, err := blob.ParseDigest(manifest)
	if err != nil {
		return api.Errorf(http.StatusBadRequest, "payload manifest: %v", err)
	}
	c, err := blob.ParseDigest(chunk)
	if err != nil {
		return api.Errorf(http.StatusBadRequest, "chunk: %v", err)
	}
	l, err := t.blobs.Lease(uploadLease(who, m))
	if err != nil || time.Now().After(l.Expires) {
		return api.Errorf(http.StatusNotFound, "payload %s: no upload of it by owner %s here (or it expired): put its manifest first", m.Short(), who.Short())
	}
	size, ok := t.uploads.chunkSize(t.blobs, m, c)
	if !ok {
		return api.Errorf(http.StatusNotFound, "payload %s lists no chunk %s", m.Short(), c.Short())
	}
	w, err := t.blobs.Writer(blob.KindChunk, c, size)
	if errors.Is(err, blob.ErrExists) {
		_, _ = io.Copy(io.Discard, body) // held already: nothing to do
		return nil
	}
	if err != nil {
		return storeFull("chunk "+c.Short(), err)
	}
	defer w.Close()
	if _, err := io.Copy(w, body); err != nil {
		var se *blob.SizeError
		if errors.As(err, &se) {
			return api.Errorf(http.StatusBadRequest, "chunk %s: more than its %d bytes sent", c.Short(), size)
		}
		return err
	}
	if err := w.Commit(); err != nil {
		var se *blob.SizeError
		if errors.Is(err, blob.ErrDigestMismatch) || errors.As(err, &se) {
			return api.Errorf(http.StatusBadRequest, "chunk %s refused: %v", c.Short(), err)
		}
		return err
	}
	return nil
}

// uploads caches the chunk sizes of the manifests being uploaded, so
// that each chunk's request does not decode its manifest again.
type uploads struct {
	mu     sync.Mutex
	chunks map[blob.Digest]map[blob.Digest]int64
}

// chunkSize is the size of chunk c of stored manifest m; false when m
// lists no such chunk.
func (u *uploads) chunkSize(st *blob.Store, m, c blob.Digest) (int64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	sizes, ok := u.chunks[m]
	if !ok {
		man, err := st.Manifest(m)
		if err != nil {
			return 0, false
		}
		sizes = map[blob.Digest]int64{}
		for _, r := range man.Chunks() {
			sizes[r.Digest] = r.Size
		}
		if u.chunks == nil || len(u.chunks) >= 16 {
			u.chunks = map[blob.Digest]map[blob.Digest]int64{} // a few uploads at a time
		}
		u.chunks[m] = sizes
	}
	s, ok := sizes[c]
	return s, ok
}

// keepPayload makes this node, the one a job is submitted through, keep
// its payload for the job: it must be the spec's holder and hold the
// tree whole (uploaded by the owner).
func (n *Node) keepPayload(spec *market.JobSpec) (blob.Digest, error) {
	p := spec.Payload
	m, err := blob.ParseDigest(p.Manifest)
	if err != nil {
		return m, &api.HTTPError{Status: http.StatusBadRequest, Field: "payload.manifest", Err: err}
	}
	if p.Holder != n.self {
		return m, &api.HTTPError{Status: http.StatusBadRequest, Field: "payload.holder",
			Err: fmt.Errorf("the payload was uploaded to %s: submit job %s through that node", shortID(p.Holder), spec.ID)}
	}
	if err := n.holdsWhole(m); err != nil {
		return m, &api.HTTPError{Status: http.StatusBadRequest, Field: "payload",
			Err: fmt.Errorf("payload %s is not whole on this node (%v): upload it first (gpumesh submit --payload does)", m.Short(), err)}
	}
	return m, n.leasePayload(spec.Owner, spec.ID, m)
}

// leasePayload keeps manifest m for a job under its payload lease, made
// if the job has none here.
func (n *Node) leasePayload(o, job string, m blob.Digest) error {
	if id := n.payloadLeaseOf(o, job); id != "" {
		return n.blobs.AddToLease(id, []blob.Digest{m}, nil)
	}
	return n.blobs.SetLease(blob.Lease{ID: payloadLease(o, job, time.Now()), Manifests: []blob.Digest{m}})
}

// payloadLeaseOf returns the lease that keeps a job's payload here, ""
// if none.
func (n *Node) payloadLeaseOf(o, job string) string {
	prefix := payloadLeasePrefix(o, job)
	for _, l := range n.blobs.Leases() {
		if strings.HasPrefix(l.ID, prefix) {
			return l.ID
		}
	}
	return ""
}

// handPayload has coordinator c hold a signed job's payload, then pushes
// it there: c fetches from this node the chunks it lacks. A refusal (c's
// quota, its limit) is an *api.HTTPError, the caller's answer.
func (n *Node) handPayload(ctx context.Context, c peer.ID, signed market.SignedSpec, m blob.Digest) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := n.jsonCall(cctx, c, kindPayloadHold, payloadHold{Spec: signed.Spec, Signature: signed.Signature})
	cancel()
	if err != nil {
		return err
	}
	st, err := n.xfer.Push(ctx, c, m)
	if err != nil {
		return fmt.Errorf("pushing the payload to %s: %w", c.ShortString(), err)
	}
	n.log.Info("payload handed to the coordinator", "job", signed.Spec.ID, "coordinator", c.ShortString(),
		"manifest", m.Short(), "fetched_bytes", st.Bytes)
	return nil
}

// serveHoldPayload is the coordinator's side of payload.hold: for an
// owner's validly signed spec it agrees to fetch the payload from the
// node that asks (the spec's holder), within its limits.
func (n *Node) serveHoldPayload(from peer.ID, req payloadHold) error {
	signed := market.SignedSpec{Spec: req.Spec, Signature: req.Signature}
	spec := &signed.Spec
	if err := checkSpec(spec); err != nil {
		return err
	}
	if err := n.checkSubmission(&signed, time.Now()); err != nil {
		return err
	}
	if spec.Payload == nil {
		return api.Errorf(http.StatusBadRequest, "payload hold: job %s has no payload", spec.ID)
	}
	if spec.Payload.Holder != from.String() {
		return api.Errorf(http.StatusForbidden, "payload hold: job %s's payload is held by %s, not by the asker", spec.ID, shortID(spec.Payload.Holder))
	}
	m, err := blob.ParseDigest(spec.Payload.Manifest)
	if err != nil {
		return &api.HTTPError{Status: http.StatusBadRequest, Field: "payload.manifest", Err: err}
	}
	if err := n.admitPayload(owner.ID(spec.Owner), m, spec.Payload.Size); err != nil {
		return err
	}
	if err := n.blobs.Fits(spec.Payload.Size); err != nil && n.holdsWhole(m) != nil {
		return storeFull("payload of "+text.Bytes(spec.Payload.Size), err)
	}
	if err := n.leasePayload(spec.Owner, spec.ID, m); err != nil {
		return err
	}
	n.pushes.expect(from, m, n.payloadLeaseOf(spec.Owner, spec.ID), time.Now())
	return nil
}

// checkHeldPayload is the coordinator's check, before it takes a job,
// that it holds the job's payload whole under the job's lease.
func (n *Node) checkHeldPayload(spec *market.JobSpec) error {
	p := spec.Payload
	if p.Holder == n.self {
		_, err := n.keepPayload(spec)
		return err
	}
	m, err := blob.ParseDigest(p.Manifest)
	if err != nil {
		return &api.HTTPError{Status: http.StatusBadRequest, Field: "payload.manifest", Err: err}
	}
	if n.payloadLeaseOf(spec.Owner, spec.ID) == "" || n.holdsWhole(m) != nil {
		return api.Errorf(http.StatusConflict, "job %s: its payload %s is not held here: the node it was submitted through hands it over first (payload.hold)", spec.ID, m.Short())
	}
	return nil
}

// payloadInto returns the part of an attempt's Work hook that restores
// the job's payload into the work directory, nil for a job without one.
func (n *Node) payloadInto(e market.Execution) func(dir string) error {
	p := e.Exec.Payload
	if p == nil {
		return nil
	}
	return func(dir string) error {
		start := time.Now()
		if p.Path != "" {
			rel, err := market.WorkPath(p.Path)
			if err != nil {
				return fmt.Errorf("payload path: %w", err)
			}
			dir = filepath.Join(dir, filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				return fmt.Errorf("payload: %w", err)
			}
		}
		st, err := n.fetchPayload(e, p, dir)
		if err != nil {
			return fmt.Errorf("payload %s: %w", p.Manifest, err)
		}
		n.log.Info("payload restored", "job", e.Job, "share", e.Share, "epoch", e.Epoch, "bytes", p.Size,
			"fetched_bytes", st, "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
}

// fetchPayload brings a payload into the store from every node that may
// hold it, unless it is here, and restores it into dir. It returns the
// bytes it fetched.
func (n *Node) fetchPayload(e market.Execution, p *market.PayloadRef, dir string) (int64, error) {
	m, err := blob.ParseDigest(p.Manifest)
	if err != nil {
		return 0, err
	}
	lease := fmt.Sprintf("fetch/%s/%d/%d", e.Job, e.Share, e.Epoch)
	if err := n.blobs.SetLease(blob.Lease{ID: lease, Manifests: []blob.Digest{m}}); err != nil {
		return 0, err
	}
	defer n.blobs.DeleteLease(lease) // the chunks stay, as a cache
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	var fetched int64
	if n.holdsWhole(m) != nil {
		var holders []peer.ID
		if id, err := peer.Decode(p.Holder); err == nil {
			holders = append(holders, id)
		}
		if id, err := peer.Decode(e.Coordinator); err == nil {
			holders = append(holders, id)
		}
		for _, id := range n.coordinators(e.Job, n.cfg.Replicas+1) {
			if !slices.Contains(holders, id) {
				holders = append(holders, id)
			}
		}
		st, err := n.xfer.Fetch(ctx, m, holders, lease)
		if err != nil {
			return 0, err
		}
		fetched = st.Bytes
	}
	return fetched, n.blobs.Restore(ctx, m, dir)
}

// shortID shortens a peer ID for a message.
func shortID(s string) string {
	if id, err := peer.Decode(s); err == nil {
		return id.ShortString()
	}
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}
