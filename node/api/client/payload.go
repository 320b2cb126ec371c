package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
)

// PayloadStats says what UploadPayload did.
type PayloadStats struct {
	// Ref is what to put in the spec's payload field.
	Ref api.PayloadRef
	// Files, Dirs and Symlinks count the tree's entries; Bytes is the size
	// of its files and Chunks the number of its distinct chunks.
	Files, Dirs, Symlinks int
	Bytes                 int64
	Chunks                int
	// Uploaded and UploadedBytes are the chunks the node lacked, sent now:
	// 0 when it held the whole tree already (a dataset sent before).
	Uploaded      int
	UploadedBytes int64
}

// PayloadWorkers is how many chunks UploadPayload sends at once.
const PayloadWorkers = 4

// Payload is a directory scanned for upload: its manifest, computed on
// this machine.
type Payload struct {
	dir      string
	manifest *blob.Manifest
	digest   blob.Digest
	stats    PayloadStats
}

// Manifest is the digest of the tree's manifest.
func (p *Payload) Manifest() blob.Digest { return p.digest }

// ScanPayload computes the manifest of the tree under dir (blob.Scan:
// content-defined chunks, each named by its SHA-256, exactly as every node
// stores them). The tree holds directories, regular files and symbolic
// links, kept as links; a link that leaves the tree (absolute, or
// climbing out of it) is refused with ErrPayloadLink, and a socket,
// device or named pipe with ErrPayloadFileType: the job would not find
// what they name. Every error is a fault of the directory.
func ScanPayload(ctx context.Context, dir string) (*Payload, error) {
	m, scan, err := blob.Scan(ctx, dir, nil)
	if err != nil {
		return nil, fmt.Errorf("payload %s: %w", dir, err)
	}
	if len(scan.Skipped) > 0 {
		return nil, fmt.Errorf("payload %s: %w: %s is not a file, directory or link", dir, ErrPayloadFileType, scan.Skipped[0])
	}
	if err := linksStayInside(m); err != nil {
		return nil, fmt.Errorf("payload %s: %w", dir, err)
	}
	st := PayloadStats{Files: scan.Files, Dirs: scan.Dirs, Symlinks: scan.Symlinks, Bytes: scan.Bytes, Chunks: scan.NewChunks}
	return &Payload{dir: dir, manifest: m, digest: scan.Manifest, stats: st}, nil
}

// UploadPayload makes a scanned tree a payload the node holds: it puts
// the manifest to the node (PUT /v1/payloads/MANIFEST), which answers
// which chunks it lacks, and sends only those (PUT
// /v1/payloads/MANIFEST/chunks/CHUNK), PayloadWorkers at once, each read
// again from its file and checked against the manifest before it leaves;
// the node checks each as it arrives. A tree sent before (the same
// dataset for a second job) sends nothing but its manifest. A file that
// changed since the scan fails the upload (scan and send it again).
// Uploads have no timeout of their own: ctx bounds them.
func (c *Client) UploadPayload(ctx context.Context, p *Payload) (PayloadStats, error) {
	st := p.stats
	body, err := p.manifest.Encode()
	if err != nil {
		return st, fmt.Errorf("payload %s: %w", p.dir, err)
	}
	var up api.PayloadUpload
	err = c.call(ctx, request{method: http.MethodPut, path: "/v1/payloads/" + url.PathEscape(p.digest.String()),
		body: body, contentType: "application/json", bodyHash: p.digest.Hex(), stream: true}, &up)
	if err != nil {
		return st, err
	}
	if up.Ref.Manifest != p.digest.String() || up.Ref.Size != p.manifest.Size() {
		return st, fmt.Errorf("payload: the node holds %s (%d bytes), but %s (%d bytes) was sent", up.Ref.Manifest, up.Ref.Size, p.digest, p.manifest.Size())
	}
	st.Ref = up.Ref
	err = c.sendChunks(ctx, p.dir, p.manifest, p.digest, up.Missing, &st)
	return st, err
}

// linksStayInside refuses a link whose target is absolute or climbs out
// of the tree.
func linksStayInside(m *blob.Manifest) error {
	for _, e := range m.Entries {
		if e.Type != blob.TypeSymlink {
			continue
		}
		t := strings.ReplaceAll(e.Target, "\\", "/")
		resolved := path.Join(path.Dir(e.Path), t)
		if path.IsAbs(t) || resolved == ".." || strings.HasPrefix(resolved, "../") || (len(t) > 1 && t[1] == ':') {
			return fmt.Errorf("%w: %s points outside the payload directory (to %s): copy what it names into the directory, or leave it out", ErrPayloadLink, e.Path, e.Target)
		}
	}
	return nil
}

// chunkAt is where a chunk's bytes are in the tree.
type chunkAt struct {
	ref  blob.ChunkRef
	file string // slash-separated, relative to the tree
	off  int64
}

// sendChunks sends the chunks named in missing, reading each from the
// first file that holds it.
func (c *Client) sendChunks(ctx context.Context, dir string, m *blob.Manifest, manifest blob.Digest, missing []string, st *PayloadStats) error {
	if len(missing) == 0 {
		return nil
	}
	where := make(map[string]chunkAt)
	for _, e := range m.Entries {
		for i, off := range blob.ChunkOffsets(e) {
			ref := e.Chunks[i]
			if _, ok := where[ref.Digest.String()]; !ok {
				where[ref.Digest.String()] = chunkAt{ref: ref, file: e.Path, off: off}
			}
		}
	}
	todo := make([]chunkAt, 0, len(missing))
	for _, d := range missing {
		at, ok := where[d]
		if !ok {
			return fmt.Errorf("payload: the node asks for %.80s, which is not a chunk of the tree", d)
		}
		todo = append(todo, at)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("payload %s: %w", dir, err)
	}
	defer root.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan chunkAt)
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range min(PayloadWorkers, len(todo)) {
		wg.Go(func() {
			buf := make([]byte, 0, blob.MaxChunkSize)
			for at := range jobs {
				data, err := readChunk(root, at, buf)
				if err == nil {
					err = c.putChunk(ctx, manifest, at.ref.Digest, data)
				}
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				st.Uploaded++
				st.UploadedBytes += at.ref.Size
				mu.Unlock()
			}
		})
	}
feed:
	for _, at := range todo {
		select {
		case jobs <- at:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// readChunk reads a chunk from its file into buf and checks it.
func readChunk(root *os.Root, at chunkAt, buf []byte) ([]byte, error) {
	f, err := root.Open(at.file)
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	defer f.Close()
	data := buf[:at.ref.Size]
	if _, err := f.ReadAt(data, at.off); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("it shrank")
		}
		return nil, fmt.Errorf("payload: %s changed while it was sent (%v): send it again", at.file, err)
	}
	if blob.Sum(data) != at.ref.Digest {
		return nil, fmt.Errorf("payload: %s changed while it was sent: send it again", at.file)
	}
	return data, nil
}

func (c *Client) putChunk(ctx context.Context, manifest, chunk blob.Digest, data []byte) error {
	p := "/v1/payloads/" + url.PathEscape(manifest.String()) + "/chunks/" + url.PathEscape(chunk.String())
	return c.call(ctx, request{method: http.MethodPut, path: p, body: data, contentType: "application/octet-stream",
		bodyHash: chunk.Hex(), stream: true}, nil)
}

// signHash signs a content-addressed upload: its body hashes to hash,
// which its path names.
func signHash(key owner.Key, method, target, hash string, c *Client) string {
	return owner.SignRequestHash(key, method, target, hash, c.now()).HeaderValue()
}
