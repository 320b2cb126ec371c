package mesh

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// gater is the host's connection gater: it refuses every connection to or
// from a blocked peer, at every stage libp2p asks (dial, accepted and
// secured connection). Blocking is the mesh's answer to a peer proven to
// misbehave; see Mesh.Block.
type gater struct {
	mu      sync.RWMutex
	blocked map[peer.ID]struct{}
}

var _ connmgr.ConnectionGater = (*gater)(nil)

func newGater() *gater { return &gater{blocked: make(map[peer.ID]struct{})} }

func (g *gater) block(id peer.ID) {
	g.mu.Lock()
	g.blocked[id] = struct{}{}
	g.mu.Unlock()
}

func (g *gater) unblock(id peer.ID) {
	g.mu.Lock()
	delete(g.blocked, id)
	g.mu.Unlock()
}

func (g *gater) isBlocked(id peer.ID) bool {
	g.mu.RLock()
	_, ok := g.blocked[id]
	g.mu.RUnlock()
	return ok
}

// InterceptPeerDial refuses to dial a blocked peer.
func (g *gater) InterceptPeerDial(p peer.ID) bool { return !g.isBlocked(p) }

// InterceptAddrDial refuses to dial a blocked peer at any address.
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.isBlocked(p) }

// InterceptAccept accepts every inbound connection: the peer is not known
// yet, and the resource manager limits connections per IP address.
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses a blocked peer once its identity is proven.
func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.isBlocked(p)
}

// InterceptUpgraded accepts: a blocked peer was refused when secured.
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
