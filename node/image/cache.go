package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpumesh/gpumesh/node/blob"
)

// Config configures a Cache. Dir and Blobs are required.
type Config struct {
	// Dir holds the cache's records and root file systems (the node gives
	// DATA/images). Created (0700) when missing.
	Dir string
	// Blobs is the node's content store; layers are kept there.
	Blobs *blob.Store
	// Keychain gives registry credentials (see DockerConfig). Default:
	// anonymous.
	Keychain authn.Keychain
	// Mirrors are tried before a registry, in order.
	Mirrors Mirrors
	// Transport carries registry requests. Default: http.DefaultTransport.
	Transport http.RoundTripper
	// Platform is the platform chosen from a manifest list. Default:
	// HostPlatform().
	Platform v1.Platform
	// Peers, when set, are asked for a layer before its registry.
	Peers Peers
	// MaxBytes bounds the unpacked root file systems kept (`gpumesh node
	// --image-cache-max`): those no attempt uses go, least recently used
	// first, to make room; an image that cannot fit alone is refused.
	// 0: DefaultMaxBytes.
	MaxBytes int64
	// UIDShift, when not 0, is added to the owner (uid and gid) of every
	// unpacked file, as a container's user namespace maps them (container
	// uid 0 is host uid UIDShift); owners above 65535 become 65534
	// (nobody). 0: files are left to the node's user (root owns them).
	UIDShift uint32
	// Parallel is how many layers one pull fetches at once. Default 3.
	Parallel int
	// Timeout bounds each registry request. Default 60 s.
	Timeout time.Duration
	// LayerTTL is how long the blob store keeps an image's layers after
	// its last use by an attempt; after it they are cache the store may
	// collect. Default 24 h.
	LayerTTL time.Duration
	// Logger gets pulls, mirror failures, evictions. Default: discard.
	Logger *slog.Logger
	// Now is the clock of layer leases. Default: time.Now.
	Now func() time.Time
}

// DefaultMaxBytes is Config.MaxBytes's default: 64 GiB of root file
// systems.
const DefaultMaxBytes = 64 << 30

// Image is an image pulled for this node's platform.
type Image struct {
	// Ref is the reference the spec named ("repo@sha256:…", maybe a
	// manifest list's digest).
	Ref string `json:"ref"`
	// Digest is the image manifest's digest (the platform's image when
	// Ref names a list).
	Digest string `json:"digest"`
	// Config is the image's run configuration.
	Config v1.Config `json:"config"`
	// Layers are the image's layers, lowest first.
	Layers []Layer `json:"layers"`
}

// Layer is one layer of an image and where the store keeps it.
type Layer struct {
	Digest    string `json:"digest"` // sha256:… of the compressed bytes
	Size      int64  `json:"size"`
	MediaType string `json:"media_type"`
	Blob      string `json:"blob"` // the blob manifest of its one file
}

// layerFile is the name of a layer's one file in its blob manifest.
const layerFile = "layer"

// Stats counts where layer bytes came from.
type Stats struct {
	// PeerBytes and RegistryBytes are the layer bytes fetched from peers
	// and from registries (or their mirrors).
	PeerBytes, RegistryBytes int64
	// PeerLayers and RegistryLayers count the layers fetched so.
	PeerLayers, RegistryLayers int64
	// CachedLayers counts layers a pull found in the store already.
	CachedLayers int64
	// Pulls counts pulls; Unpacks counts root file systems unpacked.
	Pulls, Unpacks int64
	// RootfsBytes is the size of the root file systems kept.
	RootfsBytes int64
}

// Cache pulls images into the node's content store and keeps their root
// file systems. Its methods are safe for concurrent use.
type Cache struct {
	cfg Config
	log *slog.Logger

	peerBytes, registryBytes   atomic.Int64
	peerLayers, registryLayers atomic.Int64
	cachedLayers, pulls        atomic.Int64
	unpacks                    atomic.Int64

	flights flights // pulls and unpacks in progress, by key

	mu     sync.Mutex
	roots  map[string]*rootEntry // by image digest hex
	used   int64                 // bytes of complete root file systems
	closed bool
	// mirrorDown are mirrors that failed, skipped until then.
	mirrorDown map[string]time.Time
	// layerBlobs are the blob manifests of the layers recorded here.
	layerBlobs map[blob.Digest]bool
}

// Open opens (or creates) the cache in cfg.Dir. Root file systems whose
// unpacking a crash cut short are removed.
func Open(cfg Config) (*Cache, error) {
	switch {
	case cfg.Dir == "":
		return nil, errors.New("image: Config.Dir is required")
	case cfg.Blobs == nil:
		return nil, errors.New("image: Config.Blobs is required")
	case cfg.MaxBytes < 0 || cfg.Parallel < 0 || cfg.Timeout < 0 || cfg.LayerTTL < 0:
		return nil, errors.New("image: negative Config value")
	}
	if cfg.Keychain == nil {
		cfg.Keychain = anonymous{}
	}
	if cfg.Platform.OS == "" {
		cfg.Platform = HostPlatform()
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 3
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.LayerTTL == 0 {
		cfg.LayerTTL = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "layers"), filepath.Join(cfg.Dir, "images"), filepath.Join(cfg.Dir, "rootfs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	c := &Cache{cfg: cfg, log: cfg.Logger, roots: map[string]*rootEntry{}, layerBlobs: map[blob.Digest]bool{}}
	if err := c.loadRoots(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(cfg.Dir, "layers"))
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(cfg.Dir, "layers", e.Name())); err == nil {
			if m, err := blob.ParseDigest(strings.TrimSpace(string(b))); err == nil {
				c.layerBlobs[m] = true
			}
		}
	}
	return c, nil
}

// Close makes later calls fail; root file systems stay on disk.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	used := c.used
	c.mu.Unlock()
	return Stats{
		PeerBytes: c.peerBytes.Load(), RegistryBytes: c.registryBytes.Load(),
		PeerLayers: c.peerLayers.Load(), RegistryLayers: c.registryLayers.Load(),
		CachedLayers: c.cachedLayers.Load(), Pulls: c.pulls.Load(), Unpacks: c.unpacks.Load(),
		RootfsBytes: used,
	}
}

// LayerBlob returns the blob manifest that holds layer d (sha256:…) in
// the store, if this node has it whole.
func (c *Cache) LayerBlob(d v1.Hash) (blob.Digest, bool) {
	b, err := os.ReadFile(c.layerPath(d))
	if err != nil {
		return blob.Digest{}, false
	}
	m, err := blob.ParseDigest(strings.TrimSpace(string(b)))
	if err != nil {
		return blob.Digest{}, false
	}
	if missing, err := c.cfg.Blobs.Missing(m); err != nil || len(missing) > 0 {
		return blob.Digest{}, false
	}
	return m, true
}

// IsLayerBlob tells whether blob manifest m holds an image layer this
// node recorded: a peer may read it (a layer is asked for by the digest
// its image's manifest names, which only those who may read the image
// learn).
func (c *Cache) IsLayerBlob(m blob.Digest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.layerBlobs[m]
}

func (c *Cache) layerPath(d v1.Hash) string { return filepath.Join(c.cfg.Dir, "layers", d.Hex) }

// recordLayer notes that blob manifest m holds layer d.
func (c *Cache) recordLayer(d v1.Hash, m blob.Digest) error {
	if err := writeFileAtomic(c.layerPath(d), []byte(m.String()+"\n")); err != nil {
		return err
	}
	c.mu.Lock()
	c.layerBlobs[m] = true
	c.mu.Unlock()
	return nil
}

func (c *Cache) imagePath(ref string) string {
	_, dig, _ := strings.Cut(ref, "@sha256:")
	return filepath.Join(c.cfg.Dir, "images", dig+"-"+strings.ReplaceAll(platformString(c.cfg.Platform), "/", "-")+".json")
}

func (c *Cache) readImage(ref string) (*Image, bool) {
	b, err := os.ReadFile(c.imagePath(ref))
	if err != nil {
		return nil, false
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil || img.Ref != ref {
		return nil, false
	}
	return &img, true
}

func (c *Cache) writeImage(img *Image) error {
	b, err := json.Marshal(img)
	if err != nil {
		return err
	}
	return writeFileAtomic(c.imagePath(img.Ref), b)
}

// writeFileAtomic writes path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// leaseID is the blob store lease that keeps an image's layers.
func leaseID(img *Image) string { return "image/" + img.Digest }

// keep (re)sets the lease on img's layers to expire LayerTTL from now.
func (c *Cache) keep(img *Image) error {
	l := blob.Lease{ID: leaseID(img), Expires: c.cfg.Now().Add(c.cfg.LayerTTL)}
	for _, ly := range img.Layers {
		m, err := blob.ParseDigest(ly.Blob)
		if err != nil {
			return fmt.Errorf("image: layer %s: %w", ly.Digest, err)
		}
		l.Manifests = append(l.Manifests, m)
	}
	return c.cfg.Blobs.SetLease(l)
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
