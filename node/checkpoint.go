package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Checkpoints. A job may write files under $GPUMESH_CHECKPOINT_DIR. Every
// Config.CheckpointInterval, and once more when its process ends (a job
// writes its last checkpoint when it gets SIGTERM), the runner packs the
// directory and, when it changed, offers it to the job's coordinator. The
// coordinator accepts it only from the share's current attempt (its latest
// epoch, on the node it was awarded to), copies it, and passes it to its
// replicas. A share placed again starts with the latest accepted checkpoint
// unpacked into its checkpoint directory, so a job that counts steps in its
// checkpoint resumes where it was.

const (
	kindCheckpointOffer = "ckpt.offer" // checkpointNote → ack (the coordinator pulls the blob)
	kindCheckpointSync  = "ckpt.sync"  // checkpointNote → ack (a replica pulls the blob)
	kindCheckpointGet   = "ckpt.get"   // checkpointQuery → checkpointNote, or nothing
	kindCheckpointNote  = "ckpt.note"
)

// Defaults of the checkpoint settings of Config.
const (
	DefaultCheckpointInterval = 30 * time.Second
	DefaultCheckpointLimit    = 256 << 20
)

// checkpointNote names an accepted (or offered) checkpoint of a share.
type checkpointNote struct {
	Job   string            `json:"job"`
	Share int               `json:"share"`
	Epoch uint64            `json:"epoch"`
	Ref   market.PayloadRef `json:"ref"`
	At    time.Time         `json:"at"`
	// From is the share whose attempt wrote it, when a share placed again
	// under a new number restored it.
	From int `json:"from,omitempty"`
}

type checkpointQuery struct {
	Job   string `json:"job"`
	Share int    `json:"share"`
}

func checkpointKey(job string, share int) string { return fmt.Sprintf("%s/%d", job, share) }

// shipper remembers what each attempt last shipped, so an unchanged
// directory is not offered again.
type shipper struct {
	mu   sync.Mutex
	sent map[string]string // attempt name → digest
}

// checkpointLoop offers the running attempts' checkpoints on the interval.
func (n *Node) checkpointLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			for _, run := range n.exec.Running() {
				n.shipCheckpoint(run.Attempt(), run.CheckpointDir())
			}
		}
	}
}

// shipCheckpoint packs an attempt's checkpoint directory and, if it holds
// something new, offers it to the coordinator.
func (n *Node) shipCheckpoint(a executor.Attempt, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return
	}
	archive, err := client.PackDir(dir, n.cfg.CheckpointLimit)
	if err != nil {
		n.log.Warn("checkpoint not shipped", "job", a.JobID, "share", a.Share, "err", err)
		return
	}
	digest := client.PayloadDigest(archive)
	name := a.Name()
	n.ship.mu.Lock()
	same := n.ship.sent[name] == digest
	n.ship.mu.Unlock()
	if same {
		return
	}
	ref, err := n.payload.putLimit(bytes.NewReader(archive), nil, n.cfg.CheckpointLimit)
	if err != nil {
		n.log.Warn("checkpoint not stored", "job", a.JobID, "err", err)
		return
	}
	coord := n.coordinatorOf(a.JobID)
	if coord == "" {
		return
	}
	note := checkpointNote{Job: a.JobID, Share: a.Share, Epoch: a.Epoch, Ref: ref, At: time.Now()}
	ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
	defer cancel()
	offer := func() error { return n.noteCall(ctx, coord, kindCheckpointOffer, note) }
	if coord == n.id {
		// This node coordinates the job it runs: no call to make (a dial
		// to itself fails).
		offer = func() error { return n.acceptCheckpoint(ctx, n.id, note) }
	}
	if err := offer(); err != nil {
		n.log.Info("checkpoint refused or undelivered", "job", a.JobID, "share", a.Share, "epoch", a.Epoch, "err", err)
		return
	}
	n.ship.mu.Lock()
	n.ship.sent[name] = digest
	n.ship.mu.Unlock()
	n.log.Debug("checkpoint accepted", "job", a.JobID, "share", a.Share, "epoch", a.Epoch, "bytes", ref.Size)
}

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

func (n *Node) noteCall(ctx context.Context, to peer.ID, kind string, note checkpointNote) error {
	data, _ := json.Marshal(note)
	n.dialable(to)
	err := n.direct.Call(ctx, to, kind, data, func(gossip.Message) error { return nil })
	return fromCallError(err)
}

// acceptCheckpoint is the coordinator's side of an offer: fencing first,
// then the copy, then the index and the replicas.
func (n *Node) acceptCheckpoint(ctx context.Context, from peer.ID, note checkpointNote) error {
	var rec market.JobRecord
	var mine bool
	if err := n.do(ctx, func() { rec, mine = n.mk.Job(note.Job) }); err != nil {
		return err
	}
	if !mine {
		return api.Errorf(http.StatusNotFound, "this node does not coordinate job %s", note.Job)
	}
	if err := currentAttempt(rec, note.Share, note.Epoch, from.String()); err != nil {
		return api.Errorf(http.StatusConflict, "checkpoint of %s share %d epoch %d refused: %v", note.Job, note.Share, note.Epoch, err)
	}
	if err := n.fetchBlob(ctx, from.String(), note.Ref, n.cfg.CheckpointLimit); err != nil {
		return err
	}
	if err := n.recordCheckpoint(note); err != nil {
		return err
	}
	n.wg.Add(1)
	go func() { // replicas copy it; the offer does not wait for them
		defer n.wg.Done()
		for _, t := range n.replicaTargets(note.Job) {
			cctx, cancel := context.WithTimeout(n.ctx, time.Minute)
			if err := n.noteCall(cctx, t, kindCheckpointSync, note); err != nil && n.ctx.Err() == nil {
				n.log.Debug("checkpoint not replicated", "job", note.Job, "replica", t.ShortString(), "err", err)
			}
			cancel()
		}
	}()
	return nil
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

// syncCheckpoint is a replica's side: copy the blob from the coordinator
// and keep the note.
func (n *Node) syncCheckpoint(ctx context.Context, from peer.ID, note checkpointNote) error {
	if held, ok := n.view.job(note.Job); !ok || held.Coordinator != from.String() {
		return api.Errorf(http.StatusForbidden, "checkpoint of %s from %s, which does not coordinate it here", note.Job, from.ShortString())
	}
	if err := n.fetchBlob(ctx, from.String(), note.Ref, n.cfg.CheckpointLimit); err != nil {
		return err
	}
	return n.recordCheckpoint(note)
}

// recordCheckpoint keeps a note unless one of a later epoch is held.
func (n *Node) recordCheckpoint(note checkpointNote) error {
	key := checkpointKey(note.Job, note.Share)
	var old checkpointNote
	if err := n.store.Get(store.Checkpoints, key, &old); err == nil && old.Epoch > note.Epoch {
		return nil
	}
	return n.storeApply([]store.Op{store.Put(store.Checkpoints, key, note)})
}

// latestCheckpoint is the checkpoint a share should start from: its own
// latest, or, for a share placed again under a new number, the newest of a
// share of the job that is no longer live.
func (n *Node) latestCheckpoint(ctx context.Context, job string, share int) (checkpointNote, bool) {
	var own checkpointNote
	if err := n.store.Get(store.Checkpoints, checkpointKey(job, share), &own); err == nil {
		return own, true
	}
	var rec market.JobRecord
	var mine bool
	if err := n.do(ctx, func() { rec, mine = n.mk.Job(job) }); err != nil || !mine {
		return checkpointNote{}, false
	}
	live := map[int]bool{}
	for _, p := range rec.Placements {
		if p.State == market.PlacementRunning || p.State == market.PlacementAccepted || p.State == market.PlacementAwarded {
			live[p.Share] = true
		}
	}
	var best checkpointNote
	found := false
	_ = n.store.ForEach(store.Checkpoints, func(key string, raw []byte) error {
		var c checkpointNote
		if json.Unmarshal(raw, &c) != nil || c.Job != job || live[c.Share] {
			return nil
		}
		if !found || c.At.After(best.At) {
			best, found = c, true
		}
		return nil
	})
	if !found {
		return checkpointNote{}, false
	}
	claimed := best
	claimed.From, claimed.Share = best.Share, share
	_ = n.recordCheckpoint(claimed) // the new share owns it from now on
	return claimed, true
}

// openCheckpoint asks the coordinator for the share's latest checkpoint and
// opens a copy of it; nil when there is none.
func (n *Node) openCheckpoint(ctx context.Context, coordinator, job string, share int) (io.ReadCloser, error) {
	coord, err := peer.Decode(coordinator)
	if err != nil {
		return nil, nil
	}
	var note checkpointNote
	var got bool
	if coord == n.id {
		note, got = n.latestCheckpoint(ctx, job, share)
	} else {
		data, _ := json.Marshal(checkpointQuery{Job: job, Share: share})
		n.dialable(coord)
		err := n.direct.Call(ctx, coord, kindCheckpointGet, data, func(m gossip.Message) error {
			got = true
			return json.Unmarshal(m.Data, &note)
		})
		if err != nil {
			return nil, fromCallError(err)
		}
	}
	if !got {
		return nil, nil
	}
	if err := n.fetchBlob(ctx, coordinator, note.Ref, n.cfg.CheckpointLimit); err != nil {
		return nil, err
	}
	n.log.Info("restoring checkpoint", "job", job, "share", share, "from_share", note.Share, "from_epoch", note.Epoch, "bytes", note.Ref.Size)
	return n.payload.open(note.Ref)
}

// serveCheckpointCall answers the checkpoint calls.
func (n *Node) serveCheckpointCall(ctx context.Context, req gossip.Message, reply func(string, []byte) error) error {
	switch req.Kind {
	case kindCheckpointOffer, kindCheckpointSync:
		var note checkpointNote
		if err := strictJSON(req.Data, &note); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		if _, err := digestHex(note.Ref); err != nil || note.Ref.Size <= 0 || note.Ref.Size > n.cfg.CheckpointLimit {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: bad checkpoint reference %+v", req.Kind, note.Ref))
		}
		var err error
		if req.Kind == kindCheckpointOffer {
			err = n.acceptCheckpoint(ctx, req.Sender, note)
		} else {
			err = n.syncCheckpoint(ctx, req.Sender, note)
		}
		if err != nil {
			return asCallError(err)
		}
		return reply(kindAck, nil)
	case kindCheckpointGet:
		var q checkpointQuery
		if err := strictJSON(req.Data, &q); err != nil {
			return asCallError(api.Errorf(http.StatusBadRequest, "%s: %v", req.Kind, err))
		}
		note, ok := n.latestCheckpoint(ctx, q.Job, q.Share)
		if !ok {
			return nil
		}
		b, _ := json.Marshal(note)
		return reply(kindCheckpointNote, b)
	}
	return fmt.Errorf("unknown call %q", req.Kind)
}
