package market

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Checkpoints. A share's runner stores what the job wrote under
// $GPUMESH_CHECKPOINT_DIR as a manifest of content-addressed chunks (node
// does that, with node/blob), ships the chunks its holders lack to other
// nodes, and reports the checkpoint here (CheckpointTaken). The
// coordinator keeps it in the job's record only from the share's live
// attempt (fencing) and only once a node other than the runner holds it,
// keeps the newest Config.CheckpointKeep of each share, and hands the
// newest to the next attempt of the share (Award.Restore, then
// Execution.Restore), which restores it before the job starts. The record
// replicates with the rest of the job, so a successor knows the
// checkpoints too.

// MaxCheckpointHolders bounds the holders a checkpoint names.
const MaxCheckpointHolders = 16

// Checkpoint is a checkpoint of one share that its coordinator accepted.
type Checkpoint struct {
	Share int    `json:"share"`
	Epoch uint64 `json:"epoch"`
	// Manifest names the tree: "sha256:" and 64 hex digits.
	Manifest string `json:"manifest"`
	// Bytes is the checkpoint's size; NewBytes what this checkpoint
	// shipped that its holders did not have already.
	Bytes    int64 `json:"bytes"`
	NewBytes int64 `json:"new_bytes"`
	// Holders are the nodes that hold the manifest and every chunk of it,
	// the runner first when it keeps a copy.
	Holders []string  `json:"holders"`
	At      time.Time `json:"at"`
}

// Validate checks a checkpoint as a runner reports it.
func (c *Checkpoint) Validate() error {
	hexPart, ok := strings.CutPrefix(c.Manifest, "sha256:")
	if _, err := hex.DecodeString(hexPart); !ok || len(hexPart) != 64 || err != nil {
		return badf("checkpoint manifest %.80q: want sha256: and 64 hex digits", c.Manifest)
	}
	if c.Share < 0 || c.Share > MaxCards*MaxReplicas || c.Epoch == 0 {
		return badf("checkpoint of share %d epoch %d: out of range", c.Share, c.Epoch)
	}
	if c.Bytes < 0 || c.NewBytes < 0 || c.NewBytes > c.Bytes {
		return badf("checkpoint of %d bytes, %d new: want 0 ≤ new ≤ bytes", c.Bytes, c.NewBytes)
	}
	if len(c.Holders) == 0 || len(c.Holders) > MaxCheckpointHolders {
		return badf("checkpoint names %d holders: want 1 to %d", len(c.Holders), MaxCheckpointHolders)
	}
	for _, h := range c.Holders {
		if err := checkID("checkpoint holder", h); err != nil {
			return err
		}
	}
	if c.At.IsZero() {
		return badf("checkpoint without a time")
	}
	return nil
}

// checkpoint records a checkpoint a runner reports: only from the share's
// live attempt on the node it was awarded to, and only once a node other
// than the runner holds it. The share keeps its newest
// Config.CheckpointKeep checkpoints.
func (c *coordinator) checkpoint(e CheckpointTaken) error {
	j := c.jobs[e.Job]
	if j == nil {
		return fmt.Errorf("%w: %s", ErrUnknownJob, e.Job)
	}
	if j.state.Terminal() {
		return fmt.Errorf("%w: %s is %s", ErrJobEnded, e.Job, j.state)
	}
	cp := e.Checkpoint
	p := j.byAttempt[shareEpoch{cp.Share, cp.Epoch}]
	if p == nil || p.Node != e.From || j.live[cp.Share] != p || p.State == PlacementAwarded {
		return fmt.Errorf("%w: checkpoint of %s share %d epoch %d from %s: not the share's live attempt", ErrStale, e.Job, cp.Share, cp.Epoch, e.From)
	}
	if !slices.ContainsFunc(cp.Holders, func(h string) bool { return h != e.From }) {
		return fmt.Errorf("%w: checkpoint of %s share %d is held by its runner alone", ErrRefused, e.Job, cp.Share)
	}
	for _, old := range j.checkpoints {
		if old.Share == cp.Share && old.Epoch == cp.Epoch && old.Manifest == cp.Manifest {
			return nil // the same again
		}
	}
	cp.Holders = slices.Clone(cp.Holders)
	j.checkpoints = append(j.checkpoints, cp)
	keep, kept := c.n.cfg.CheckpointKeep, 0
	for i := len(j.checkpoints) - 1; i >= 0; i-- {
		if j.checkpoints[i].Share != cp.Share {
			continue
		}
		if kept++; kept > keep {
			j.checkpoints = slices.Delete(j.checkpoints, i, i+1)
		}
	}
	c.touch(j)
	return nil
}

// restoreFor is the checkpoint a new attempt of share starts from: the
// share's newest; for a job whose shares are numbered afresh as they are
// placed again (LayoutAny), else the newest of a share that no longer runs.
func (j *job) restoreFor(share int) *Checkpoint {
	var best *Checkpoint
	for i := range j.checkpoints {
		cp := &j.checkpoints[i]
		if cp.Share == share && (best == nil || !cp.At.Before(best.At)) {
			best = cp
		}
	}
	if best == nil && j.flexible() {
		for i := range j.checkpoints {
			cp := &j.checkpoints[i]
			if j.live[cp.Share] == nil && (best == nil || !cp.At.Before(best.At)) {
				best = cp
			}
		}
	}
	if best == nil {
		return nil
	}
	out := *best
	out.Holders = slices.Clone(best.Holders)
	return &out
}
