package mesh

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/autonatv2"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// ProbeConfig says how to probe a machine's place in the mesh before a
// node runs on it (gpumesh doctor --join).
type ProbeConfig struct {
	// Join are full addresses of mesh peers to ask (at least one).
	Join []ma.Multiaddr
	// ListenAddrs are the addresses the node will listen on. The probe
	// listens there itself, so that a peer's dial back tests the real
	// port: they must be free (the node must not be running).
	ListenAddrs []ma.Multiaddr
	// Secret is the private mesh's secret, if any.
	Secret []byte
	// Timeout bounds the whole probe (default 15 s).
	Timeout time.Duration
}

// ProbePeer is what one join peer said.
type ProbePeer struct {
	Addr ma.Multiaddr
	ID   peer.ID
	// Err is why the peer could not be reached or identified; nil when
	// it answered.
	Err error
	// Local is this side's address of the connection, Observed the same
	// as the peer saw it (across any NAT).
	Local, Observed ma.Multiaddr
}

// ProbeResult is what a probe found out.
type ProbeResult struct {
	Peers []ProbePeer
	// Reachable and Unreachable are the addresses that a peer did and did
	// not manage to dial back (AutoNAT v2); ReachErr says why none was
	// tested (no peer serves AutoNAT v2, only private addresses, ...).
	Reachable, Unreachable []ma.Multiaddr
	ReachErr               error
}

// Probe joins no mesh: it connects to the join peers as a client with a
// throwaway identity, reads the address each saw it come from (identify),
// and asks one to dial its listen port back (AutoNAT v2). It keeps no state
// and closes everything before it returns.
func Probe(ctx context.Context, cfg ProbeConfig) (ProbeResult, error) {
	if len(cfg.Join) == 0 {
		return ProbeResult{}, errors.New("mesh: probe: no peer to ask")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if len(cfg.ListenAddrs) == 0 {
		cfg.ListenAddrs = defaultListenAddrs(len(cfg.Secret) > 0)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var psk []byte
	if len(cfg.Secret) > 0 {
		keys, err := deriveKeys(cfg.Secret)
		if err != nil {
			return ProbeResult{}, err
		}
		psk = keys.psk
	}
	h, err := probeHost(cfg.ListenAddrs, psk)
	if err != nil {
		return ProbeResult{}, err
	}
	defer h.Close()
	dialer, err := probeHost(nil, psk)
	if err != nil {
		return ProbeResult{}, err
	}
	defer dialer.Close()
	an, err := autonatv2.New(dialer)
	if err != nil {
		return ProbeResult{}, fmt.Errorf("mesh: probe: %w", err)
	}
	sub, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		return ProbeResult{}, err
	}
	subDone := make(chan struct{})
	defer func() { sub.Close(); <-subDone }()
	if err := an.Start(h); err != nil {
		return ProbeResult{}, fmt.Errorf("mesh: probe: %w", err)
	}
	defer an.Close()

	// Identification events, by peer, gathered while the dials run.
	var (
		mu       sync.Mutex
		observed = map[peer.ID]event.EvtPeerIdentificationCompleted{}
		changed  = make(chan struct{}, 1)
	)
	go func() {
		defer close(subDone)
		for e := range sub.Out() {
			ev := e.(event.EvtPeerIdentificationCompleted)
			mu.Lock()
			observed[ev.Peer] = ev
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()

	res := ProbeResult{Peers: make([]ProbePeer, len(cfg.Join))}
	var wg sync.WaitGroup
	for i, a := range cfg.Join {
		res.Peers[i].Addr = a
		info, err := peer.AddrInfoFromP2pAddr(a)
		if err != nil {
			res.Peers[i].Err = fmt.Errorf("not a full peer address: %w", err)
			continue
		}
		res.Peers[i].ID = info.ID
		wg.Add(1)
		go func(i int, info peer.AddrInfo) {
			defer wg.Done()
			if err := h.Connect(ctx, info); err != nil {
				res.Peers[i].Err = explainConnectError(err)
			}
		}(i, *info)
	}
	wg.Wait()
	// Wait for identify to finish with each connected peer.
	for {
		mu.Lock()
		pending := 0
		for i, p := range res.Peers {
			if p.Err != nil || p.ID == "" {
				continue
			}
			ev, ok := observed[p.ID]
			if !ok {
				pending++
				continue
			}
			res.Peers[i].Observed = ev.ObservedAddr
			if ev.Conn != nil {
				res.Peers[i].Local = ev.Conn.LocalMultiaddr()
			}
		}
		mu.Unlock()
		if pending == 0 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			for i, p := range res.Peers {
				if p.Err == nil && p.Observed == nil {
					res.Peers[i].Err = errors.New("connected, but the peer did not identify itself in time")
				}
			}
			return res, nil
		}
	}
	res.Reachable, res.Unreachable, res.ReachErr = dialBack(ctx, an, h, res.Peers)
	return res, nil
}

// dialBack asks a peer to dial back the addresses a node with h's listen
// ports would have: each public listen address, and each address a peer
// saw this side come from with its port replaced by the listen port (a
// router that forwards the port, or maps it unchanged).
func dialBack(ctx context.Context, an *autonatv2.AutoNAT, h host.Host, peers []ProbePeer) (ok, not []ma.Multiaddr, err error) {
	var reqs []autonatv2.Request
	seen := map[string]bool{}
	add := func(a ma.Multiaddr) {
		if a == nil || seen[a.String()] || !manet.IsPublicAddr(a) {
			return
		}
		seen[a.String()] = true
		reqs = append(reqs, autonatv2.Request{Addr: a, SendDialData: true})
	}
	for _, l := range h.Addrs() {
		add(l)
		for _, p := range peers {
			if p.Observed != nil {
				add(withIPOf(l, p.Observed))
			}
		}
	}
	if len(reqs) == 0 {
		return nil, nil, errors.New("no public address to test: the peers saw this machine at a private address, or none answered")
	}
	// GetReachability tests the first address the peer will dial; ask
	// again without it to test the next.
	for len(reqs) > 0 && ctx.Err() == nil {
		r, err := an.GetReachability(ctx, reqs)
		if err == nil && r.AllAddrsRefused {
			err = fmt.Errorf("the peer declined to dial %s back", joinAddrs(reqs))
		}
		if err != nil {
			if ok == nil && not == nil {
				return nil, nil, err
			}
			break
		}
		switch r.Reachability {
		case network.ReachabilityPublic:
			ok = append(ok, r.Addr)
		case network.ReachabilityPrivate:
			not = append(not, r.Addr)
		}
		if r.AllAddrsRefused || r.Idx < 0 || r.Idx >= len(reqs) {
			break
		}
		reqs = append(reqs[:r.Idx:r.Idx], reqs[r.Idx+1:]...)
	}
	return ok, not, nil
}

// withIPOf is listen address l with its IP taken from observed, when both
// are of the same IP family and transport; nil otherwise.
func withIPOf(l, observed ma.Multiaddr) ma.Multiaddr {
	lip, lrest := ma.SplitFirst(l)
	oip, orest := ma.SplitFirst(observed)
	if lip == nil || oip == nil || lip.Protocol().Code != oip.Protocol().Code {
		return nil
	}
	lt, _ := ma.SplitFirst(lrest)
	ot, _ := ma.SplitFirst(orest)
	if lt == nil || ot == nil || lt.Protocol().Code != ot.Protocol().Code {
		return nil
	}
	return append(ma.Multiaddr{*oip}, lrest...)
}

// probeHost is a libp2p host with the transports and security of a node,
// a throwaway identity, and no relaying, port mapping or metrics.
func probeHost(listen []ma.Multiaddr, psk []byte) (host.Host, error) {
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
		libp2p.UserAgent("gpumesh-doctor"),
	}
	if len(listen) > 0 {
		opts = append(opts, libp2p.ListenAddrs(listen...))
	} else {
		opts = append(opts, libp2p.NoListenAddrs)
	}
	if len(psk) > 0 {
		opts = append(opts, libp2p.PrivateNetwork(psk))
	} else {
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("mesh: probe host: %w", err)
	}
	return h, nil
}

func joinAddrs(reqs []autonatv2.Request) string {
	s := make([]string, len(reqs))
	for i, r := range reqs {
		s[i] = r.Addr.String()
	}
	return strings.Join(s, ", ")
}
