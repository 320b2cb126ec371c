package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
)

// Images. A job that names images (market.JobSpec.Images) runs each share
// in the image of its cards' vendor, under the executor's OCI runtime.
// Before the attempt starts, the node pulls the image (node/image: from
// peers holding its layers, then the registry's mirrors, then the
// registry; every layer a blob of the content store) and readies its root
// file system, which attempts share until the cache needs the room. A
// node whose executor runs no images does not bid for such jobs (its
// market Policy's NoImages says why).

// pullTimeout bounds readying one attempt's image: a pull of many
// gigabytes on a slow link takes long, a registry that does not answer
// fails within the cache's own request timeout.
const pullTimeout = time.Hour

// openImages opens the image cache over the content store.
func (n *Node) openImages() error {
	icfg := n.cfg.Images
	icfg.Dir = filepath.Join(n.cfg.DataDir, "images")
	icfg.Blobs = n.blobs
	icfg.UIDShift = n.exec.Config().ContainerIDBase
	if icfg.Logger == nil {
		icfg.Logger = n.log
	}
	c, err := image.Open(icfg)
	if err != nil {
		return fmt.Errorf("node: image cache: %w", err)
	}
	n.images = c
	return nil
}

// notStartedError is an attempt this node could not ready for reasons of
// its own (its image): the market places the share elsewhere.
type notStartedError struct{ err error }

func (e *notStartedError) Error() string { return e.err.Error() }
func (e *notStartedError) Unwrap() error { return e.err }

// imageOf readies the image of an attempt on cards: the image its
// cards' vendor runs, pulled and unpacked, and the process it makes of
// the job's command. The root file system stays the attempt's until the
// Root is released.
func (n *Node) imageOf(e market.Execution, cards []device.Card) (*executor.Container, *image.Root, error) {
	ref := ""
	for _, c := range cards {
		r, ok := e.Exec.ImageFor(c.Vendor)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("the job names no image for vendor %s (card %s)", c.Vendor, c.ID)
		case ref != "" && r != ref:
			return nil, nil, fmt.Errorf("the share's cards are of vendors with different images")
		}
		ref = r
	}
	ctx, cancel := context.WithTimeout(n.ctx, pullTimeout)
	defer cancel()
	img, err := n.images.Pull(ctx, ref)
	if err != nil {
		return nil, nil, &notStartedError{fmt.Errorf("image %s: %w", ref, err)}
	}
	root, err := n.images.Acquire(ctx, img)
	if err != nil {
		return nil, nil, &notStartedError{fmt.Errorf("image %s: %w", ref, err)}
	}
	proc, err := img.Process(root.Dir(), e.Exec.Command)
	if err != nil {
		root.Release()
		return nil, nil, fmt.Errorf("image %s: %w", ref, err)
	}
	return &executor.Container{Rootfs: root.Dir(), Args: proc.Args, Env: proc.Env, Cwd: proc.Cwd,
		UID: proc.UID, GID: proc.GID, Groups: proc.Groups}, root, nil
}

// isNotStarted tells whether err is a notStartedError.
func isNotStarted(err error) bool {
	var ns *notStartedError
	return errors.As(err, &ns)
}
