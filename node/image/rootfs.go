package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/gpumesh/gpumesh/node/blob"
)

// ErrTooBig is matched by the error of an image whose root file system is
// larger than the cache may hold (Config.MaxBytes).
var ErrTooBig = errors.New("image larger than the image cache")

// rootEntry is one root file system on disk.
type rootEntry struct {
	hex     string
	size    int64
	refs    int
	lastUse time.Time
}

// Root is a root file system in use by an attempt: it is not removed
// until Released.
type Root struct {
	c    *Cache
	e    *rootEntry
	dir  string
	once bool
}

// Dir is the root file system's directory. The caller must not write in
// it: attempts share it (a container mounts it read-only under a writable
// layer of its own).
func (r *Root) Dir() string { return r.dir }

// Release gives the root file system back; once no attempt uses it, the
// cache may remove it to make room. Release may be called more than once.
func (r *Root) Release() {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if !r.once {
		r.once = true
		r.e.refs--
		r.e.lastUse = r.c.cfg.Now()
	}
}

func (c *Cache) rootDir(hex string) string  { return filepath.Join(c.cfg.Dir, "rootfs", hex) }
func (c *Cache) sizePath(hex string) string { return filepath.Join(c.cfg.Dir, "rootfs", hex+".size") }

// loadRoots indexes the complete root file systems on disk and removes
// the others (an unpack a crash cut short).
func (c *Cache) loadRoots() error {
	dir := filepath.Join(c.cfg.Dir, "rootfs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(c.sizePath(name))
		size, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || perr != nil {
			c.log.Info("image: removing an unfinished root file system", "dir", filepath.Join(dir, name))
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("image: %w", err)
			}
			continue
		}
		info, _ := e.Info()
		c.roots[name] = &rootEntry{hex: name, size: size, lastUse: info.ModTime()}
		c.used += size
	}
	return nil
}

// Acquire returns img's root file system, unpacking it first when it is
// not on disk, and keeps it until the Root is released. It also renews
// the lease on img's layers. Unpacking makes room by removing root file
// systems no attempt uses, least recently used first; an image whose
// root file system cannot fit under Config.MaxBytes fails with ErrTooBig.
func (c *Cache) Acquire(ctx context.Context, img *Image) (*Root, error) {
	hex := strings.TrimPrefix(img.Digest, "sha256:")
	if len(hex) != 64 {
		return nil, fmt.Errorf("image: bad image digest %q", img.Digest)
	}
	if err := c.keep(img); err != nil {
		return nil, fmt.Errorf("image: %s: %w", img.Ref, err)
	}
	for {
		if r, ok := c.take(hex); ok {
			return r, nil
		}
		_, err := c.flights.do(ctx, "unpack "+hex, func() (any, error) { return nil, c.unpack(ctx, img, hex) })
		if err != nil {
			return nil, err
		}
	}
}

// take refs the root file system hex if it is on disk.
func (c *Cache) take(hex string) (*Root, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.roots[hex]
	if !ok {
		return nil, false
	}
	e.refs++
	e.lastUse = c.cfg.Now()
	return &Root{c: c, e: e, dir: c.rootDir(hex)}, true
}

// unpack writes img's root file system and indexes it.
func (c *Cache) unpack(ctx context.Context, img *Image, hex string) error {
	if _, ok := c.take(hex); ok { // another caller finished it meanwhile
		c.mu.Lock()
		c.roots[hex].refs--
		c.mu.Unlock()
		return nil
	}
	dir := c.rootDir(hex)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	layers := make([]v1Layer, 0, len(img.Layers))
	for _, l := range img.Layers {
		sl, err := c.storedLayer(l)
		if err != nil {
			os.RemoveAll(dir)
			return err
		}
		layers = append(layers, sl)
	}
	flat, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("image: %w", err)
	}
	rc := mutate.Extract(flat)
	defer rc.Close()
	var written int64
	stats, err := Unpack(ctx, rc, dir, UnpackOptions{
		UIDShift: c.cfg.UIDShift,
		Room: func(n int64) error {
			written += n
			return c.room(written, img)
		},
	})
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("image: unpacking %s: %w", img.Ref, err)
	}
	if stats.Skipped > 0 {
		c.log.Info("image: left out device nodes and named pipes", "image", img.Digest, "count", stats.Skipped)
	}
	if err := writeFileAtomic(c.sizePath(hex), []byte(strconv.FormatInt(stats.Bytes, 10)+"\n")); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("image: %w", err)
	}
	c.mu.Lock()
	c.roots[hex] = &rootEntry{hex: hex, size: stats.Bytes, lastUse: c.cfg.Now()}
	c.used += stats.Bytes
	c.mu.Unlock()
	c.unpacks.Add(1)
	c.log.Info("image unpacked", "image", img.Digest, "bytes", stats.Bytes, "files", stats.Files)
	return nil
}

// room makes room for an unpack that has written n bytes so far, evicting
// unused root file systems; it fails when even an empty cache is too
// small.
func (c *Cache) room(n int64, img *Image) error {
	if n > c.cfg.MaxBytes {
		return fmt.Errorf("%w: it unpacks to more than the cache's %d bytes (gpumesh node --image-cache-max)", ErrTooBig, c.cfg.MaxBytes)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.used+n > c.cfg.MaxBytes {
		var idle []*rootEntry
		for _, e := range c.roots {
			if e.refs == 0 {
				idle = append(idle, e)
			}
		}
		if len(idle) == 0 {
			return fmt.Errorf("%w: %d bytes so far, and the images attempts use take %d of the cache's %d bytes",
				ErrTooBig, n, c.used, c.cfg.MaxBytes)
		}
		oldest := slices.MinFunc(idle, func(a, b *rootEntry) int { return a.lastUse.Compare(b.lastUse) })
		c.evictLocked(oldest)
	}
	return nil
}

// evictLocked removes an unused root file system: its size file first,
// so that a crash midway leaves an unfinished one to be removed at Open.
func (c *Cache) evictLocked(e *rootEntry) {
	delete(c.roots, e.hex)
	c.used -= e.size
	_ = os.Remove(c.sizePath(e.hex))
	if err := os.RemoveAll(c.rootDir(e.hex)); err != nil {
		c.log.Warn("image: removing a root file system", "image", e.hex, "err", err)
	}
	c.log.Info("image: root file system evicted", "image", "sha256:"+e.hex, "bytes", e.size)
}

// GC removes every root file system no attempt uses, and returns the
// bytes it freed.
func (c *Cache) GC() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var freed int64
	for _, e := range c.roots {
		if e.refs == 0 {
			freed += e.size
			c.evictLocked(e)
		}
	}
	return freed
}

// storedLayer is a layer read from the blob store.
func (c *Cache) storedLayer(l Layer) (v1Layer, error) {
	m, err := blob.ParseDigest(l.Blob)
	if err != nil {
		return nil, fmt.Errorf("image: layer %s: %w", l.Digest, err)
	}
	return newStoredLayer(c.cfg.Blobs, m, l)
}
