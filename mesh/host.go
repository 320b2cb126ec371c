package mesh

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Per-peer resource limits: tight, so that one peer cannot take a large share
// of the node. They do not grow with the machine's memory.
var peerLimit = rcmgr.BaseLimit{
	ConnsInbound:    4,
	ConnsOutbound:   4,
	Conns:           8,
	StreamsInbound:  128,
	StreamsOutbound: 128,
	Streams:         256,
	Memory:          32 << 20,
	FD:              8,
}

// swimLimit bounds the membership transport's streams: per peer a packet
// stream each way and a few state exchanges, over all peers a few per member.
var (
	swimLimit         = rcmgr.BaseLimit{StreamsInbound: 1024, StreamsOutbound: 1024, Streams: 2048, Memory: 64 << 20}
	swimLimitIncrease = rcmgr.BaseLimitIncrease{StreamsInbound: 512, StreamsOutbound: 512, Streams: 1024, Memory: 32 << 20}
	swimPeerLimit     = rcmgr.BaseLimit{StreamsInbound: 8, StreamsOutbound: 8, Streams: 16, Memory: 4 << 20}
)

// resourceManager builds the host's resource manager: libp2p's defaults
// scaled to the memory given (0: libp2p's autoscale), tight per-peer limits,
// and limits for the membership transport. It returns the manager and its
// system-wide connection limit, which the connection manager must stay
// below.
func resourceManager(memory int64) (network.ResourceManager, int, error) {
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	scaling.PeerBaseLimit = peerLimit
	scaling.PeerLimitIncrease = rcmgr.BaseLimitIncrease{}
	scaling.AddServiceLimit(swimService, swimLimit, swimLimitIncrease)
	scaling.AddServicePeerLimit(swimService, swimPeerLimit, rcmgr.BaseLimitIncrease{})

	var limits rcmgr.ConcreteLimitConfig
	if memory > 0 {
		limits = scaling.Scale(memory, 0)
	} else {
		limits = scaling.AutoScale()
	}
	conns := limits.ToPartialLimitConfig().System.Conns.Build(0)
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits), rcmgr.WithMetricsDisabled()) // libp2pmetrics.go
	if err != nil {
		return nil, 0, fmt.Errorf("resource manager: %w", err)
	}
	return rm, conns, nil
}

// newHost builds the libp2p host of a real (not simulated) node.
//
// Security is TLS 1.3 or Noise, nothing else. Transports are TCP, and QUIC
// unless the mesh is private (psk set): libp2p's private networks wrap the
// raw connection, which QUIC does not expose.
func newHost(cfg Config, key crypto.PrivKey, psk []byte, g *gater, relays autorelay.PeerSource, bytes *byteCounter) (host.Host, error) {
	rm, sysConns, err := resourceManager(cfg.ResourceMemory)
	if err != nil {
		return nil, err
	}
	if sysConns > 0 && cfg.ConnHigh >= sysConns {
		rm.Close()
		return nil, fmt.Errorf("mesh: ConnHigh %d must stay below the resource manager's connection limit %d (raise ResourceMemory or lower ConnHigh)", cfg.ConnHigh, sysConns)
	}
	cm, err := connmgr.NewConnManager(cfg.ConnLow, cfg.ConnHigh, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("connection manager: %w", err)
	}

	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrs(cfg.ListenAddrs...),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.ConnectionGater(g),
		libp2p.UserAgent(cfg.UserAgent),
		libp2p.BandwidthReporter(bytes),
	}
	if len(psk) > 0 {
		opts = append(opts, libp2p.PrivateNetwork(psk))
	} else {
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	if cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(rcmgrFree{cfg.Registerer}))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	if cfg.DisableNAT {
		opts = append(opts, libp2p.DisableRelay())
	} else {
		opts = append(opts,
			libp2p.NATPortMap(),
			libp2p.EnableNATService(),
			libp2p.EnableAutoNATv2(),
			libp2p.EnableRelay(),
			libp2p.EnableRelayService(),
			libp2p.EnableAutoRelayWithPeerSource(relays, relayOptions...),
			libp2p.EnableHolePunching(),
		)
		switch cfg.Reachability {
		case ReachabilityPublic:
			opts = append(opts, libp2p.ForceReachabilityPublic())
		case ReachabilityPrivate:
			opts = append(opts, libp2p.ForceReachabilityPrivate())
		}
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		// libp2p closes what it built on error, the resource manager too.
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	return h, nil
}

// relayOptions tune AutoRelay for a mesh, where the relays are members
// with public addresses and there may be only one (a café's LAN behind NAT
// and one public coordinator). libp2p's defaults wait 3 minutes for 4
// candidates before reserving a slot, ask for candidates every 30 s and
// leave a relay that refused alone for an hour: a node behind NAT in a
// small mesh stayed unreachable to other NATed nodes for minutes.
var relayOptions = []autorelay.Option{
	autorelay.WithMinCandidates(1),
	autorelay.WithBootDelay(0),
	autorelay.WithMinInterval(5 * time.Second),
	autorelay.WithBackoff(time.Minute),
}

// relaySource offers the alive members with public, direct addresses as
// candidate relays to AutoRelay.
func relaySource(members func() []Member) autorelay.PeerSource {
	return func(ctx context.Context, num int) <-chan peer.AddrInfo {
		ch := make(chan peer.AddrInfo, num)
		defer close(ch)
		for _, m := range members() {
			if len(ch) == num {
				break
			}
			if m.Self || m.State != StateAlive {
				continue
			}
			var addrs []ma.Multiaddr
			for _, a := range m.Addrs {
				if !isRelayed(a) && manet.IsPublicAddr(a) {
					addrs = append(addrs, a)
				}
			}
			if len(addrs) > 0 {
				ch <- peer.AddrInfo{ID: m.ID, Addrs: addrs}
			}
		}
		return ch
	}
}
