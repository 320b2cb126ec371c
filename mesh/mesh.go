package mesh

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Mesh is one node's membership of the mesh: its libp2p host, memberlist
// running over that host, the member table, and discovery. Its methods are
// safe for concurrent use.
type Mesh struct {
	cfg   Config
	log   *slog.Logger
	h     host.Host
	owned bool // the mesh built the host and closes it
	gater *gater
	bytes *byteCounter // the host's stream bytes; nil on a host it did not build

	tr    *transport
	ml    *memberlist.Memberlist
	table *memberTable
	hub   *hub
	del   *delegate

	metaMu    sync.Mutex // serializes UpdateMeta and address refreshes
	meta      Meta       // caller's part of the metadata; guarded by metaMu
	metaBytes atomic.Pointer[[]byte]
	// updateMu serializes memberlist's UpdateNode, which reads this node's
	// state without its lock while another call writes it (a data race in
	// memberlist v0.7.0 when the driver and watchAddrs announce at once).
	updateMu sync.Mutex
	// updateNode is memberlist's UpdateNode (tests wrap it).
	updateNode func(timeout time.Duration) error
	// lostUpdates counts metadata updates memberlist dropped and that
	// were made again (updateNodeLocked).
	lostUpdates atomic.Uint64
	// changed wakes reannounceLoop after an announcement;
	// reannounceAfter is its delay, guarded by updateMu (tests shorten it
	// before they change the metadata).
	changed         chan struct{}
	reannounceAfter time.Duration

	notifiee *network.NotifyBundle
	// hinted holds the members whose disconnect was hinted since their
	// last connection (disconnected).
	hintMu  sync.Mutex
	hinted  map[peer.ID]struct{}
	addrSub event.Subscription
	found   chan peer.AddrInfo // peers found by mDNS, for the loop
	joined  chan struct{}      // a join succeeded: the loop resyncs
	// joinFailures counts the join loop's failed attempts (for tests).
	joinFailures atomic.Uint64
	mdns         interface{ Close() error }

	ctx       context.Context // cancelled when the mesh closes
	cancel    context.CancelFunc
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// simHooks are what the simulated network changes in a node.
type simHooks struct {
	// beforeDial runs before the transport opens a stream to a peer.
	beforeDial func(context.Context, peer.ID) error
}

// New starts a node: it loads (or creates) the identity in cfg.DataDir,
// builds the libp2p host, starts membership, and, in the background, joins
// cfg.Join and discovers peers by mDNS if asked. It returns once the node
// is listening; it does not wait for a join to succeed. A listen port that
// another socket holds is an error before anything is made (CheckPorts).
func New(cfg Config) (*Mesh, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckPorts(); err != nil {
		return nil, err
	}
	key := cfg.Identity
	if key == nil {
		k, created, err := LoadIdentity(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		key = k
		if created {
			id, _ := peer.IDFromPrivateKey(key)
			cfg.Logger.Info("mesh: created a new identity", "peer", id, "dir", cfg.DataDir)
		}
	}
	var keys meshKeys
	if len(cfg.Secret) > 0 {
		var err error
		if keys, err = deriveKeys(cfg.Secret); err != nil {
			return nil, err
		}
	}
	g := newGater()
	var self atomic.Pointer[Mesh]
	members := func() []Member {
		if m := self.Load(); m != nil {
			return m.Members()
		}
		return nil
	}
	bytes := &byteCounter{}
	h, err := newHost(cfg, key, keys.psk, g, relaySource(members), bytes)
	if err != nil {
		return nil, err
	}
	m, err := start(cfg, h, true, g, keys, simHooks{})
	if err != nil {
		h.Close()
		return nil, err
	}
	m.bytes = bytes
	self.Store(m)
	return m, nil
}

// start runs membership on a host. cfg has its defaults applied and is
// valid.
func start(cfg Config, h host.Host, owned bool, g *gater, keys meshKeys, hooks simHooks) (*Mesh, error) {
	logger := cfg.Logger.With("self", h.ID().ShortString())
	m := &Mesh{
		cfg:    cfg,
		log:    logger,
		h:      h,
		owned:  owned,
		gater:  g,
		table:  newMemberTable(h.ID().String(), cfg.DeadRetention),
		hub:    newHub(),
		found:  make(chan peer.AddrInfo, 16),
		joined: make(chan struct{}, 1),

		changed:         make(chan struct{}, 1),
		reannounceAfter: reannounceAfter,
		done:            make(chan struct{}),
		meta:            cfg.Meta,
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.refreshMeta(); err != nil {
		m.cancel()
		return nil, err
	}
	m.del = &delegate{table: m.table, hub: m.hub, meta: &m.metaBytes, now: time.Now}

	m.tr = newTransport(transportConfig{
		host:        h,
		network:     cfg.Network,
		log:         logger,
		sendQueue:   cfg.SendQueue,
		idleTimeout: cfg.StreamIdleTimeout,
		beforeDial:  hooks.beforeDial,
	})

	mlc := memberlist.DefaultLANConfig()
	cfg.Profile.apply(mlc)
	mlc.Name = h.ID().String()
	mlc.Transport = m.tr
	mlc.Label = cfg.Network
	mlc.RequireNodeNames = true
	mlc.Delegate = m.del
	mlc.Events = m.del
	mlc.Alive = m.del
	mlc.Ping = m.del
	mlc.Conflict = m.del
	mlc.Logger = log.New(&memberlistLog{log: logger, onSuspect: m.del.suspect}, "", 0)
	if len(keys.memberlist) > 0 {
		mlc.SecretKey = keys.memberlist
		mlc.GossipVerifyIncoming = true
		mlc.GossipVerifyOutgoing = true
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		_ = m.tr.Shutdown()
		m.cancel()
		return nil, fmt.Errorf("mesh: start memberlist: %w", err)
	}
	m.ml = ml
	m.updateNode = ml.UpdateNode

	m.notifiee = &network.NotifyBundle{ConnectedF: m.connected, DisconnectedF: m.disconnected}
	h.Network().Notify(m.notifiee)

	if sub, err := h.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated)); err == nil {
		m.addrSub = sub
		m.wg.Add(1)
		go m.watchAddrs(sub)
	}
	if cfg.MDNS {
		if err := m.startMDNS(); err != nil {
			m.shutdown(false)
			return nil, err
		}
	}
	m.wg.Add(3)
	go m.loop()
	go m.reconnectLoop()
	go m.reannounceLoop() // reannounce.go
	return m, nil
}

// ID is this node's peer ID, its name in the mesh.
func (m *Mesh) ID() peer.ID { return m.h.ID() }

// Host is the node's libp2p host, for the protocols built on the mesh. The
// mesh owns it: it is closed by Close.
func (m *Mesh) Host() host.Host { return m.h }

// Network is the mesh's network name.
func (m *Mesh) Network() string { return m.cfg.Network }

// Addrs returns the node's full multiaddrs (ending in /p2p/<peer ID>),
// which another node can Join.
func (m *Mesh) Addrs() []ma.Multiaddr {
	addrs, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: m.h.ID(), Addrs: m.h.Addrs()})
	if err != nil {
		return nil
	}
	return addrs
}

// Members returns every member this node knows, itself included, sorted by
// peer ID: alive and suspect ones, and dead and left ones for
// Config.DeadRetention.
func (m *Mesh) Members() []Member {
	return m.table.snapshot(time.Now(), m.tr.lastHeard)
}

// Member returns one member's snapshot.
func (m *Mesh) Member(id peer.ID) (Member, bool) {
	return m.table.member(id, m.tr.lastHeard)
}

// NumAlive counts the alive members, this node included. It is cheap.
func (m *Mesh) NumAlive() int { return m.table.numAlive() }

// AlivePeers returns the other members memberlist holds alive, suspects
// included (their suspicion is not resolved against what was heard since,
// as Members does), in no particular order. It copies no metadata: it is
// for checks that run on every ad, where Members' full snapshot would cost
// O(members) allocations each time.
func (m *Mesh) AlivePeers() []peer.ID { return m.table.alivePeers() }

// Subscribe returns a subscription to member events with a buffer of the
// given size (at least 1). See Subscription for what happens when it is
// full.
func (m *Mesh) Subscribe(buffer int) *Subscription {
	return m.hub.subscribe(max(buffer, 1))
}

// UpdateMeta replaces this node's metadata (meta.Addrs is ignored: the mesh
// fills in the host's addresses) and gossips it to every member. Call it
// when the summary changes, not on a timer: each update is news every
// member hears. It fails, changing nothing, if meta breaks a field limit or
// does not fit MaxMetaSize.
func (m *Mesh) UpdateMeta(meta Meta) error {
	m.metaMu.Lock()
	old := m.meta
	m.meta = meta
	if err := m.refreshMetaLocked(); err != nil {
		m.meta = old
		m.metaMu.Unlock()
		return err
	}
	m.metaMu.Unlock()
	return m.announce()
}

// announce queues this node's metadata for gossip and returns without
// waiting for it to go out: memberlist's UpdateNode waits for its
// broadcast's full fan-out, which takes up to the timeout given when
// members are unreachable — and the node calls this from its driver, which
// must never stall (a stalled driver renews no leases). The news spreads
// anyway; the short wait only reports whether it had gone out at once.
func (m *Mesh) announce() error {
	select {
	case <-m.done:
		return ErrClosed
	default:
	}
	m.updateMu.Lock()
	m.updateNodeLocked(announceWait)
	m.updateMu.Unlock()
	m.noteChange() // announced once more later (reannounce.go)
	return nil
}

// announceWait is how long announce waits for the broadcast to go out.
const announceWait = time.Millisecond

// updateTries bounds how often updateNodeLocked makes an update memberlist
// dropped.
const updateTries = 4

// updateNodeLocked has memberlist take and gossip the metadata in
// m.metaBytes, and makes sure it took it. memberlist's UpdateNode picks
// its incarnation before it takes its lock. A refutation of a suspicion
// that runs in between takes a higher incarnation with the old metadata,
// and the update is then dropped as stale, without a word: every member
// would see the old metadata (a coordinator flag never raised) until the
// next change, which may never come. memberlist records what it holds for
// this node through the update callback, within UpdateNode; an update
// dropped is seen there and made again, under a new incarnation. wait
// bounds the waits for the broadcast to go out, all tries together (a
// dropped update's wait runs out: nothing is broadcast), at least 1 ms a
// try. m.updateMu is held.
func (m *Mesh) updateNodeLocked(wait time.Duration) {
	end := time.Now().Add(wait)
	for try := 1; ; try++ {
		want := *m.metaBytes.Load()
		if err := m.updateNode(max(time.Until(end), time.Millisecond)); err != nil {
			m.log.Debug("mesh: metadata update queued, not yet sent", "err", err)
		}
		if m.table.selfMetaIs(want) {
			return
		}
		if try == updateTries {
			m.log.Warn("mesh: memberlist kept this node's old metadata after repeated updates; members see it until the next change", "tries", try)
			return
		}
		m.lostUpdates.Add(1)
	}
}

// refreshMeta re-encodes the metadata with the host's current addresses.
func (m *Mesh) refreshMeta() error {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.refreshMetaLocked()
}

func (m *Mesh) refreshMetaLocked() error {
	meta := m.meta
	meta.Addrs = m.h.Addrs()
	b, err := encodeMeta(meta)
	if err != nil {
		return fmt.Errorf("mesh: metadata: %w", err)
	}
	m.metaBytes.Store(&b)
	return nil
}

// watchAddrs re-announces the metadata when the host's addresses change.
func (m *Mesh) watchAddrs(sub event.Subscription) {
	defer m.wg.Done()
	for {
		select {
		case <-m.done:
			return
		case _, ok := <-sub.Out():
			if !ok {
				return
			}
			if err := m.refreshMeta(); err != nil {
				m.log.Warn("mesh: cannot encode metadata", "err", err)
				continue
			}
			_ = m.announce()
		}
	}
}

// disconnected turns libp2p's disconnect notification into an early hint,
// once for the loss of a member's last connection: a crash that closes two
// connections at once (both ends dialled) notifies twice, and both saw no
// connection left (the project's CI saw the second hint after the
// member's suspicion).
func (m *Mesh) disconnected(n network.Network, c network.Conn) {
	id := c.RemotePeer()
	m.hintMu.Lock()
	if n.Connectedness(id) == network.Connected || !m.table.isAlive(id) {
		delete(m.hinted, id)
		m.hintMu.Unlock()
		return
	}
	if _, ok := m.hinted[id]; ok {
		m.hintMu.Unlock()
		return
	}
	if m.hinted == nil {
		m.hinted = map[peer.ID]struct{}{}
	}
	m.hinted[id] = struct{}{}
	m.hintMu.Unlock()
	m.hub.publish(EventDisconnect, id, time.Now())
}

// connected lets the next loss of a member's connections be hinted again.
func (m *Mesh) connected(_ network.Network, c network.Conn) {
	m.hintMu.Lock()
	delete(m.hinted, c.RemotePeer())
	m.hintMu.Unlock()
}

// Block refuses every connection to and from a peer from now on and closes
// those open. Membership still lists it until it is declared dead.
func (m *Mesh) Block(id peer.ID) {
	if m.gater == nil {
		return
	}
	m.gater.block(id)
	_ = m.h.Network().ClosePeer(id)
}

// Unblock lifts Block.
func (m *Mesh) Unblock(id peer.ID) {
	if m.gater != nil {
		m.gater.unblock(id)
	}
}

// Stats are counters of the membership transport, since the node started.
type Stats struct {
	PacketsSent, PacketsReceived uint64
	// BytesSent and BytesReceived count packet frames, headers included;
	// StreamBytes counts state exchanges and fallback probes, both ways.
	// None counts libp2p's own framing and encryption.
	BytesSent, BytesReceived, StreamBytes uint64
	// SendDrops are packets dropped because a peer's send queue was full
	// or it could not be reached; ReceiveDrops packets dropped because
	// memberlist fell behind; Malformed packet streams reset for bad
	// framing.
	SendDrops, ReceiveDrops, Malformed uint64
	// PacketStreams and Streams count streams opened, both directions.
	PacketStreams, Streams uint64
	DialFailures           uint64
	// MetaUpdatesRedone counts this node's metadata updates that
	// memberlist dropped and that were made again.
	MetaUpdatesRedone uint64
}

// Stats returns the transport's counters.
func (m *Mesh) Stats() Stats {
	s := &m.tr.stats
	return Stats{
		PacketsSent:     s.packetsSent.Load(),
		PacketsReceived: s.packetsReceived.Load(),
		BytesSent:       s.bytesSent.Load(),
		BytesReceived:   s.bytesReceived.Load(),
		StreamBytes:     s.streamBytes.Load(),
		SendDrops:       s.sendDrops.Load(),
		ReceiveDrops:    s.receiveDrops.Load(),
		Malformed:       s.malformed.Load(),
		PacketStreams:   s.packetStreams.Load(),
		Streams:         s.streams.Load(),
		DialFailures:    s.dialFailures.Load(),

		MetaUpdatesRedone: m.lostUpdates.Load(),
	}
}

// ErrClosed is returned by calls on a closed mesh.
var ErrClosed = errors.New("mesh: closed")

// Close leaves the mesh gracefully (members see this node as left, not dead;
// bounded by Config.LeaveTimeout), stops every goroutine the mesh started,
// closes subscriptions and, if the mesh built it, the host. memberlist's own
// goroutines stop within a probe interval of it returning: memberlist's
// Shutdown does not wait for them. Calling Close again returns the first
// result.
func (m *Mesh) Close() error {
	return m.shutdown(true)
}

// Halt stops the mesh as Close does but without leaving: members find this
// node dead, as after a crash. What a process that is being interrupted
// needs: a graceful leave takes up to Config.LeaveTimeout. Calling Close
// or Halt again returns the first result.
func (m *Mesh) Halt() error {
	return m.shutdown(false)
}

// leave announces that this node is leaving (Meta.Leaving, so that members
// record a leave even if memberlist's leave message reaches them first or
// not at all), then leaves memberlist and waits for the news to be written
// out, all within Config.LeaveTimeout.
func (m *Mesh) leave() error {
	deadline := time.Now().Add(m.cfg.LeaveTimeout)
	m.metaMu.Lock()
	m.meta.Leaving = true
	err := m.refreshMetaLocked()
	m.metaMu.Unlock()
	if err == nil {
		// Returns once the news went out to its full fan-out, or at the
		// timeout; either way the leave follows.
		// (Close: the owner announces no more; watchAddrs may wait.)
		m.updateMu.Lock()
		m.updateNodeLocked(time.Until(deadline) / 2)
		m.updateMu.Unlock()
	}
	var errs []error
	if err := m.ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		errs = append(errs, fmt.Errorf("mesh: leave: %w", err))
	}
	m.tr.drain(max(time.Until(deadline), 0))
	return errors.Join(errs...)
}

// shutdown stops the node; leave says whether to leave gracefully first.
func (m *Mesh) shutdown(leave bool) error {
	m.closeOnce.Do(func() {
		close(m.done)
		m.cancel()
		if m.mdns != nil {
			_ = m.mdns.Close()
		}
		if m.addrSub != nil {
			_ = m.addrSub.Close()
		}
		m.wg.Wait()

		var errs []error
		if leave && m.cfg.LeaveTimeout > 0 {
			errs = append(errs, m.leave())
		}
		if err := m.ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("mesh: shutdown memberlist: %w", err))
		}
		m.h.Network().StopNotify(m.notifiee)
		m.hub.close()
		if m.owned {
			if err := m.h.Close(); err != nil {
				errs = append(errs, fmt.Errorf("mesh: close host: %w", err))
			}
		}
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}
