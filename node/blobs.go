package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/blob/transfer"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// The content store. Every node keeps one (node/blob, under
// DataDir/blobs) and serves it to its peers over libp2p streams
// (node/blob/transfer). Checkpoints live there now (checkpoint.go); the
// node decides what a peer may read or push (blobAuth) and which leases
// keep what (this file's janitor).
//
// Leases are named for what they keep:
//
//	ckpt/JOB/SHARE/NANOS        a checkpoint of a share, on its runner and its holders
//	restore/JOB/SHARE/EPOCH     a checkpoint being restored into an attempt
//	upload/OWNER/MANIFEST       a payload an owner uploaded, for an hour (payloads.go)
//	payload/OWNER/JOB/NANOS     a job's payload, on the node it came through and its coordinator
//	fetch/JOB/SHARE/EPOCH       a payload being restored into an attempt
//
// A share keeps the newest market.Config.CheckpointKeep of its checkpoint
// leases on each node; the janitor drops those of jobs that ended more
// than Config.KeepOutputs ago, or that the node no longer knows, and the
// payload leases of jobs that ended as long ago (asking the job's
// coordinator when the node holds no record of it).

// blobProtocol is the stream protocol of the store's transfers.
func blobProtocol(network string) protocol.ID {
	return protocol.ID("/gpumesh/" + network + "/blob/1")
}

// openBlobs opens the node's content store and its transfer service.
func (n *Node) openBlobs() error {
	st, err := blob.Open(blob.Config{Dir: filepath.Join(n.cfg.DataDir, "blobs"), Limit: n.cfg.StoreMax, Logger: n.log})
	if err != nil {
		return fmt.Errorf("node: content store: %w", err)
	}
	svc, err := transfer.New(n.mesh.Host(), transfer.Config{
		Protocol: blobProtocol(n.mesh.Network()),
		Store:    st,
		Auth:     blobAuth{n},
		Logger:   n.log,
	})
	if err != nil {
		st.Close()
		return fmt.Errorf("node: content transfers: %w", err)
	}
	n.blobs, n.xfer = st, svc
	for _, l := range st.Leases() {
		if strings.HasPrefix(l.ID, "fetch/") { // no fetch is in flight at start
			_ = st.DeleteLease(l.ID)
		}
	}
	return nil
}

// closeBlobs stops the transfers, then closes the store.
func (n *Node) closeBlobs() {
	if n.xfer != nil {
		n.xfer.Close()
	}
	if n.blobs != nil {
		n.blobs.Close()
	}
}

// pushes are the checkpoints this node agreed to hold, by the runner that
// will push each and its manifest: the lease that keeps it.
type pushes struct {
	mu sync.Mutex
	by map[pushKey]pendingPush
}

type pushKey struct {
	from     peer.ID
	manifest blob.Digest
}

type pendingPush struct {
	lease string
	until time.Time
}

// pushWait is how long an agreed push may take to begin.
const pushWait = 2 * time.Minute

func (p *pushes) expect(from peer.ID, m blob.Digest, lease string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by == nil {
		p.by = map[pushKey]pendingPush{}
	}
	for k, v := range p.by {
		if now.After(v.until) {
			delete(p.by, k)
		}
	}
	p.by[pushKey{from, m}] = pendingPush{lease: lease, until: now.Add(pushWait)}
}

func (p *pushes) take(from peer.ID, m blob.Digest, now time.Time) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.by[pushKey{from, m}]
	if !ok || now.After(v.until) {
		return "", false
	}
	delete(p.by, pushKey{from, m})
	return v.lease, true
}

// grants are short-lived reads this node allows a peer that proved it
// acts for a job's owner (tenants.go: an owner's download through another
// node).
type grants struct {
	mu sync.Mutex
	by map[pushKey]time.Time
}

func (g *grants) allow(p peer.ID, m blob.Digest, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.by == nil {
		g.by = map[pushKey]time.Time{}
	}
	g.by[pushKey{p, m}] = until
}

func (g *grants) allowed(p peer.ID, m blob.Digest, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.by[pushKey{p, m}]
	if ok && now.After(until) {
		delete(g.by, pushKey{p, m})
		return false
	}
	return ok
}

// blobAuth decides what peers may do with this node's store: read a
// checkpoint or payload of a job if they run one of its shares (a
// restore), hold its record or may (its coordinator group), or were
// granted it for the job's owner; push a checkpoint or payload this node
// agreed to hold.
type blobAuth struct{ n *Node }

var _ transfer.Authorizer = blobAuth{}

// AllowRead implements transfer.Authorizer.
func (a blobAuth) AllowRead(ctx context.Context, p peer.ID, m blob.Digest) error {
	n := a.n
	if n.grants.allowed(p, m, time.Now()) {
		return nil
	}
	if c := n.layerAuth.Load(); c != nil && c.IsLayerBlob(m) {
		return nil // an image layer: any member that names it (images.go)
	}
	kind, job, ok := n.manifestJob(m)
	if !ok {
		return fmt.Errorf("%s is not a checkpoint or payload this node serves", m.Short())
	}
	rec, ok := n.view.Job(job)
	if !ok && kind == "payload" {
		// The node a job was submitted through holds no record of it
		// unless it is of the job's group: ask the coordinator.
		lctx, cancel := context.WithTimeout(ctx, callTimeout)
		r, err := n.Job(lctx, job)
		cancel()
		rec, ok = r, err == nil
	}
	if !ok {
		return fmt.Errorf("%s %s: job %s is not known here", kind, m.Short(), job)
	}
	who := p.String()
	if rec.Coordinator == who {
		return nil
	}
	for _, pl := range rec.Placements {
		if pl.Node == who && (pl.State.Live() || pl.State == market.PlacementExited) {
			return nil
		}
	}
	if slices.Contains(n.coordinators(job, n.cfg.Replicas+1), p) {
		return nil
	}
	return fmt.Errorf("%s runs no share of job %s and holds no record of it", p.ShortString(), job)
}

// AllowPush implements transfer.Authorizer.
func (a blobAuth) AllowPush(ctx context.Context, p peer.ID, m blob.Digest) (string, error) {
	lease, ok := a.n.pushes.take(p, m, time.Now())
	if !ok {
		return "", errors.New("no hold of this manifest was agreed")
	}
	return lease, nil
}

// manifestJob finds the job a stored checkpoint or payload manifest
// belongs to, from the lease that keeps it: its kind ("checkpoint" or
// "payload") and the job.
func (n *Node) manifestJob(m blob.Digest) (kind, job string, ok bool) {
	for _, l := range n.blobs.Leases() {
		if !slices.Contains(l.Manifests, m) {
			continue
		}
		if kind, job, ok := leaseJob(l.ID); ok && kind != "fetch" {
			return kind, job, true
		}
	}
	return "", "", false
}

// leaseJob reads the kind of a job's lease and the job from its name:
// "checkpoint" (ckpt/, restore/), "payload" or "fetch".
func leaseJob(id string) (kind, job string, ok bool) {
	parts := strings.Split(id, "/")
	switch {
	case len(parts) >= 3 && (parts[0] == "ckpt" || parts[0] == "restore"):
		return "checkpoint", parts[1], true
	case len(parts) >= 3 && parts[0] == "fetch":
		return "fetch", parts[1], true
	case len(parts) == 4 && parts[0] == "payload":
		return "payload", parts[2], true
	}
	return "", "", false
}

// checkpointLease names the lease of one checkpoint of a share, newest
// last in name order.
func checkpointLease(job string, share int, at time.Time) string {
	return fmt.Sprintf("ckpt/%s/%d/%020d", job, share, at.UnixNano())
}

// keepNewestCheckpoints drops a share's checkpoint leases beyond the
// newest keep on this node.
func (n *Node) keepNewestCheckpoints(job string, share int, keep int) {
	prefix := fmt.Sprintf("ckpt/%s/%d/", job, share)
	var ids []string
	for _, l := range n.blobs.Leases() {
		if strings.HasPrefix(l.ID, prefix) {
			ids = append(ids, l.ID)
		}
	}
	slices.Sort(ids)
	for _, id := range ids[:max(0, len(ids)-keep)] {
		if err := n.blobs.DeleteLease(id); err != nil {
			n.log.Debug("cannot drop an old checkpoint's lease", "lease", id, "err", err)
		}
	}
}

// janitorInterval is how often leases of ended jobs are looked at.
const janitorInterval = time.Minute

// blobJanitor drops, every janitorInterval, the checkpoint and payload
// leases of jobs that ended more than Config.KeepOutputs ago, and of jobs
// no one has a record of that are older than that.
func (n *Node) blobJanitor() {
	defer n.wg.Done()
	t := time.NewTicker(janitorInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			n.sweepLeases(now)
			n.sweepSecrets(now)
		}
	}
}

func (n *Node) sweepLeases(now time.Time) {
	for _, l := range n.blobs.Leases() {
		if !l.Expires.IsZero() && now.After(l.Expires) {
			_ = n.blobs.DeleteLease(l.ID) // it keeps nothing any more
			continue
		}
		kind, job, ok := leaseJob(l.ID)
		if !ok || kind == "fetch" {
			continue
		}
		rec, known := n.view.Job(job)
		if !known && kind == "payload" && now.Sub(leaseTime(l.ID)) > janitorInterval {
			// The node a job came through may hold no record of it.
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
		var stale bool
		switch {
		case strings.HasPrefix(l.ID, "restore/"):
			stale = !known || jobstate.Ended(rec) // a restore that never finished
		case known && jobstate.Ended(rec):
			stale = now.Sub(rec.EndedAt) > n.cfg.KeepOutputs
		case !known:
			stale = now.Sub(leaseTime(l.ID)) > n.cfg.KeepOutputs
		}
		if stale {
			if err := n.blobs.DeleteLease(l.ID); err != nil {
				n.log.Debug("cannot drop a lease", "lease", l.ID, "err", err)
			}
		}
	}
}

// leaseTime reads the time a checkpoint lease's name carries (zero if
// none).
func leaseTime(id string) time.Time {
	i := strings.LastIndexByte(id, '/')
	var nanos int64
	if _, err := fmt.Sscanf(id[i+1:], "%d", &nanos); err != nil {
		return time.Time{}
	}
	return time.Unix(0, nanos)
}

// liveMember reports whether membership sees p alive.
func (n *Node) liveMember(p peer.ID) bool {
	m, ok := n.mesh.Member(p)
	return ok && m.State == mesh.StateAlive
}
