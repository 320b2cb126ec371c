package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
)

// mdnsServiceName is the DNS-SD service a network's nodes advertise on the
// LAN: one per network name, so that meshes on one LAN stay apart. DNS-SD
// service names are at most 15 characters, so the network name is hashed.
func mdnsServiceName(network string) string {
	sum := sha256.Sum256([]byte(network))
	return "_gm-" + hex.EncodeToString(sum[:5]) + "._udp"
}

// startMDNS advertises this node on the LAN and hands the peers found to
// the join loop.
func (m *Mesh) startMDNS() error {
	svc := mdns.NewMdnsService(m.h, mdnsServiceName(m.cfg.Network), mdnsNotifee{m})
	if err := svc.Start(); err != nil {
		return fmt.Errorf("mesh: mDNS: %w", err)
	}
	m.mdns = svc
	return nil
}

// mdnsNotifee passes found peers on without blocking: the mDNS service
// calls it from a goroutine of its own per peer. A full queue drops the
// peer; it is announced again.
type mdnsNotifee struct{ m *Mesh }

func (n mdnsNotifee) HandlePeerFound(info peer.AddrInfo) {
	select {
	case <-n.m.done:
	case n.m.found <- info:
	default:
	}
}
