package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Checkpoints. A job may write files under $GPUMESH_CHECKPOINT_DIR. Every
// Config.CheckpointInterval, when the job asks for one (it creates the
// file .ready in that directory), and once more when its process ends (a
// job writes its last checkpoint when it gets SIGTERM), the runner stores
// the directory in its content store (blobs.go) as a manifest of chunks,
// and, when it changed, has up to checkpointHolders members of the job's
// group hold it: each fetches only the chunks it lacks. Then it reports
// the checkpoint to the job's coordinator, which checks that a holder
// other than the runner has it whole and records it in the job's record
// (market.CheckpointTaken; the record replicates with the job). A share
// placed again restores the newest one its award names
// (market.Execution.Restore), fetching it from every holder at once.

const (
	kindCheckpointOffer = "ckpt.report" // checkpointOffer → ack: the coordinator records it (wire v2; v1's ckpt.offer carried a whole archive)
	kindCheckpointHold  = "ckpt.hold"   // checkpointHold → ack: the member will fetch it when pushed
	kindCheckpointHeld  = "ckpt.held"   // checkpointHeld → ack if the member holds the manifest whole
)

// Defaults of the checkpoint settings of Config.
const (
	DefaultCheckpointInterval = 30 * time.Second
	DefaultKeepOutputs        = 24 * time.Hour
	DefaultCheckpointKeep     = 2
)

// checkpointHolders is how many members besides the runner a checkpoint
// is shipped to.
const checkpointHolders = 2

// checkpointReady is the file a job creates in its checkpoint directory to
// have it shipped at once (it is removed, and not shipped).
const checkpointReady = ".ready"

// checkpointOffer is a runner's report of a checkpoint to the coordinator.
type checkpointOffer struct {
	Job        string            `json:"job"`
	Checkpoint market.Checkpoint `json:"checkpoint"`
}

// checkpointHold asks a member to hold a share's checkpoint.
type checkpointHold struct {
	Job      string `json:"job"`
	Share    int    `json:"share"`
	Epoch    uint64 `json:"epoch"`
	Manifest string `json:"manifest"`
	Bytes    int64  `json:"bytes"`
}

// checkpointHeld asks a member whether it holds a manifest whole.
type checkpointHeld struct {
	Manifest string `json:"manifest"`
}

// shipper remembers what each attempt last shipped, and which attempts
// ship now.
type shipper struct {
	mu       sync.Mutex
	sent     map[string]blob.Digest // attempt name → manifest
	stamps   map[string]string      // attempt name → the tree's stamp when it was last shipped
	shipping map[string]bool
	lastAt   map[string]time.Time // attempt name → last time it was looked at
	noted    map[string]string    // attempt name → why its last checkpoint was not shipped, as told its owner
}

func newShipper() *shipper {
	return &shipper{sent: map[string]blob.Digest{}, stamps: map[string]string{}, shipping: map[string]bool{}, lastAt: map[string]time.Time{}, noted: map[string]string{}}
}

// treeStamp sums what a tree's entries say of themselves — path, type,
// size, mode and modification time — without reading them: a tree whose
// stamp is unchanged since it was shipped is not read again (the way
// backup tools skip unchanged files). "" when the tree cannot be walked.
func treeStamp(dir string) string {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%v\x00%d\x00%d\n", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// begin marks an attempt as shipping; false if it already is.
func (s *shipper) begin(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shipping[name] {
		return false
	}
	s.shipping[name] = true
	return true
}

func (s *shipper) end(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.shipping, name)
}

// checkpointPoll is how often running attempts are looked at for a
// checkpoint the job asked for (.ready) or one due by the interval.
const checkpointPoll = 250 * time.Millisecond

// checkpointLoop ships the running attempts' checkpoints: on the
// interval, and at once when a job asks for one.
func (n *Node) checkpointLoop() {
	defer n.wg.Done()
	t := time.NewTicker(min(checkpointPoll, n.cfg.CheckpointInterval))
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			for _, run := range n.exec.Running() {
				if !run.Started() {
					// Its checkpoint is still being restored: what the
					// directory holds now is part of an older one.
					continue
				}
				a, dir := run.Attempt(), run.CheckpointDir()
				name := a.Name()
				asked := os.Remove(filepath.Join(dir, checkpointReady)) == nil
				n.ship.mu.Lock()
				last, seen := n.ship.lastAt[name]
				due := !seen || now.Sub(last) >= n.cfg.CheckpointInterval
				if !seen {
					n.ship.lastAt[name] = now // the interval counts from the start
					due = false
				}
				if due || asked {
					n.ship.lastAt[name] = now
				}
				n.ship.mu.Unlock()
				if due || asked {
					n.wg.Add(1)
					go func() {
						defer n.wg.Done()
						n.shipCheckpoint(run)
					}()
				}
			}
		}
	}
}

// shipCheckpoint stores an attempt's checkpoint directory and, if it
// holds something new, has it held and reports it. It returns once the
// coordinator has the checkpoint in the job's record, or it was refused.
//
// A checkpoint that cannot be stored (the store is full, the disk is
// full), is over the node's limit, or that no member would hold, is not
// shipped: the job goes on, its previous checkpoint stays the one a next
// attempt restores, and the reason goes to the node's log and, as a line
// starting "gpumesh: ", to the attempt's stderr, where its owner reads it
// (`gpumesh logs JOB --stderr`).
func (n *Node) shipCheckpoint(run *executor.Run) {
	a, dir := run.Attempt(), run.CheckpointDir()
	name := a.Name()
	if !n.ship.begin(name) {
		return
	}
	defer n.ship.end(name)
	log := n.log.With("job", a.JobID, "share", a.Share, "epoch", a.Epoch)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return
	}
	_ = os.Remove(filepath.Join(dir, checkpointReady))
	stamp := treeStamp(dir)
	n.ship.mu.Lock()
	unchanged := stamp != "" && n.ship.stamps[name] == stamp
	n.ship.mu.Unlock()
	if unchanged {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Minute)
	defer cancel()
	now := time.Now()
	lease := checkpointLease(a.JobID, a.Share, now)
	if err := n.blobs.SetLease(blob.Lease{ID: lease}); err != nil {
		log.Warn("checkpoint not stored", "err", err)
		return
	}
	// notShipped says why, where the node's operator and the job's owner
	// read it (the owner once per reason in a row: a checkpoint that
	// fails each interval for the same reason is not told of again).
	notShipped := func(why string) {
		log.Warn("checkpoint not shipped; the job goes on and its previous checkpoint stays", "err", why)
		n.ship.mu.Lock()
		told := n.ship.noted[name] == why
		n.ship.noted[name] = why
		n.ship.mu.Unlock()
		if !told {
			_ = run.Note("checkpoint of " + now.UTC().Format(time.RFC3339) + " not shipped; the job goes on and its previous checkpoint stays: " + why) // fails only once the attempt ended
		}
	}
	put, err := n.blobs.Put(ctx, dir, lease)
	if err != nil {
		_ = n.blobs.DeleteLease(lease)
		notShipped(err.Error())
		return
	}
	n.ship.mu.Lock()
	same := n.ship.sent[name] == put.Manifest
	n.ship.mu.Unlock()
	if same {
		_ = n.blobs.DeleteLease(lease) // an older lease keeps the same tree
		n.ship.mu.Lock()
		n.ship.stamps[name] = stamp
		n.ship.mu.Unlock()
		return
	}
	if lim := n.cfg.CheckpointLimit; lim > 0 && put.Bytes > lim {
		_ = n.blobs.DeleteLease(lease)
		notShipped(fmt.Sprintf("it is %d bytes, over this node's limit of %d (--checkpoint-max-mib)", put.Bytes, lim))
		return
	}
	holders, shipped, refusals := n.holdCheckpoint(ctx, a, put)
	if len(holders) == 0 {
		notShipped(fmt.Sprintf("no member would hold manifest %s; it is shipped again next time: %s", put.Manifest.Short(), refusals))
		return
	}
	cp := market.Checkpoint{Share: a.Share, Epoch: a.Epoch, Manifest: put.Manifest.String(), Bytes: put.Bytes,
		NewBytes: min(shipped, put.Bytes), At: now}
	cp.Holders = append([]string{n.self}, holders...)
	offer := checkpointOffer{Job: a.JobID, Checkpoint: cp}
	coord := n.coordinatorOf(a.JobID)
	switch {
	case coord == "":
		return
	case coord == n.id:
		err = n.acceptCheckpoint(ctx, n.id, offer)
	default:
		err = n.jsonCall(ctx, coord, kindCheckpointOffer, offer)
	}
	if err != nil {
		log.Info("checkpoint refused or undelivered", "err", err)
		return
	}
	n.ship.mu.Lock()
	n.ship.sent[name], n.ship.stamps[name] = put.Manifest, stamp
	delete(n.ship.noted, name)
	n.ship.mu.Unlock()
	n.keepNewestCheckpoints(a.JobID, a.Share, n.checkpointKeep())
	log.Debug("checkpoint recorded", "manifest", put.Manifest.Short(), "bytes", put.Bytes, "new_bytes", cp.NewBytes, "holders", len(holders))
}

// holdCheckpoint has up to checkpointHolders members of the job's group
// hold a checkpoint: each agrees, then fetches from this node what it
// lacks. It returns the members that hold it whole, the most bytes any
// of them had to fetch, and why the others do not hold it.
func (n *Node) holdCheckpoint(ctx context.Context, a executor.Attempt, put blob.PutStats) (holders []string, shipped int64, refusals string) {
	req := checkpointHold{Job: a.JobID, Share: a.Share, Epoch: a.Epoch, Manifest: put.Manifest.String(), Bytes: put.Bytes}
	var candidates []peer.ID
	for _, id := range n.coordinators(a.JobID, n.cfg.Replicas+1) {
		if id != n.id {
			candidates = append(candidates, id)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var why []string
	refused := func(id peer.ID, err error) {
		mu.Lock()
		why = append(why, fmt.Sprintf("%s: %v", id.ShortString(), err))
		mu.Unlock()
	}
	for _, id := range candidates[:min(len(candidates), checkpointHolders)] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.jsonCall(ctx, id, kindCheckpointHold, req); err != nil {
				n.log.Debug("member will not hold the checkpoint", "job", a.JobID, "member", id.ShortString(), "err", err)
				refused(id, err)
				return
			}
			st, err := n.xfer.Push(ctx, id, put.Manifest)
			if err != nil {
				n.log.Debug("checkpoint not pushed", "job", a.JobID, "member", id.ShortString(), "err", err)
				refused(id, err)
				return
			}
			mu.Lock()
			holders = append(holders, id.String())
			shipped = max(shipped, st.Bytes)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(candidates) == 0 {
		why = append(why, "no other member of the job's group")
	}
	slices.Sort(why)
	return holders, shipped, strings.Join(why, "; ")
}

// serveCheckpointHold agrees to hold a share's checkpoint for its runner:
// from the share's live attempt, in a job whose record this node holds,
// when the store has room. The runner's push then fetches it under a
// lease of its own.
func (n *Node) serveCheckpointHold(from peer.ID, req checkpointHold) error {
	m, err := blob.ParseDigest(req.Manifest)
	if err != nil {
		return api.Errorf(http.StatusBadRequest, "checkpoint hold: %v", err)
	}
	rec, ok := n.view.Job(req.Job)
	if !ok {
		return api.Errorf(http.StatusNotFound, "checkpoint hold: job %s is not known here", req.Job)
	}
	if err := currentAttempt(rec, req.Share, req.Epoch, from.String()); err != nil {
		return api.Errorf(http.StatusConflict, "checkpoint hold of %s share %d epoch %d: %v", req.Job, req.Share, req.Epoch, err)
	}
	if err := n.blobs.Fits(req.Bytes); err != nil {
		return api.Errorf(http.StatusInsufficientStorage, "checkpoint hold: %v", err)
	}
	lease := checkpointLease(req.Job, req.Share, time.Now())
	if err := n.blobs.SetLease(blob.Lease{ID: lease}); err != nil {
		return err
	}
	n.keepNewestCheckpoints(req.Job, req.Share, n.checkpointKeep()+1) // the newest, and the new one coming
	n.pushes.expect(from, m, lease, time.Now())
	return nil
}

// serveCheckpointHeld answers whether this node holds a manifest whole.
func (n *Node) serveCheckpointHeld(req checkpointHeld) error {
	m, err := blob.ParseDigest(req.Manifest)
	if err != nil {
		return api.Errorf(http.StatusBadRequest, "checkpoint held: %v", err)
	}
	return n.holdsWhole(m)
}

// holdsWhole returns nil when the store holds manifest m and every chunk
// of it.
func (n *Node) holdsWhole(m blob.Digest) error {
	missing, err := n.blobs.Missing(m)
	if err != nil {
		return api.Errorf(http.StatusNotFound, "manifest %s: %v", m.Short(), err)
	}
	if len(missing) > 0 {
		return api.Errorf(http.StatusNotFound, "manifest %s: %d chunks missing", m.Short(), len(missing))
	}
	return nil
}

// acceptCheckpoint is the coordinator's side of an offer: a holder other
// than the runner must hold the checkpoint whole; then the market records
// it, only from the share's live attempt.
func (n *Node) acceptCheckpoint(ctx context.Context, from peer.ID, offer checkpointOffer) error {
	cp := offer.Checkpoint
	m, err := blob.ParseDigest(cp.Manifest)
	if err != nil {
		return api.Errorf(http.StatusBadRequest, "checkpoint: %v", err)
	}
	var last error = errors.New("it names no holder other than its runner")
	held := false
	for _, h := range cp.Holders {
		if h == from.String() {
			continue
		}
		id, err := peer.Decode(h)
		if err != nil {
			return api.Errorf(http.StatusBadRequest, "checkpoint holder %q: %v", h, err)
		}
		if id == n.id {
			last = n.holdsWhole(m)
		} else {
			last = n.jsonCall(ctx, id, kindCheckpointHeld, checkpointHeld{Manifest: cp.Manifest})
		}
		if last == nil {
			held = true
			break
		}
	}
	if !held {
		return api.Errorf(http.StatusConflict, "checkpoint of %s share %d refused: no holder besides the runner holds it whole: %v", offer.Job, cp.Share, last)
	}
	var stepErr error
	if err := n.do(ctx, func() {
		stepErr = n.step(market.CheckpointTaken{Now: time.Now(), Job: offer.Job, From: from.String(), Checkpoint: cp})
	}); err != nil {
		return err
	}
	switch {
	case stepErr == nil:
		return nil
	case errors.Is(stepErr, market.ErrUnknownJob):
		return api.Errorf(http.StatusNotFound, "this node does not coordinate job %s", offer.Job)
	case errors.Is(stepErr, market.ErrBadEvent):
		return api.Errorf(http.StatusBadRequest, "checkpoint: %v", stepErr)
	}
	return api.Errorf(http.StatusConflict, "checkpoint of %s share %d epoch %d refused: %v", offer.Job, cp.Share, cp.Epoch, stepErr)
}

// currentAttempt checks that (share, epoch) on node is the share's latest
// attempt and was not declared lost: fencing for checkpoints.
func currentAttempt(rec market.JobRecord, share int, epoch uint64, node string) error {
	var latest uint64
	var found *market.Placement
	for i, p := range rec.Placements {
		if p.Share != share {
			continue
		}
		latest = max(latest, p.Epoch)
		if p.Epoch == epoch {
			found = &rec.Placements[i]
		}
	}
	switch {
	case found == nil:
		return errors.New("no such attempt")
	case found.Node != node:
		return fmt.Errorf("the attempt runs on %s", found.Node)
	case epoch < latest:
		return fmt.Errorf("superseded by epoch %d", latest)
	case found.State == market.PlacementLost || found.State == market.PlacementRejected:
		return fmt.Errorf("the attempt is %s", found.State)
	}
	return nil
}

// restoreInto returns the executor's hook that fills a new attempt's
// checkpoint directory with the checkpoint its award names, nil for none.
// A checkpoint that cannot be fetched or restored is logged and the
// attempt starts without one.
func (n *Node) restoreInto(e market.Execution) func(dir string) error {
	cp := e.Restore
	if cp == nil {
		return nil
	}
	return func(dir string) error {
		log := n.log.With("job", e.Job, "share", e.Share, "epoch", e.Epoch, "manifest", cp.Manifest)
		start := time.Now()
		if err := n.restore(e, cp, dir); err != nil {
			log.Warn("checkpoint unavailable; the attempt starts without one", "err", err)
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.Mkdir(dir, 0o700)
		}
		log.Info("restored checkpoint", "from_share", cp.Share, "from_epoch", cp.Epoch, "bytes", cp.Bytes, "took", time.Since(start).Round(time.Millisecond))
		// A request to ship that the checkpoint caught as it was taken is
		// not this attempt's.
		if err := os.Remove(filepath.Join(dir, checkpointReady)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
}

// restore fetches a checkpoint from its holders (all at once) into the
// store, unless it is here already, and writes it into dir.
func (n *Node) restore(e market.Execution, cp *market.Checkpoint, dir string) error {
	m, err := blob.ParseDigest(cp.Manifest)
	if err != nil {
		return err
	}
	lease := fmt.Sprintf("restore/%s/%d/%d", e.Job, e.Share, e.Epoch)
	if err := n.blobs.SetLease(blob.Lease{ID: lease, Manifests: []blob.Digest{m}}); err != nil {
		return err
	}
	defer n.blobs.DeleteLease(lease)
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	if n.holdsWhole(m) != nil {
		var holders []peer.ID
		for _, h := range cp.Holders {
			if id, err := peer.Decode(h); err == nil && id != n.id {
				holders = append(holders, id)
			}
		}
		if _, err := n.xfer.Fetch(ctx, m, holders, lease); err != nil {
			return err
		}
	}
	return n.blobs.Restore(ctx, m, dir)
}

// checkpointKeep is how many checkpoints of a share are kept.
func (n *Node) checkpointKeep() int { return n.cfg.CheckpointKeep }

// coordinatorOf is the coordinator this node's market renews the job's
// lease with.
func (n *Node) coordinatorOf(job string) peer.ID {
	var coord string
	_ = n.do(n.ctx, func() {
		for _, a := range n.mk.Attempts() {
			if a.Job == job {
				coord = a.Coordinator
			}
		}
	})
	id, err := peer.Decode(coord)
	if err != nil {
		return ""
	}
	return id
}

// jsonCall makes a call with a JSON request whose reply is an ack.
func (n *Node) jsonCall(ctx context.Context, to peer.ID, kind string, req any) error {
	data, _ := json.Marshal(req)
	n.dialable(to)
	err := n.direct.Call(ctx, to, kind, data, func(gossip.Message) error { return nil })
	return fromCallError(err)
}

// serveCheckpointCall answers the checkpoint calls.
func (n *Node) serveCheckpointCall(ctx context.Context, req gossip.Message, reply func(string, []byte) error) error {
	var err error
	switch req.Kind {
	case kindCheckpointOffer:
		var o checkpointOffer
		if err = strictJSON(req.Data, &o); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		err = n.acceptCheckpoint(ctx, req.Sender, o)
	case kindCheckpointHold:
		var h checkpointHold
		if err = strictJSON(req.Data, &h); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		err = n.serveCheckpointHold(req.Sender, h)
	case kindCheckpointHeld:
		var h checkpointHeld
		if err = strictJSON(req.Data, &h); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		err = n.serveCheckpointHeld(h)
	default:
		return fmt.Errorf("unknown call %q", req.Kind)
	}
	if err != nil {
		return asCallError(err)
	}
	return reply(kindAck, nil)
}
