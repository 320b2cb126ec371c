package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Outputs and gpumesh cp. When an attempt ends, its runner stores what
// it left in its working directory (blob.Put: the chunks of a restored
// payload are there already, so only what the job wrote is new) under
// the lease outputs/JOB/SHARE/EPOCH, which expires Config.KeepOutputs
// later, and names the tree's manifest in its end report: the
// placement's Outputs in the record.
//
// GET /v1/jobs/{id}/files?path=P&share=N on any node copies what P names
// in a share's working directory to its owner: the node asks the share's
// runner (job.files, with the owner's signed request), which stores that
// part of the running attempt's working directory — or takes it from the
// outputs it keeps, once no attempt of the share runs — under a lease of
// grantTTL and lets the asking node fetch it (node/blob/transfer); the
// node then streams it from its own store as a tar archive.

const (
	kindFiles      = "job.files"   // filesRequest → filesGrant: the runner lets the caller fetch it
	kindFilesGrant = "files.grant" // the reply
)

// filesRequest names a file or directory in the working directory of one
// attempt of a share, for its owner.
type filesRequest struct {
	Job   string `json:"job"`
	Share int    `json:"share"`
	Epoch uint64 `json:"epoch"`
	// Path is relative to the working directory, slash-separated; "."
	// is the whole of it.
	Path string `json:"path"`
}

// filesGrant names the manifest the runner lets the caller fetch and
// whether it is a directory's tree or one file ("dir", "file").
type filesGrant struct {
	Manifest string `json:"manifest"`
	Type     string `json:"type"`
}

// outputsLease names the lease that keeps what an attempt left in its
// working directory.
func outputsLease(job string, share int, epoch uint64) string {
	return fmt.Sprintf("outputs/%s/%d/%d", job, share, epoch)
}

// keepOutputs stores an ended attempt's working directory and returns its
// manifest's digest, "" when it could not (the store is full: the job's
// end is reported all the same). An empty working directory is
// blob.EmptyTree, which needs neither storing nor a lease: it is kept
// by every node for ever, at no cost.
func (n *Node) keepOutputs(log *slog.Logger, e market.Execution, dir string) string {
	start := time.Now()
	st, err := n.blobs.PutUnder(n.ctx, dir, blob.Lease{ID: outputsLease(e.Job, e.Share, e.Epoch), Expires: start.Add(n.cfg.KeepOutputs)})
	if err != nil {
		log.Warn("outputs not kept", "err", err)
		return ""
	}
	if st.Manifest == blob.EmptyTree() {
		log.Debug("outputs: the working directory was left empty")
		return st.Manifest.String()
	}
	log.Info("outputs kept", "manifest", st.Manifest.Short(), "files", st.Files, "new_bytes", st.NewBytes, "for", n.cfg.KeepOutputs,
		"took", time.Since(start).Round(time.Millisecond))
	return st.Manifest.String()
}

// workPath turns the path an owner gives into one inside the working
// directory: "/outputs" and "outputs" are "outputs", "", "/" and "." the
// directory itself. A path with a ".." element is refused.
func workPath(p string) (string, error) {
	rel := strings.Trim(p, "/")
	if rel == "" || rel == "." {
		return ".", nil
	}
	for _, el := range strings.Split(rel, "/") {
		if el == ".." {
			return "", &api.HTTPError{Status: http.StatusBadRequest, Field: "path",
				Err: fmt.Errorf("path %q leaves the job's working directory", p)}
		}
	}
	return path.Clean(rel), nil
}

// filesPlacement picks the attempt of a share whose working directory a
// copy reads: the running one, else the newest that left outputs.
func filesPlacement(rec market.JobRecord, share int) (market.Placement, bool) {
	var best market.Placement
	found := false
	for _, p := range rec.Placements {
		if p.Share != share {
			continue
		}
		if p.State == market.PlacementRunning {
			return p, true
		}
		if p.Outputs != "" && (!found || p.Epoch > best.Epoch) {
			best, found = p, true
		}
	}
	return best, found
}

// Files implements api.FileCopier for the job's owner.
func (t tenantAPI) Files(ctx context.Context, req api.FilesRequest, w io.Writer) error {
	rec, err := t.own(ctx, req.Job)
	if err != nil {
		return err
	}
	rel, err := workPath(req.Path)
	if err != nil {
		return err
	}
	p, ok := filesPlacement(rec, req.Share)
	if !ok {
		return &api.HTTPError{Status: http.StatusNotFound, Field: "share",
			Err: fmt.Errorf("job %s share %d: no attempt runs, and none that ended left its working directory kept", req.Job, req.Share)}
	}
	if p.State != market.PlacementRunning && p.Outputs == blob.EmptyTree().String() {
		// Nothing was left to keep: no need to ask the runner, which
		// may be gone.
		empty, err := t.blobs.Manifest(blob.EmptyTree())
		if err != nil {
			return err
		}
		sub, typ, err := empty.Subtree(rel)
		if err != nil {
			return pathError(fmt.Sprintf("job %s share %d", req.Job, req.Share), req.Path, err)
		}
		return t.blobs.WriteTar(w, sub, typ)
	}
	q := filesRequest{Job: req.Job, Share: req.Share, Epoch: p.Epoch, Path: rel}
	lease := fmt.Sprintf("download/%s/%d/%d", req.Job, req.Share, time.Now().UnixNano())
	if err := t.blobs.SetLease(blob.Lease{ID: lease, Expires: time.Now().Add(grantTTL)}); err != nil {
		return err
	}
	defer t.blobs.DeleteLease(lease)
	var m blob.Digest
	var typ blob.EntryType
	if p.Node == t.id.String() {
		if m, typ, err = t.filesOf(ctx, q, lease); err != nil {
			return err
		}
	} else if m, typ, err = t.fetchFiles(ctx, p.Node, q, lease); err != nil {
		return err
	}
	man, err := t.blobs.Manifest(m)
	if err != nil {
		return err
	}
	return t.blobs.WriteTar(w, man, typ)
}

// fetchFiles has runner store what q names and fetches it here.
func (t tenantAPI) fetchFiles(ctx context.Context, runner string, q filesRequest, lease string) (blob.Digest, blob.EntryType, error) {
	pid, err := peer.Decode(runner)
	if err != nil {
		return blob.Digest{}, "", err
	}
	data, _ := json.Marshal(q)
	data = t.sealCall(ctx, kindFiles, data, q)
	var g filesGrant
	cctx, cancel := context.WithTimeout(ctx, 2*callTimeout) // the runner reads the files
	t.dialable(pid)
	err = t.direct.Call(cctx, pid, kindFiles, data, func(msg gossip.Message) error {
		if msg.Kind != kindFilesGrant || json.Unmarshal(msg.Data, &g) != nil {
			return fmt.Errorf("unexpected %q frame in a files reply", msg.Kind)
		}
		return nil
	})
	cancel()
	if err != nil {
		if err = fromCallError(err); errors.As(err, new(*api.HTTPError)) {
			return blob.Digest{}, "", err
		}
		return blob.Digest{}, "", api.Errorf(http.StatusBadGateway, "job %s share %d: its runner %s did not answer: %v", q.Job, q.Share, pid.ShortString(), err)
	}
	m, err := blob.ParseDigest(g.Manifest)
	if err != nil || (g.Type != string(blob.TypeDir) && g.Type != string(blob.TypeFile)) {
		return blob.Digest{}, "", api.Errorf(http.StatusBadGateway, "job %s share %d: its runner %s answered %q %q", q.Job, q.Share, pid.ShortString(), g.Manifest, g.Type)
	}
	if err := t.blobs.AddToLease(lease, []blob.Digest{m}, nil); err != nil {
		return blob.Digest{}, "", err
	}
	if t.holdsWhole(m) != nil {
		if _, err := t.xfer.Fetch(ctx, m, []peer.ID{pid}, lease); err != nil {
			return blob.Digest{}, "", api.Errorf(http.StatusBadGateway, "job %s share %d: fetching from its runner %s: %v", q.Job, q.Share, pid.ShortString(), err)
		}
	}
	return m, blob.EntryType(g.Type), nil
}

// serveFiles answers kindFiles (the owner's request checked): it stores
// what q names under a lease of grantTTL and lets caller fetch it.
func (n *Node) serveFiles(ctx context.Context, caller peer.ID, q filesRequest, reply func(string, []byte) error) error {
	lease := fmt.Sprintf("files/%s/%d/%d", q.Job, q.Share, time.Now().UnixNano())
	if err := n.blobs.SetLease(blob.Lease{ID: lease, Expires: time.Now().Add(grantTTL)}); err != nil {
		return asCallError(err)
	}
	m, typ, err := n.filesOf(ctx, q, lease)
	if err != nil {
		_ = n.blobs.DeleteLease(lease)
		return asCallError(err)
	}
	n.grants.allow(caller, m, time.Now().Add(grantTTL))
	b, _ := json.Marshal(filesGrant{Manifest: m.String(), Type: string(typ)})
	return reply(kindFilesGrant, b)
}

// filesOf stores what q names under lease: from the running attempt's
// working directory, else from the outputs this node keeps of it.
func (n *Node) filesOf(ctx context.Context, q filesRequest, lease string) (blob.Digest, blob.EntryType, error) {
	rel, err := workPath(q.Path)
	if err != nil {
		return blob.Digest{}, "", err
	}
	where := fmt.Sprintf("job %s share %d", q.Job, q.Share)
	if run, ok := n.exec.Lookup(attemptName(q.Job, q.Share, q.Epoch)); ok {
		typ := blob.TypeDir
		if rel != "." {
			fi, err := os.Lstat(run.WorkDir() + "/" + rel)
			if err == nil && fi.Mode().IsRegular() {
				typ = blob.TypeFile
			}
		}
		st, err := n.blobs.PutPath(ctx, run.WorkDir(), rel, lease)
		if err != nil {
			return blob.Digest{}, "", pathError(where, q.Path, err)
		}
		return st.Manifest, typ, nil
	}
	kept, err := n.keptOutputs(ctx, q.Job, q.Share, q.Epoch)
	if err != nil {
		return blob.Digest{}, "", api.Errorf(http.StatusNotFound,
			"%s: the working directory of its attempt %d is no longer kept on this node (node --keep-outputs)", where, q.Epoch)
	}
	whole, err := n.blobs.Manifest(kept)
	if err != nil {
		return blob.Digest{}, "", err
	}
	sub, typ, err := whole.Subtree(rel)
	if err != nil {
		return blob.Digest{}, "", pathError(where, q.Path, err)
	}
	m, err := n.blobs.PutManifest(sub, lease)
	return m, typ, err
}

// keptOutputs is the manifest of what this node keeps of an ended
// attempt's working directory: its outputs lease's, or, for an attempt
// that left it empty (which takes no lease), the empty tree its end
// named, while the market remembers the attempt.
func (n *Node) keptOutputs(ctx context.Context, job string, share int, epoch uint64) (blob.Digest, error) {
	l, err := n.blobs.Lease(outputsLease(job, share, epoch))
	switch {
	case err == nil && len(l.Manifests) == 1 && (l.Expires.IsZero() || time.Now().Before(l.Expires)):
		return l.Manifests[0], nil
	case err == nil:
		return blob.Digest{}, errors.New("expired")
	}
	var a market.Attempt
	var ok bool
	if err := n.do(ctx, func() { a, ok = n.mk.Attempt(job, share, epoch) }); err != nil {
		return blob.Digest{}, err
	}
	if !ok || a.Outputs != blob.EmptyTree().String() {
		return blob.Digest{}, errors.New("not kept")
	}
	return blob.EmptyTree(), nil
}

// pathError maps a path the tree does not have to a 404, one it may not
// hold to a 400, naming the job.
func pathError(where, p string, err error) error {
	var pe *blob.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &api.HTTPError{Status: http.StatusNotFound, Field: "path", Err: fmt.Errorf("%s: no %q in its working directory", where, p)}
	case errors.As(err, &pe):
		return &api.HTTPError{Status: http.StatusBadRequest, Field: "path", Err: fmt.Errorf("%s: %v", where, pe)}
	}
	return err
}
