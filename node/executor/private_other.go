//go:build !linux

package executor

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst returns where a connection accepted from a PrivateListener
// was going; there is none on this platform.
func OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("executor: private networks need Linux")
}
