package mesh

import (
	"fmt"
	"net"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/internal/portuse"
)

// CheckPorts reports the first listen address of c (its default ones when
// it names none) whose port another socket holds, as an error wrapping a
// *portuse.BusyError that names the process holding it where the system
// tells. libp2p opens its TCP listeners with SO_REUSEPORT (to dial out
// from the listen port, through NATs), so a second node on a taken port
// would come up beside the first one, advertise the port and take part of
// its connections. New checks first; a node checks before it writes
// anything to its data dir.
func (c Config) CheckPorts() error {
	for _, a := range c.withDefaults().ListenAddrs {
		network, addr, ok := listenSocket(a)
		if !ok {
			continue
		}
		if err := portuse.Check(network, addr); err != nil {
			return fmt.Errorf("mesh: listen address %s: %w", a, err)
		}
	}
	return nil
}

// listenSocket is the socket a TCP or QUIC listen address binds: network
// "tcp4", "tcp6", "udp4" or "udp6", and host:port.
func listenSocket(a ma.Multiaddr) (network, addr string, ok bool) {
	if !isTCP(a) && !isQUIC(a) {
		return "", "", false
	}
	ip, proto := a[0], a[1]
	network = proto.Protocol().Name + "4"
	if ip.Protocol().Code == ma.P_IP6 {
		network = proto.Protocol().Name + "6"
	}
	return network, net.JoinHostPort(ip.Value(), proto.Value()), true
}
