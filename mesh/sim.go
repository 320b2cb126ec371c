package mesh

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// SimNetwork is an in-memory network of mesh nodes in one process, for
// simulations, tests and demos. Everything a node sends travels over libp2p
// mocknet, so the protocols built on Mesh.Host run unchanged.
//
// Any two nodes can reach each other unless the network says otherwise:
// links are made on first contact (a full mesh of links up front would cost
// memory quadratic in the node count). Cut, Isolate and Crash take links
// away; SetLatency slows them.
//
// The simulated hosts have no transport security, no resource manager and
// no NAT traversal; a mesh secret still keys memberlist's encryption, but
// there is no private network (pnet) handshake.
type SimNetwork struct {
	mn      mocknet.Mocknet
	log     *slog.Logger
	latency time.Duration

	// mu guards the maps below. Every stream a node opens checks them,
	// so reads take the read lock only; blocked counts cut pairs and
	// isolated or crashed nodes, so that a network with none skips the
	// check of every new connection.
	mu        sync.RWMutex
	nodes     map[peer.ID]*Mesh
	latencies map[simPair]time.Duration
	cut       map[simPair]bool
	isolated  map[peer.ID]bool
	crashed   map[peer.ID]bool
	next      uint32 // for node addresses
	closed    bool
	blocked   atomic.Int32

	// links holds a *simLink per linked pair. Links are made by many
	// nodes at once, each pair once: a map under mu would make every
	// first contact wait for all others.
	links sync.Map
}

// simLink is the mocknet link of a pair, made once.
type simLink struct {
	once sync.Once
	l    mocknet.Link
	err  error
}

// SimOptions configures a SimNetwork.
type SimOptions struct {
	// Latency is the one-way delay of every link unless SetLatency says
	// otherwise. Default 0.
	Latency time.Duration
	// Logger is the default logger of the nodes. Default: discard.
	Logger *slog.Logger
}

// simPair is an unordered pair of peers.
type simPair struct{ a, b peer.ID }

func pairOf(a, b peer.ID) simPair {
	if b < a {
		a, b = b, a
	}
	return simPair{a, b}
}

// ErrSimUnreachable is what a simulated node gets when it contacts a peer
// across a cut link, or an isolated or crashed one.
var ErrSimUnreachable = errors.New("mesh sim: peer unreachable")

// NewSimNetwork returns an empty simulated network.
func NewSimNetwork(opts SimOptions) *SimNetwork {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &SimNetwork{
		mn:        mocknet.New(),
		log:       opts.Logger,
		latency:   opts.Latency,
		nodes:     make(map[peer.ID]*Mesh),
		latencies: make(map[simPair]time.Duration),
		cut:       make(map[simPair]bool),
		isolated:  make(map[peer.ID]bool),
		crashed:   make(map[peer.ID]bool),
	}
}

// AddNode starts a node on the simulated network. cfg is as for New, except
// that DataDir, ListenAddrs, DisableNAT, connection and resource limits do
// not apply; a nil Identity gets a fresh ed25519 key. The node joins
// cfg.Join in the background like a real one; tests usually call Join.
func (s *SimNetwork) AddNode(cfg Config) (*Mesh, error) {
	if cfg.Identity == nil {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("mesh sim: key: %w", err)
		}
		cfg.Identity = k
	}
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	cfg.MDNS = false
	cfg.ListenAddrs = nil
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var keys meshKeys
	if len(cfg.Secret) > 0 {
		var err error
		if keys, err = deriveKeys(cfg.Secret); err != nil {
			return nil, err
		}
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.next++
	n := s.next
	s.mu.Unlock()
	ip := net.IPv4(10, byte(n>>16), byte(n>>8), byte(n)).String()
	h, err := s.mn.AddPeer(cfg.Identity, ma.StringCast("/ip4/"+ip+"/tcp/4747"))
	if err != nil {
		return nil, fmt.Errorf("mesh sim: add peer: %w", err)
	}
	// A dial that passed the link check just before a Cut or Isolate can
	// still complete over the old link: close such connections the moment
	// they appear.
	h.Network().Notify(&network.NotifyBundle{ConnectedF: s.connected})
	m, err := start(cfg, simHost{h, s}, true, nil, keys, simHooks{beforeDial: s.link(h.ID())})
	if err != nil {
		h.Close()
		return nil, err
	}
	s.mu.Lock()
	s.nodes[h.ID()] = m
	s.mu.Unlock()
	return m, nil
}

// simHost is a node's host on the simulated network. It refuses a new
// stream to a node the network keeps apart from it even over a connection
// not closed yet: Cut and Isolate set their flags first, then close the
// connections one by one, and meanwhile a node must not reach a member
// through one of them (a runner isolated this way claimed its job from a
// member whose connection was still open, and adopted it).
type simHost struct {
	host.Host
	s *SimNetwork
}

// NewStream opens a stream unless the network keeps the two nodes apart.
func (h simHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if h.s.apart(h.ID(), p) {
		return nil, fmt.Errorf("%w: %s", ErrSimUnreachable, p.ShortString())
	}
	return h.Host.NewStream(ctx, p, pids...)
}

// link returns the dial hook of node self: it makes the link to a peer on
// first contact, or fails if the network keeps them apart.
func (s *SimNetwork) link(self peer.ID) func(context.Context, peer.ID) error {
	return func(_ context.Context, other peer.ID) error {
		p := pairOf(self, other)
		s.mu.RLock()
		apart := s.apartLocked(self, other)
		_, known := s.nodes[other]
		latency, ok := s.latencies[p]
		s.mu.RUnlock()
		if apart {
			return ErrSimUnreachable
		}
		if !ok {
			latency = s.latency
		}
		v, loaded := s.links.Load(p)
		if !loaded {
			if !known {
				return fmt.Errorf("%w: %s is not on the network", ErrSimUnreachable, other.ShortString())
			}
			v, _ = s.links.LoadOrStore(p, &simLink{})
		}
		sl := v.(*simLink)
		sl.once.Do(func() {
			sl.l, sl.err = s.mn.LinkPeers(p.a, p.b)
			if sl.err == nil {
				sl.l.SetOptions(mocknet.LinkOptions{Latency: latency})
			}
		})
		if sl.err != nil {
			return fmt.Errorf("mesh sim: link: %w", sl.err)
		}
		return nil
	}
}

// apart tells whether the network keeps a and b apart.
func (s *SimNetwork) apart(a, b peer.ID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apartLocked(a, b)
}

// apartLocked is apart with s.mu held.
func (s *SimNetwork) apartLocked(a, b peer.ID) bool {
	return s.closed || s.cut[pairOf(a, b)] || s.isolated[a] || s.isolated[b] || s.crashed[a] || s.crashed[b]
}

// connected closes a connection the network does not allow. mocknet calls
// it with its notification lock held, so it must be quick.
func (s *SimNetwork) connected(_ network.Network, c network.Conn) {
	if s.blocked.Load() == 0 {
		return
	}
	if s.apart(c.LocalPeer(), c.RemotePeer()) {
		_ = c.Close()
	}
}

// Connect links two nodes and opens a libp2p connection between them (for
// protocols that need a connection before any membership traffic).
func (s *SimNetwork) Connect(a, b peer.ID) error {
	if err := s.link(a)(context.Background(), b); err != nil {
		return err
	}
	_, err := s.mn.ConnectPeers(a, b)
	return err
}

// SetLatency sets the one-way delay between two nodes, now and for links made
// later.
func (s *SimNetwork) SetLatency(a, b peer.ID, d time.Duration) {
	p := pairOf(a, b)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latencies[p] = d
	if v, ok := s.links.Load(p); ok {
		sl := v.(*simLink)
		sl.once.Do(func() {}) // wait for a link being made
		if sl.l != nil {
			sl.l.SetOptions(mocknet.LinkOptions{Latency: d})
		}
	}
}

// Cut takes the link between two nodes away and closes their connections,
// until Heal.
func (s *SimNetwork) Cut(a, b peer.ID) {
	p := pairOf(a, b)
	s.mu.Lock()
	if !s.cut[p] {
		s.cut[p] = true
		s.blocked.Add(1)
	}
	s.mu.Unlock()
	s.sever(p)
}

// Heal undoes Cut; the nodes reconnect on their next contact.
func (s *SimNetwork) Heal(a, b peer.ID) {
	p := pairOf(a, b)
	s.mu.Lock()
	if s.cut[p] {
		delete(s.cut, p)
		s.blocked.Add(-1)
	}
	s.mu.Unlock()
}

// Isolate cuts a node off from every other, until Reconnect.
func (s *SimNetwork) Isolate(id peer.ID) {
	s.mu.Lock()
	if !s.isolated[id] {
		s.isolated[id] = true
		s.blocked.Add(1)
	}
	s.mu.Unlock()
	s.severAll(id)
}

// Reconnect undoes Isolate.
func (s *SimNetwork) Reconnect(id peer.ID) {
	s.mu.Lock()
	if s.isolated[id] {
		delete(s.isolated, id)
		s.blocked.Add(-1)
	}
	s.mu.Unlock()
}

// Crash stops a node as a power cut would: its links vanish and its
// connections close, then it stops without leaving the mesh, so the others
// must detect its failure. (Closing a mocknet host alone leaves its peers'
// streams hanging, hence the links first.)
func (s *SimNetwork) Crash(id peer.ID) error {
	s.mu.Lock()
	m := s.nodes[id]
	if m == nil {
		s.mu.Unlock()
		return fmt.Errorf("mesh sim: no node %s", id)
	}
	s.crashed[id] = true
	s.blocked.Add(1)
	delete(s.nodes, id)
	s.mu.Unlock()
	s.severAll(id)
	return m.shutdown(false)
}

// severAll takes away every link of a node.
func (s *SimNetwork) severAll(id peer.ID) {
	var pairs []simPair
	s.links.Range(func(k, _ any) bool {
		if p := k.(simPair); p.a == id || p.b == id {
			pairs = append(pairs, p)
		}
		return true
	})
	for _, p := range pairs {
		s.sever(p)
	}
}

// sever removes a link and closes the connections over it. A link being
// made concurrently may survive in mocknet; connected closes whatever
// connection it carries.
func (s *SimNetwork) sever(p simPair) {
	if v, ok := s.links.LoadAndDelete(p); ok {
		sl := v.(*simLink)
		sl.once.Do(func() {})
		if sl.l != nil {
			_ = s.mn.Unlink(sl.l)
		}
	}
	_ = s.mn.DisconnectPeers(p.a, p.b)
	_ = s.mn.DisconnectPeers(p.b, p.a)
}

// Nodes returns the running nodes (not crashed, not closed through the
// network).
func (s *SimNetwork) Nodes() []*Mesh {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Mesh, 0, len(s.nodes))
	for _, m := range s.nodes {
		out = append(out, m)
	}
	return out
}

// Close closes every node (without leaving: the whole network goes at once)
// and the mocknet.
func (s *SimNetwork) Close() error {
	s.mu.Lock()
	s.closed = true
	s.blocked.Add(1)
	nodes := make([]*Mesh, 0, len(s.nodes))
	for _, m := range s.nodes {
		nodes = append(nodes, m)
	}
	clear(s.nodes)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range nodes {
		wg.Go(func() { _ = m.shutdown(false) })
	}
	wg.Wait()
	return s.mn.Close()
}
