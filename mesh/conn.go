package mesh

import (
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// How this node is connected to a peer, as Mesh.Conn tells.
const (
	// ConnDirect is a connection of its own (TCP or QUIC), dialled
	// either way, perhaps after hole punching through NATs.
	ConnDirect = "direct"
	// ConnRelayed is only a connection through a circuit relay (a third
	// peer carries the bytes, with the relay's limits on time and data).
	ConnRelayed = "relayed"
	// ConnNone is no open connection: a member is still known through
	// gossip about it, and a stream to it dials first.
	ConnNone = ""
)

// Conn says how this node is connected to peer id now: ConnDirect when
// any of its connections is direct, ConnRelayed when the only ones are
// relayed (libp2p's limited connections, or a p2p-circuit address),
// ConnNone when there is none.
func (m *Mesh) Conn(id peer.ID) string {
	return connKind(m.h.Network().ConnsToPeer(id))
}

func connKind(conns []network.Conn) string {
	kind := ConnNone
	for _, c := range conns {
		if c.Stat().Limited || isRelayed(c.RemoteMultiaddr()) {
			kind = ConnRelayed
			continue
		}
		return ConnDirect
	}
	return kind
}
