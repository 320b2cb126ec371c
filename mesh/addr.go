package mesh

import (
	"crypto/sha256"
	"net"
	"strconv"

	"github.com/libp2p/go-libp2p/core/peer"
)

// memberlist names every member by a host:port pair and parses it as one, but
// the mesh carries its traffic over libp2p, addressed by peer ID. Each peer
// therefore gets a synthetic address: an IPv6 unique local address (fd00::/8)
// made of a hash of its peer ID, and a fixed port. It is never dialled; the
// transport maps it back to the peer ID, and memberlist's node name (the peer
// ID itself) travels alongside in nearly every call.
const swimPort = 7946

// swimIP is the synthetic IPv6 address of a peer: fd followed by the first 15
// bytes of SHA-256 of the peer ID's bytes.
func swimIP(id peer.ID) net.IP {
	sum := sha256.Sum256([]byte(id))
	ip := make(net.IP, net.IPv6len)
	ip[0] = 0xfd
	copy(ip[1:], sum[:15])
	return ip
}

// swimHostPort is swimIP and swimPort as memberlist writes them.
func swimHostPort(id peer.ID) string {
	return net.JoinHostPort(swimIP(id).String(), strconv.Itoa(swimPort))
}

// swimAddr is a net.Addr for a peer's synthetic address.
type swimAddr struct {
	id peer.ID
	hp string
}

func newSwimAddr(id peer.ID) *swimAddr { return &swimAddr{id: id, hp: swimHostPort(id)} }

// Network implements net.Addr.
func (a *swimAddr) Network() string { return "libp2p" }

// String implements net.Addr with the synthetic host:port memberlist expects.
func (a *swimAddr) String() string { return a.hp }
