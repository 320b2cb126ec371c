package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultNetwork is the network name of a Config that names none.
const DefaultNetwork = "gpumesh"

// DefaultPort is the TCP (and UDP, for QUIC) port of the default listen
// addresses.
const DefaultPort = 4747

// Config configures a node of the mesh. The zero value of every field means
// its documented default; New applies them and then Validate.
type Config struct {
	// DataDir holds the node's identity (see LoadIdentity). Required
	// unless Identity is set.
	DataDir string
	// Identity, if set, is used instead of the key in DataDir
	// (simulations and tests). It must be an ed25519 key.
	Identity crypto.PrivKey

	// Network names the mesh. Nodes of different networks do not talk:
	// it is memberlist's label and part of every protocol ID. 1 to 64
	// characters of a-z, 0-9, '.', '_' and '-'. Default DefaultNetwork.
	Network string
	// Secret, if set, makes the mesh private: only holders of the same
	// secret (at least MinSecretLen bytes) can connect. Two keys are
	// derived from it with HKDF-SHA256 and distinct labels: the libp2p
	// private network key (pnet: every connection is encrypted with it
	// before libp2p's own handshake) and memberlist's keyring key (every
	// membership packet and stream is encrypted and authenticated with
	// AES-256-GCM). libp2p private networks work over TCP only, so a
	// private node listens on TCP only: a QUIC listen address is an
	// error.
	Secret []byte

	// ListenAddrs are the libp2p listen addresses. Default: TCP and QUIC
	// (QUIC only without a secret) on 0.0.0.0 and :: at DefaultPort.
	ListenAddrs []ma.Multiaddr
	// Join lists bootstrap peers as full multiaddrs ending in
	// /p2p/<peer ID>. The node starts even when none answers, logs it, and
	// keeps trying with exponential backoff between JoinRetryMin and
	// JoinRetryMax until one does. Later, whenever it finds itself alone
	// for RejoinInterval, it tries them again.
	Join []ma.Multiaddr
	// JoinRetryMin and JoinRetryMax bound the backoff between join
	// attempts. Defaults 1 s and 30 s.
	JoinRetryMin, JoinRetryMax time.Duration
	// RejoinInterval is how often a node alone in its mesh tries its
	// bootstrap peers again. Default 30 s; negative: never.
	RejoinInterval time.Duration
	// ReconnectInterval is how often a node tries to join again one member
	// it holds dead (for DeadRetention after its death), so that the two
	// sides of a healed partition find each other even when nothing new
	// happens; stretched to 10 ms per member in large meshes. Default 3 s;
	// negative: never.
	ReconnectInterval time.Duration
	// MDNS turns on multicast DNS discovery on the local network: nodes of
	// the same network name find and join each other with no bootstrap
	// address. Default off (the node command turns it on).
	MDNS bool
	// DisableNAT turns off NAT traversal: AutoNAT (v2 client and the
	// service for others), UPnP/NAT-PMP port mapping, the circuit relay v2
	// client with relays drawn from the members, and hole punching, all on
	// by default.
	DisableNAT bool
	// Reachability overrides what AutoNAT finds out about this node:
	// ReachabilityAuto (the default) lets it ask its peers. A node at a
	// public address whose peers are all behind NAT has no one to vouch
	// for it (only public nodes answer AutoNAT), so it would never serve
	// as a relay: such a node is set to ReachabilityPublic.
	Reachability Reachability

	// Profile is memberlist's timing. Default FastProfile().
	Profile Profile
	// Meta is this node's initial metadata; Addrs is filled by the mesh.
	Meta Meta
	// DeadRetention is how long dead and left members stay in Members.
	// Default 10 minutes; negative: forever.
	DeadRetention time.Duration
	// LeaveTimeout bounds the graceful leave in Close. Default 3 s.
	LeaveTimeout time.Duration
	// StreamIdleTimeout is how long a packet stream to a peer stays open
	// without traffic. Long enough to carry a probe, its ack and the
	// indirect probes of one round, and every packet of a small mesh;
	// in a large mesh most probes go to a peer not contacted for minutes,
	// so longer buys little and costs a stream per peer. Default 3 s.
	StreamIdleTimeout time.Duration
	// SendQueue bounds the packets waiting to be written to one peer;
	// more are dropped, as datagrams would be. Default 64.
	SendQueue int

	// ConnLow and ConnHigh are the connection manager's watermarks: above
	// ConnHigh connections, it trims to ConnLow (connections younger than a
	// minute are spared). Defaults 192 and 256. ConnHigh must stay below the
	// resource manager's connection limit.
	ConnLow, ConnHigh int
	// ResourceMemory is the memory (bytes) libp2p's resource manager scales
	// its limits to. Default: an eighth of the machine's memory.
	ResourceMemory int64

	// Logger receives the mesh's logs, memberlist's included. Default:
	// discard.
	Logger *slog.Logger
	// Registerer, if set, receives libp2p's metrics, less the resource
	// manager's (libp2pmetrics.go). Default: libp2p metrics off (libp2p
	// would otherwise use Prometheus's global registry).
	Registerer prometheus.Registerer
	// UserAgent is announced to peers by libp2p's identify. Default
	// "gpumesh".
	UserAgent string
}

// withDefaults returns c with defaults for zero fields.
func (c Config) withDefaults() Config {
	if c.Network == "" {
		c.Network = DefaultNetwork
	}
	if c.JoinRetryMin == 0 {
		c.JoinRetryMin = time.Second
	}
	if c.JoinRetryMax == 0 {
		c.JoinRetryMax = 30 * time.Second
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = 30 * time.Second
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = 3 * time.Second
	}
	if c.Profile == (Profile{}) {
		c.Profile = FastProfile()
	}
	if c.DeadRetention == 0 {
		c.DeadRetention = 10 * time.Minute
	}
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = 3 * time.Second
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = 3 * time.Second
	}
	if c.SendQueue == 0 {
		c.SendQueue = 64
	}
	if c.ConnLow == 0 {
		c.ConnLow = 192
	}
	if c.ConnHigh == 0 {
		c.ConnHigh = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.UserAgent == "" {
		c.UserAgent = "gpumesh"
	}
	if len(c.ListenAddrs) == 0 {
		c.ListenAddrs = defaultListenAddrs(len(c.Secret) > 0)
	}
	return c
}

func defaultListenAddrs(private bool) []ma.Multiaddr {
	specs := []string{
		fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", DefaultPort),
		fmt.Sprintf("/ip6/::/tcp/%d", DefaultPort),
	}
	if !private {
		specs = append(specs,
			fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", DefaultPort),
			fmt.Sprintf("/ip6/::/udp/%d/quic-v1", DefaultPort))
	}
	addrs := make([]ma.Multiaddr, len(specs))
	for i, s := range specs {
		addrs[i] = ma.StringCast(s)
	}
	return addrs
}

// Validate reports every setting out of range, each naming the field. It
// expects defaults applied (New does).
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if _, err := ParseReachability(string(c.Reachability)); err != nil {
		add("mesh: %v", err)
	}

	if c.DataDir == "" && c.Identity == nil {
		add("mesh: DataDir or Identity is required")
	}
	if c.Identity != nil && c.Identity.Type() != crypto.Ed25519 {
		add("mesh: Identity is a %s key; want Ed25519", c.Identity.Type())
	}
	if err := validNetworkName(c.Network); err != nil {
		add("mesh: %v", err)
	}
	if len(c.Secret) > 0 && len(c.Secret) < MinSecretLen {
		add("mesh: secret is %d bytes; need at least %d", len(c.Secret), MinSecretLen)
	}
	for _, a := range c.ListenAddrs {
		switch {
		case isTCP(a):
		case !isQUIC(a):
			add("mesh: listen address %s: want TCP (/tcp/PORT) or QUIC (/udp/PORT/quic-v1)", a)
		case len(c.Secret) > 0:
			add("mesh: listen address %s: a private mesh (with a secret) listens on TCP only: libp2p private networks do not support QUIC", a)
		}
	}
	for _, a := range c.Join {
		if _, err := peer.AddrInfoFromP2pAddr(a); err != nil {
			add("mesh: join address %s: want a full multiaddr ending in /p2p/<peer ID>: %v", a, err)
		}
	}
	if c.JoinRetryMin <= 0 || c.JoinRetryMax < c.JoinRetryMin {
		add("mesh: join retry backoff %v..%v: want 0 < JoinRetryMin <= JoinRetryMax", c.JoinRetryMin, c.JoinRetryMax)
	}
	if err := c.Profile.Validate(); err != nil {
		add("mesh: %w", err)
	}
	if err := c.Meta.validate(); err != nil {
		add("mesh: Meta: %w", err)
	}
	if c.LeaveTimeout < 0 {
		add("mesh: LeaveTimeout %v must not be negative", c.LeaveTimeout)
	}
	if c.StreamIdleTimeout < 0 {
		add("mesh: StreamIdleTimeout %v must not be negative", c.StreamIdleTimeout)
	}
	if c.SendQueue < 1 {
		add("mesh: SendQueue %d must be at least 1", c.SendQueue)
	}
	if c.ConnLow < 1 || c.ConnHigh <= c.ConnLow {
		add("mesh: connection watermarks %d/%d: want 0 < ConnLow < ConnHigh", c.ConnLow, c.ConnHigh)
	}
	if c.ResourceMemory < 0 {
		add("mesh: ResourceMemory %d must not be negative", c.ResourceMemory)
	}
	return errors.Join(errs...)
}

// validNetworkName checks a network name: it appears in protocol IDs and in
// memberlist's label.
func validNetworkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("network name %q: want 1 to 64 characters", name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("network name %q: only a-z, 0-9, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

// isTCP tells whether a listen address is plain TCP: an IP address and a
// TCP port, nothing on top.
func isTCP(a ma.Multiaddr) bool {
	return len(a) == 2 && isIP(a[0]) && a[1].Protocol().Code == ma.P_TCP
}

// isQUIC tells whether a listen address is QUIC v1 over UDP, nothing on top.
func isQUIC(a ma.Multiaddr) bool {
	return len(a) == 3 && isIP(a[0]) && a[1].Protocol().Code == ma.P_UDP && a[2].Protocol().Code == ma.P_QUIC_V1
}

func isIP(c ma.Component) bool {
	code := c.Protocol().Code
	return code == ma.P_IP4 || code == ma.P_IP6
}
