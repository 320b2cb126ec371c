package layers

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/blob/transfer"
	"github.com/gpumesh/gpumesh/node/image"
)

// Local is what this node holds: node/image's Cache.
type Local interface {
	// LayerBlob returns the blob manifest of layer d when it is whole in
	// the store.
	LayerBlob(d v1.Hash) (blob.Digest, bool)
}

// Config configures a Service. Host, Protocol, Fetcher, Local and Members
// are required.
type Config struct {
	Host     host.Host
	Protocol protocol.ID
	// Fetcher brings a layer's blob manifest and chunks from holders.
	Fetcher transfer.Fetcher
	Local   Local
	// Members are the peers a layer's tracker is chosen from (this node
	// is counted whether or not they include it). Called once per layer.
	Members func() []peer.ID
	// Dialable, when set, is called before this node opens a stream to a
	// peer (a tracker, a holder), so that the host knows its addresses
	// (the node copies them from membership). It must not block long.
	Dialable func(peer.ID)
	// Timeout bounds each exchange with a tracker but an acquire's wait
	// for a pull. Default 30 s.
	Timeout time.Duration
	// PullWait bounds how long an acquire waits for another peer's pull
	// of the layer. Default 30 min.
	PullWait time.Duration
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Service is a node's tracker of layers and its client of others'.
type Service struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	tracked map[string]*entry // by layer digest
	order   []string          // tracked, oldest first (bounded)
}

var _ image.Peers = (*Service)(nil)

// entry is what a tracker knows of one layer.
type entry struct {
	manifest blob.Digest
	holders  []peer.ID     // most recent last, at most maxHolders
	puller   peer.ID       // "" when no pull is under way
	changed  chan struct{} // closed (and replaced) when holders or puller change
}

const (
	maxTracked = 4096
	maxHolders = 16
	maxMessage = 64 << 10
)

// New registers the protocol's handler on cfg.Host.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Host == nil || cfg.Protocol == "" || cfg.Fetcher == nil || cfg.Local == nil || cfg.Members == nil:
		return nil, errors.New("layers: Host, Protocol, Fetcher, Local and Members are required")
	case cfg.Timeout < 0 || cfg.PullWait < 0:
		return nil, errors.New("layers: negative Config value")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.PullWait == 0 {
		cfg.PullWait = 30 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, tracked: map[string]*entry{}}
	cfg.Host.SetStreamHandler(cfg.Protocol, s.handle)
	return s, nil
}

// Close removes the handler, ends the exchanges being served and waits
// for them.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cfg.Host.RemoveStreamHandler(s.cfg.Protocol)
	s.cancel()
	s.wg.Wait()
	return nil
}

// request and answer are the protocol's messages.
type request struct {
	Op       string `json:"op"`
	Layer    string `json:"layer"`
	Manifest string `json:"manifest,omitempty"`
	Error    string `json:"error,omitempty"`
}

type answer struct {
	Holders  []string `json:"holders,omitempty"`
	Manifest string   `json:"manifest,omitempty"`
	Pull     bool     `json:"pull,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// tracker is the layer's tracker among the members and this node.
func (s *Service) tracker(d v1.Hash) peer.ID {
	return Tracker(d, append(s.cfg.Members(), s.cfg.Host.ID()))
}

// Tracker is the tracker of layer d among peers: the first by
// rendezvous hashing of the digest, so that every node that sees the
// same peers asks the same one.
func Tracker(d v1.Hash, peers []peer.ID) peer.ID {
	var best peer.ID
	var bestScore uint64
	for i, p := range peers {
		if sc := score(d, p); i == 0 || sc > bestScore || sc == bestScore && p < best {
			best, bestScore = p, sc
		}
	}
	return best
}

func score(d v1.Hash, p peer.ID) uint64 {
	h := sha256.New()
	h.Write([]byte(d.Hex))
	h.Write([]byte(p))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// Layer implements image.Peers: it asks the layer's tracker, then
// fetches the layer from its holders, or tells the caller to pull it.
func (s *Service) Layer(ctx context.Context, d v1.Hash, size int64, lease string) (blob.Digest, func(blob.Digest, error), error) {
	tr := s.tracker(d)
	ans, pulled, err := s.acquire(ctx, tr, d)
	if err != nil {
		return blob.Digest{}, nil, fmt.Errorf("layer %s: tracker %s: %w", d, tr.ShortString(), err)
	}
	if ans.Pull {
		return blob.Digest{}, pulled, nil
	}
	m, err := blob.ParseDigest(ans.Manifest)
	if err != nil {
		return blob.Digest{}, nil, fmt.Errorf("layer %s: tracker %s names no manifest: %w", d, tr.ShortString(), err)
	}
	var holders []peer.ID
	for _, h := range ans.Holders {
		if p, err := peer.Decode(h); err == nil && p != s.cfg.Host.ID() {
			holders = append(holders, p)
		}
	}
	if len(holders) == 0 {
		return blob.Digest{}, nil, fmt.Errorf("layer %s: tracker %s names no holder", d, tr.ShortString())
	}
	for _, h := range holders {
		s.dialable(h)
	}
	if _, err := s.cfg.Fetcher.Fetch(ctx, m, holders, lease); err != nil {
		return blob.Digest{}, nil, fmt.Errorf("layer %s from peers: %w", d, err)
	}
	s.report(tr, d, m, nil) // one more holder
	return m, nil, nil
}

// acquire asks tracker tr about layer d (this node's own tracker state
// when tr is this node). When the answer is to pull, pulled reports the
// pull's end: on the acquire's stream, which stays open until then, so
// that a puller that goes away frees the layer for another.
func (s *Service) acquire(ctx context.Context, tr peer.ID, d v1.Hash) (answer, func(blob.Digest, error), error) {
	self := s.cfg.Host.ID()
	if tr == self {
		ans := s.serveAcquire(ctx, self, d)
		if ans.Error != "" {
			return ans, nil, errors.New(ans.Error)
		}
		return ans, func(m blob.Digest, err error) { s.servePulled(self, d, pulledRequest(d, m, err)) }, nil
	}
	var ans answer
	st, err := s.exchange(ctx, tr, request{Op: "acquire", Layer: d.String()}, &ans, s.cfg.PullWait+s.cfg.Timeout)
	if err != nil {
		return ans, nil, err
	}
	if ans.Error != "" || !ans.Pull {
		st.Close()
		if ans.Error != "" {
			return ans, nil, errors.New(ans.Error)
		}
		return ans, nil, nil
	}
	_ = st.SetDeadline(time.Time{}) // the pull takes as long as it takes
	return ans, func(m blob.Digest, err error) {
		defer st.Close()
		b, _ := json.Marshal(pulledRequest(d, m, err))
		_ = st.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
		if _, werr := st.Write(append(b, '\n')); werr != nil {
			st.Reset()
		}
	}, nil
}

func (s *Service) dialable(p peer.ID) {
	if s.cfg.Dialable != nil {
		s.cfg.Dialable(p)
	}
}

// pulledRequest reports a pull's end: the manifest, or the error.
func pulledRequest(d v1.Hash, m blob.Digest, err error) request {
	if err != nil {
		return request{Op: "pulled", Layer: d.String(), Error: err.Error()}
	}
	return request{Op: "pulled", Layer: d.String(), Manifest: m.String()}
}

// report tells tracker tr that this node now holds layer d under blob
// manifest m (fetched from peers).
func (s *Service) report(tr peer.ID, d v1.Hash, m blob.Digest, err error) {
	q := pulledRequest(d, m, err)
	if tr == s.cfg.Host.ID() {
		s.servePulled(tr, d, q)
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	var ans answer
	st, err := s.exchange(ctx, tr, q, &ans, s.cfg.Timeout)
	if err != nil {
		s.log.Debug("layers: telling the tracker", "layer", d.String(), "tracker", tr.ShortString(), "err", err)
		return
	}
	st.Close()
}

// exchange sends one request on a new stream and reads its answer within
// wait (and ctx); the stream is the caller's to close.
func (s *Service) exchange(ctx context.Context, p peer.ID, q request, ans *answer, wait time.Duration) (network.Stream, error) {
	s.dialable(p)
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	st, err := s.cfg.Host.NewStream(network.WithAllowLimitedConn(dctx, "layers"), p, s.cfg.Protocol)
	cancel()
	if err != nil {
		return nil, err
	}
	_ = st.SetDeadline(time.Now().Add(wait))
	stop := context.AfterFunc(ctx, func() { st.Reset() })
	defer stop()
	b, _ := json.Marshal(q)
	if _, err := st.Write(append(b, '\n')); err != nil {
		st.Reset()
		return nil, err
	}
	if err := readJSON(st, ans); err != nil {
		st.Reset()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return st, nil
}

// readJSON reads one line of at most maxMessage bytes into v.
func readJSON(r io.Reader, v any) error {
	br := bufio.NewReaderSize(io.LimitReader(r, maxMessage+1), 4096)
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		var all []byte
		all = append(all, line...)
		for err == bufio.ErrBufferFull {
			line, err = br.ReadSlice('\n')
			all = append(all, line...)
		}
		line = all
	}
	if err != nil {
		if err == io.EOF && len(line) > maxMessage {
			return fmt.Errorf("a message over %d bytes", maxMessage)
		}
		return err
	}
	return json.Unmarshal(line, v)
}

// handle serves one stream.
func (s *Service) handle(st network.Stream) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		st.Reset()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer st.Close()
	from := st.Conn().RemotePeer()
	_ = st.SetReadDeadline(time.Now().Add(s.cfg.Timeout))
	var q request
	if err := readJSON(st, &q); err != nil {
		st.Reset()
		return
	}
	var ans answer
	d, err := v1.NewHash(q.Layer)
	switch {
	case err != nil || d.Algorithm != "sha256":
		ans.Error = fmt.Sprintf("bad layer digest %q", q.Layer)
	case q.Op == "acquire":
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PullWait)
		ans = s.serveAcquire(ctx, from, d)
		cancel()
	case q.Op == "pulled":
		s.servePulled(from, d, q)
	default:
		ans.Error = fmt.Sprintf("unknown op %q", q.Op)
	}
	b, _ := json.Marshal(ans)
	_ = st.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	if _, err := st.Write(append(b, '\n')); err != nil {
		st.Reset()
		if ans.Pull {
			s.servePulled(from, d, request{Error: "the answer did not reach the puller"})
		}
		return
	}
	if !ans.Pull {
		return
	}
	// The asker pulls: its report comes on this stream. A stream that
	// breaks (the asker went away) ends its pull, so that a waiter takes
	// over.
	_ = st.SetReadDeadline(time.Now().Add(s.cfg.PullWait))
	stop := context.AfterFunc(s.ctx, func() { st.Reset() })
	defer stop()
	var done request
	if err := readJSON(st, &done); err != nil || done.Op != "pulled" || done.Layer != q.Layer {
		done = request{Error: "the puller went away"}
	}
	s.servePulled(from, d, done)
}

// serveAcquire answers an acquire of layer d from p: the holders, or
// "pull" when no one holds it and no one else pulls it; while another
// peer pulls it, it waits for that pull (or for that peer to go).
func (s *Service) serveAcquire(ctx context.Context, p peer.ID, d v1.Hash) answer {
	self := s.cfg.Host.ID()
	key := d.String()
	for {
		s.mu.Lock()
		e := s.entryLocked(key)
		if m, ok := s.cfg.Local.LayerBlob(d); ok && !slices.Contains(e.holders, self) {
			e.manifest = m
			e.holders = append(e.holders, self)
		}
		var holders []string
		for _, h := range e.holders {
			if h != p {
				holders = append(holders, h.String())
			}
		}
		switch {
		case len(holders) > 0:
			m := e.manifest.String()
			s.mu.Unlock()
			return answer{Holders: holders, Manifest: m}
		case e.puller == "" || e.puller == p:
			e.puller = p
			s.notifyLocked(e)
			s.mu.Unlock()
			return answer{Pull: true}
		}
		changed := e.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return answer{Error: "gave up waiting for a peer's pull of the layer: " + ctx.Err().Error()}
		}
	}
}

// servePulled records the end of p's pull or fetch of layer d.
func (s *Service) servePulled(p peer.ID, d v1.Hash, q request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entryLocked(d.String())
	if e.puller == p {
		e.puller = ""
	}
	if q.Error == "" {
		if m, err := blob.ParseDigest(q.Manifest); err == nil {
			e.manifest = m
			e.holders = slices.DeleteFunc(e.holders, func(h peer.ID) bool { return h == p })
			e.holders = append(e.holders, p)
			if len(e.holders) > maxHolders {
				e.holders = e.holders[len(e.holders)-maxHolders:]
			}
		}
	}
	s.notifyLocked(e)
}

func (s *Service) notifyLocked(e *entry) {
	close(e.changed)
	e.changed = make(chan struct{})
}

// entryLocked returns the layer's entry, making it (and forgetting the
// oldest beyond maxTracked).
func (s *Service) entryLocked(key string) *entry {
	if e, ok := s.tracked[key]; ok {
		return e
	}
	e := &entry{changed: make(chan struct{})}
	s.tracked[key] = e
	s.order = append(s.order, key)
	for len(s.order) > maxTracked {
		old := s.order[0]
		s.order = s.order[1:]
		if o := s.tracked[old]; o != nil && o.puller == "" {
			delete(s.tracked, old)
		}
	}
	return e
}
