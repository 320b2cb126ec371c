package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// payloadChunk is the size of one reply frame of a payload transfer.
const payloadChunk = 1 << 20

// payloads is a content-addressed store of job payloads under the data dir:
// one file per sha256 digest. Payloads travel by stream between nodes,
// never by gossip: from the node a job was submitted to, to its coordinator
// before the submission is acknowledged, and from the coordinator to each
// runner when it starts a share.
type payloads struct {
	dir string
}

func newPayloads(dir string) (*payloads, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node: payload store: %w", err)
	}
	return &payloads{dir: dir}, nil
}

func digestHex(ref market.PayloadRef) (string, error) {
	hexPart, ok := strings.CutPrefix(ref.Digest, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", fmt.Errorf("payload digest %q: want sha256: and 64 hex digits", ref.Digest)
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", fmt.Errorf("payload digest %q: %w", ref.Digest, err)
	}
	return hexPart, nil
}

// put stores what r yields, at most market.MaxPayloadBytes, and returns its
// reference. want, when set, must match.
func (p *payloads) put(r io.Reader, want *market.PayloadRef) (market.PayloadRef, error) {
	return p.putLimit(r, want, market.MaxPayloadBytes)
}

// putLimit is put with another size limit (checkpoints have their own).
func (p *payloads) putLimit(r io.Reader, want *market.PayloadRef, limit int64) (market.PayloadRef, error) {
	tmp, err := os.CreateTemp(p.dir, ".incoming-*")
	if err != nil {
		return market.PayloadRef{}, fmt.Errorf("node: payload store: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, limit+1))
	if err != nil {
		return market.PayloadRef{}, fmt.Errorf("node: reading payload: %w", err)
	}
	if n > limit {
		return market.PayloadRef{}, api.Errorf(http.StatusRequestEntityTooLarge, "payload over %s", text.Bytes(limit))
	}
	if n == 0 {
		return market.PayloadRef{}, api.Errorf(http.StatusBadRequest, "payload is empty")
	}
	ref := market.PayloadRef{Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n}
	if want != nil && (want.Digest != ref.Digest || want.Size != ref.Size) {
		return market.PayloadRef{}, fmt.Errorf("payload is %s (%d bytes), want %s (%d bytes)", ref.Digest, ref.Size, want.Digest, want.Size)
	}
	if err := tmp.Sync(); err != nil {
		return market.PayloadRef{}, fmt.Errorf("node: payload store: %w", err)
	}
	hexPart, _ := digestHex(ref)
	if err := os.Rename(tmp.Name(), filepath.Join(p.dir, hexPart)); err != nil {
		return market.PayloadRef{}, fmt.Errorf("node: payload store: %w", err)
	}
	return ref, nil
}

// open opens a stored payload.
func (p *payloads) open(ref market.PayloadRef) (*os.File, error) {
	hexPart, err := digestHex(ref)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(p.dir, hexPart))
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != ref.Size {
		f.Close()
		return nil, fmt.Errorf("stored payload %s has the wrong size", ref.Digest)
	}
	return f, nil
}

func (p *payloads) has(ref market.PayloadRef) bool {
	f, err := p.open(ref)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// PutPayload implements api.Backend.
func (n *Node) PutPayload(_ context.Context, r io.Reader) (market.PayloadRef, error) {
	return n.payload.put(r, nil)
}

// openPayload opens a payload, fetching it from peer from first when this
// node does not hold it.
func (n *Node) openPayload(ctx context.Context, from string, ref market.PayloadRef) (io.ReadCloser, error) {
	if f, err := n.payload.open(ref); err == nil {
		return f, nil
	}
	if err := n.fetchPayload(ctx, from, ref); err != nil {
		return nil, err
	}
	return n.payload.open(ref)
}

// fetchPayload copies a payload from a peer into this node's store,
// checking its digest.
func (n *Node) fetchPayload(ctx context.Context, from string, ref market.PayloadRef) error {
	return n.fetchBlob(ctx, from, ref, market.MaxPayloadBytes)
}

// fetchBlob copies a stored archive (payload or checkpoint) of at most
// limit bytes from a peer.
func (n *Node) fetchBlob(ctx context.Context, from string, ref market.PayloadRef, limit int64) error {
	if n.payload.has(ref) {
		return nil
	}
	pid, err := peer.Decode(from)
	if err != nil || pid == n.id {
		return fmt.Errorf("payload %s is not on this node", ref.Digest)
	}
	n.dialable(pid)
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() { // ends when the call ends: it closes the pipe either way
		err := n.direct.Call(ctx, pid, kindPayloadGet, []byte(ref.Digest), func(m gossip.Message) error {
			_, err := pw.Write(m.Data)
			return err
		})
		pw.CloseWithError(err)
		errc <- err
	}()
	_, perr := n.payload.putLimit(pr, &ref, limit)
	pr.CloseWithError(errors.New("payload store done"))
	if cerr := <-errc; cerr != nil && perr == nil {
		perr = cerr
	}
	if perr != nil {
		return fmt.Errorf("fetching payload from %s: %w", pid.ShortString(), perr)
	}
	return nil
}

// servePayload streams a stored payload to a peer.
func (n *Node) servePayload(digest string, reply func(string, []byte) error) error {
	f, err := n.payload.openDigest(digest)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, payloadChunk)
	for {
		k, err := f.Read(buf)
		if k > 0 {
			if werr := reply(kindPayloadChunk, buf[:k]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (p *payloads) openDigest(digest string) (*os.File, error) {
	hexPart, err := digestHex(market.PayloadRef{Digest: digest})
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(p.dir, hexPart))
	if err != nil {
		return nil, fmt.Errorf("no payload %s here", digest)
	}
	return f, nil
}
