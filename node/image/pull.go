package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpumesh/gpumesh/node/blob"
)

// Peers brings layers from this node's peers, so that a LAN whose nodes
// start one image pulls each layer from the registry about once (node
// implements it over node/blob/transfer). Its methods are called from
// several goroutines at once and may block for as long as ctx allows.
type Peers interface {
	// Layer gets the layer d (sha256 of its compressed bytes, size bytes)
	// from peers into the store, adding the blob manifest that holds it
	// to lease (which exists), and returns that manifest. When no peer
	// holds it and this node should pull it itself, it returns a nil
	// error, a zero manifest and pulled, which the caller must call once
	// with the manifest it stored (or the error it got), so that peers
	// waiting for it learn where to fetch it. Any error means: pull it
	// from the registry without the peers.
	Layer(ctx context.Context, d v1.Hash, size int64, lease string) (m blob.Digest, pulled func(blob.Digest, error), err error)
}

// ErrClosed is returned by Pull after Close.
var ErrClosed = errors.New("image: cache closed")

// ErrBadLayer is matched by the error of a layer whose bytes do not hash
// to the digest the image's manifest names.
var ErrBadLayer = errors.New("does not match its digest")

// Pull brings the image ref names (by digest: "repo@sha256:…", as a spec
// names it) into the store for this node's platform: its manifest (from a
// manifest list, the platform's), its config and every layer it lacks,
// each checked against its digest. Layers come from peers (Config.Peers)
// first, then from the registry's mirrors, then the registry. An image
// pulled before is answered from the cache without asking anyone.
//
// Errors say what failed in words: a malformed reference, an unknown
// image, a registry answering 401 or timing out, a manifest list without
// this node's platform, a layer whose digest does not match (ErrBadLayer),
// a store over its quota.
func (c *Cache) Pull(ctx context.Context, ref string) (*Image, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	parsed, err := name.NewDigest(ref, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: want repository@sha256:…: %v", ErrBadReference, ref, err)
	}
	v, err := c.flights.do(ctx, "pull "+ref, func() (any, error) { return c.pull(ctx, parsed, ref) })
	if err != nil {
		return nil, err
	}
	return v.(*Image), nil
}

func (c *Cache) pull(ctx context.Context, ref name.Digest, spelled string) (*Image, error) {
	if img, ok := c.readImage(spelled); ok && c.complete(img) {
		if err := c.keep(img); err != nil {
			return nil, fmt.Errorf("image: %s: %w", spelled, err)
		}
		return img, nil
	}
	c.pulls.Add(1)
	img, err := c.manifest(ctx, ref)
	if err != nil {
		return nil, err
	}
	img.Ref = spelled
	// The lease exists before the first layer is stored, so that nothing
	// pulled is collected under the pull's feet.
	if err := c.cfg.Blobs.SetLease(c.pullLease(img)); err != nil {
		return nil, fmt.Errorf("image: %s: %w", spelled, err)
	}
	if err := c.layers(ctx, ref.Context(), img); err != nil {
		return nil, err
	}
	if err := c.keep(img); err != nil {
		return nil, fmt.Errorf("image: %s: %w", spelled, err)
	}
	if err := c.writeImage(img); err != nil {
		return nil, fmt.Errorf("image: %s: %w", spelled, err)
	}
	c.log.Info("image pulled", "ref", spelled, "image", img.Digest, "layers", len(img.Layers))
	return img, nil
}

// pullLease is the lease a pull keeps its layers under while it runs.
func (c *Cache) pullLease(img *Image) blob.Lease {
	return blob.Lease{ID: leaseID(img), Expires: c.cfg.Now().Add(c.cfg.LayerTTL)}
}

// complete tells whether every layer of img is whole in the store.
func (c *Cache) complete(img *Image) bool {
	for _, l := range img.Layers {
		h, err := v1.NewHash(l.Digest)
		if err != nil {
			return false
		}
		if m, ok := c.LayerBlob(h); !ok || m.String() != l.Blob {
			return false
		}
	}
	return true
}

// options are the registry options of one request against repo.
func (c *Cache) options(ctx context.Context) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(c.cfg.Keychain), remote.WithPlatform(c.cfg.Platform),
		// A few quick retries, so that a failing mirror hands over to the
		// next source within a second rather than after go-containerregistry's
		// default backoff.
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 3, Jitter: 0.1, Steps: 3})}
	if c.cfg.Transport != nil {
		opts = append(opts, remote.WithTransport(c.cfg.Transport))
	}
	return opts
}

// sources are the repositories to ask for repo's content: its mirrors in
// order, then itself.
func (c *Cache) sources(repo name.Repository) []name.Repository {
	var out []name.Repository
	now := c.cfg.Now()
	for _, m := range c.cfg.Mirrors.For(repo) {
		c.mu.Lock()
		until := c.mirrorDown[m.Host]
		c.mu.Unlock()
		if now.Before(until) {
			continue
		}
		r, err := onMirror(repo, m)
		if err != nil {
			c.log.Warn("image: mirror", "mirror", m.String(), "err", err)
			continue
		}
		out = append(out, r)
	}
	return append(out, repo)
}

// mirrorDownFor is how long a mirror that failed (other than by not
// having what was asked) is skipped.
const mirrorDownFor = time.Minute

// mirrorFailed skips a failing mirror for a while; one that merely lacks
// an image stays in use.
func (c *Cache) mirrorFailed(src name.Repository, err error) {
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound || strings.Contains(err.Error(), "no such image") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mirrorDown == nil {
		c.mirrorDown = map[string]time.Time{}
	}
	c.mirrorDown[src.RegistryStr()] = c.cfg.Now().Add(mirrorDownFor)
}

// manifest reads the image's manifest and config, resolving a manifest
// list to this node's platform.
func (c *Cache) manifest(ctx context.Context, ref name.Digest) (*Image, error) {
	var errs []error
	for _, src := range c.sources(ref.Context()) {
		img, err := c.manifestFrom(ctx, src.Digest(ref.DigestStr()))
		if err == nil {
			return img, nil
		}
		if src != ref.Context() {
			c.mirrorFailed(src, err)
			c.log.Warn("image: mirror failed; trying the next source", "ref", ref.String(), "mirror", src.RegistryStr(), "err", err)
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, errNoPlatform) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

var errNoPlatform = errors.New("no image for this platform")

func (c *Cache) manifestFrom(ctx context.Context, ref name.Digest) (*Image, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	opts := c.options(rctx)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, RegistryError(ref, err)
	}
	var im v1.Image
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, RegistryError(ref, err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, RegistryError(ref, err)
		}
		child, err := pickPlatform(m, c.cfg.Platform)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (%w)", ref, err, errNoPlatform)
		}
		cref := ref.Context().Digest(child.Digest.String())
		if im, err = remote.Image(cref, opts...); err != nil {
			return nil, RegistryError(cref, err)
		}
	case desc.MediaType.IsImage():
		if im, err = desc.Image(); err != nil {
			return nil, RegistryError(ref, err)
		}
	default:
		return nil, fmt.Errorf("%s is a %s, not an image", ref, desc.MediaType)
	}
	man, err := im.Manifest()
	if err != nil {
		return nil, RegistryError(ref, err)
	}
	cf, err := im.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the image's config: %w", ref, RegistryError(ref, err))
	}
	d, err := im.Digest()
	if err != nil {
		return nil, err
	}
	img := &Image{Digest: d.String(), Config: cf.Config}
	for _, l := range man.Layers {
		if !isLayerType(l.MediaType) {
			return nil, fmt.Errorf("%s: layer %s is of media type %s, which this node cannot unpack", ref, l.Digest, l.MediaType)
		}
		if l.Digest.Algorithm != "sha256" {
			return nil, fmt.Errorf("%s: layer %s: only sha256 digests are supported", ref, l.Digest)
		}
		img.Layers = append(img.Layers, Layer{Digest: l.Digest.String(), Size: l.Size, MediaType: string(l.MediaType)})
	}
	return img, nil
}

func isLayerType(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.DockerUncompressedLayer:
		return true
	}
	return false
}

// layers brings every layer of img the store lacks, Parallel at once.
func (c *Cache) layers(ctx context.Context, repo name.Repository, img *Image) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, c.cfg.Parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(img.Layers))
	for i := range img.Layers {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			if errs[i] = c.layer(ctx, repo, img, &img.Layers[i]); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// layer brings one layer into the store and records where it is.
func (c *Cache) layer(ctx context.Context, repo name.Repository, img *Image, l *Layer) error {
	d, err := v1.NewHash(l.Digest)
	if err != nil {
		return err
	}
	v, err := c.flights.do(ctx, "layer "+l.Digest, func() (any, error) {
		if m, ok := c.LayerBlob(d); ok {
			c.cachedLayers.Add(1)
			return m, nil
		}
		// What comes in is kept by a lease of its own until it is checked
		// and in the image's lease; a layer that fails is left unkept.
		lease := "image-pull/" + d.Hex
		if err := c.cfg.Blobs.SetLease(blob.Lease{ID: lease, Expires: c.cfg.Now().Add(c.cfg.LayerTTL)}); err != nil {
			return nil, err
		}
		defer c.cfg.Blobs.DeleteLease(lease)
		m, err := c.fetchOne(ctx, repo, d, l.Size, lease)
		if err != nil {
			return nil, err
		}
		// Kept by the image before the pull's own lease goes.
		return m, c.cfg.Blobs.AddToLease(leaseID(img), []blob.Digest{m}, nil)
	})
	if err != nil {
		return fmt.Errorf("image: layer %s: %w", l.Digest, err)
	}
	l.Blob = v.(blob.Digest).String()
	return c.cfg.Blobs.AddToLease(leaseID(img), []blob.Digest{v.(blob.Digest)}, nil)
}

// fetchOne brings layer d from peers or the registry under lease.
func (c *Cache) fetchOne(ctx context.Context, repo name.Repository, d v1.Hash, size int64, lease string) (blob.Digest, error) {
	var pulled func(blob.Digest, error)
	if c.cfg.Peers != nil {
		m, done, err := c.cfg.Peers.Layer(ctx, d, size, lease)
		switch {
		case err == nil && done == nil:
			if err := c.checkStored(m, d, size); err != nil {
				c.log.Warn("image: a peer's layer does not match; pulling it from the registry", "layer", d.String(), "err", err)
				break
			}
			c.peerBytes.Add(size)
			c.peerLayers.Add(1)
			return m, c.recordLayer(d, m)
		case err == nil:
			pulled = done
		case ctx.Err() != nil:
			return blob.Digest{}, ctx.Err()
		default:
			c.log.Warn("image: peers could not serve a layer; pulling it from the registry", "layer", d.String(), "err", err)
		}
	}
	m, err := c.fetchLayer(ctx, repo, d, size, lease)
	if err == nil {
		err = c.recordLayer(d, m)
	}
	if pulled != nil {
		pulled(m, err)
	}
	return m, err
}

// fetchLayer streams a layer from the first source that serves it into
// the store, hashing it on the way.
func (c *Cache) fetchLayer(ctx context.Context, repo name.Repository, d v1.Hash, size int64, lease string) (blob.Digest, error) {
	var errs []error
	for _, src := range c.sources(repo) {
		m, n, err := c.fetchFrom(ctx, src.Digest(d.String()), d, size, lease)
		c.registryBytes.Add(n)
		if err == nil {
			c.registryLayers.Add(1)
			return m, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, blob.ErrQuota) {
			break
		}
		if src != repo {
			c.mirrorFailed(src, err)
			c.log.Warn("image: mirror failed; trying the next source", "layer", d.String(), "mirror", src.RegistryStr(), "err", err)
		}
	}
	return blob.Digest{}, errors.Join(errs...)
}

func (c *Cache) fetchFrom(ctx context.Context, ref name.Digest, d v1.Hash, size int64, lease string) (blob.Digest, int64, error) {
	if err := c.cfg.Blobs.Fits(size); err != nil {
		return blob.Digest{}, 0, fmt.Errorf("the image's layers do not fit in the content store: %w", err)
	}
	rl, err := remote.Layer(ref, c.options(ctx)...)
	if err != nil {
		return blob.Digest{}, 0, RegistryError(ref, err)
	}
	rc, err := rl.Compressed()
	if err != nil {
		return blob.Digest{}, 0, RegistryError(ref, err)
	}
	defer rc.Close()
	cr := &checkedReader{r: rc, h: sha256.New()}
	st, err := c.cfg.Blobs.PutFile(ctx, layerFile, cr, lease)
	if err != nil {
		if cr.err != nil {
			err = cr.err // the registry's read error, not the store's wrapping of it
		}
		return blob.Digest{}, cr.n, fmt.Errorf("%s: %w", ref, RegistryError(ref, err))
	}
	if err := cr.check(d, size); err != nil {
		return blob.Digest{}, cr.n, fmt.Errorf("%s: %w", ref, err)
	}
	return st.Manifest, cr.n, nil
}

// checkStored hashes the layer stored under m against d.
func (c *Cache) checkStored(m blob.Digest, d v1.Hash, size int64) error {
	rc, _, err := c.cfg.Blobs.OpenFile(m, layerFile)
	if err != nil {
		return err
	}
	defer rc.Close()
	cr := &checkedReader{r: rc, h: sha256.New()}
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return err
	}
	return cr.check(d, size)
}

// checkedReader hashes and counts what it reads.
type checkedReader struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (r *checkedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

func (r *checkedReader) check(d v1.Hash, size int64) error {
	got := hex.EncodeToString(r.h.Sum(nil))
	if got != d.Hex || (size > 0 && r.n != size) {
		return fmt.Errorf("%w: want %s (%d bytes), got sha256:%s (%d bytes)", ErrBadLayer, d, size, got, r.n)
	}
	return nil
}
