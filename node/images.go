package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/layers"
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

// openImages opens the image cache over the content store, and the
// service that shares its layers with peers (node/layers): a layer is
// fetched from the peers that hold it, or pulled by one peer while the
// others wait for it, before any asks the registry alone.
func (n *Node) openImages() error {
	svc, err := layers.New(layers.Config{
		Host:     n.mesh.Host(),
		Protocol: protocol.ID("/gpumesh/" + n.mesh.Network() + "/layers/1"),
		Fetcher:  n.xfer,
		Local:    layerLocal{n},
		Members:  n.mesh.AlivePeers,
		Dialable: n.dialable,
		Logger:   n.log,
	})
	if err != nil {
		return fmt.Errorf("node: layer sharing: %w", err)
	}
	icfg := n.cfg.Images
	icfg.Dir = filepath.Join(n.cfg.DataDir, "images")
	icfg.Blobs = n.blobs
	icfg.UIDShift = n.exec.Config().ContainerIDBase
	if icfg.Peers == nil {
		icfg.Peers = svc
	}
	if icfg.Logger == nil {
		icfg.Logger = n.log
	}
	c, err := image.Open(icfg)
	if err != nil {
		svc.Close()
		return fmt.Errorf("node: image cache: %w", err)
	}
	n.images, n.layerPeers = c, svc
	n.layerAuth.Store(c)
	return nil
}

// closeImages stops sharing layers, then closes the cache.
func (n *Node) closeImages() {
	if n.layerPeers != nil {
		n.layerPeers.Close()
	}
	if n.images != nil {
		n.images.Close()
	}
}

// layerLocal answers the layer service from the image cache, once open.
type layerLocal struct{ n *Node }

func (l layerLocal) LayerBlob(d v1.Hash) (blob.Digest, bool) {
	if c := l.n.layerAuth.Load(); c != nil {
		return c.LayerBlob(d)
	}
	return blob.Digest{}, false
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
	// The cards' edits see the image's variables under the job's own
	// (NVIDIA_DRIVER_CAPABILITIES, LD_LIBRARY_PATH, PATH).
	env := slices.Clone(proc.Env)
	for _, k := range slices.Sorted(maps.Keys(e.Exec.Env)) {
		env = append(env, k+"="+e.Exec.Env[k])
	}
	edits, err := n.cardEdits.For(cards, n.devices.Cards(), env)
	if err != nil { // this node's devices or specs: another may do
		root.Release()
		return nil, nil, &notStartedError{fmt.Errorf("the cards in image %s: %w", ref, err)}
	}
	for _, p := range edits.Paths {
		n.log.Debug("cards enter the image", "job", e.Job, "share", e.Share, "vendor", p.Vendor, "via", p.Via, "detail", p.Detail)
	}
	return &executor.Container{Rootfs: root.Dir(), Args: proc.Args, Env: proc.Env, Cwd: proc.Cwd,
		UID: proc.UID, GID: proc.GID, Groups: proc.Groups, Cards: edits}, root, nil
}

// imagesStatus is the images part of the node's status.
func (n *Node) imagesStatus() *api.ImagesStatus {
	if n.images == nil {
		return nil
	}
	s := n.images.Stats()
	st := &api.ImagesStatus{PeerBytes: s.PeerBytes, RegistryBytes: s.RegistryBytes, PeerLayers: s.PeerLayers,
		RegistryLayers: s.RegistryLayers, CachedLayers: s.CachedLayers, Pulls: s.Pulls, Unpacks: s.Unpacks, RootfsBytes: s.RootfsBytes}
	if caps := n.exec.Capabilities(); caps.Runtime != "" && n.cfg.Policy.NoImages == "" {
		st.Runtime = caps.Runtime
	} else if st.NoImages = n.cfg.Policy.NoImages; st.NoImages == "" {
		st.NoImages = caps.ImagesReason
	}
	st.Cards = n.cardPaths(time.Now())
	return st
}

// cardPathsEvery is how long what cardPaths found stands: the CDI specs
// are files the supplier may generate again while the node runs.
const cardPathsEvery = 30 * time.Second

// cardPaths says how each vendor of the node's cards enters images,
// reading the CDI specs again once what it found is cardPathsEvery old.
func (n *Node) cardPaths(now time.Time) []api.CardPath {
	c := &n.cardPathCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || now.Sub(c.at) >= cardPathsEvery {
		c.paths = nil
		for _, p := range n.cardEdits.Paths(n.devices.Cards()) {
			c.paths = append(c.paths, api.CardPath{Vendor: string(p.Vendor), Via: string(p.Via), Detail: p.Detail})
		}
		c.at = now
	}
	return c.paths
}

// cardPathCache holds what cardPaths found last.
type cardPathCache struct {
	mu    sync.Mutex
	at    time.Time
	paths []api.CardPath
}

// isNotStarted tells whether err is a notStartedError.
func isNotStarted(err error) bool {
	var ns *notStartedError
	return errors.As(err, &ns)
}
