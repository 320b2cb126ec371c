package mesh

import (
	"fmt"
	"net"
	"strings"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
)

// CheckPorts names the listen address whose port is taken, TCP or QUIC's
// UDP, and passes free ones and port 0.
func TestCheckPortsNamesATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	tcpPort, udpPort := ln.Addr().(*net.TCPAddr).Port, pc.LocalAddr().(*net.UDPAddr).Port
	tcp := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", tcpPort)
	quic := fmt.Sprintf("/ip4/127.0.0.1/udp/%d/quic-v1", udpPort)
	for _, tc := range []struct {
		addrs []string
		want  string // "" for no error
	}{
		{[]string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}, ""},
		{[]string{"/ip4/127.0.0.1/tcp/0", tcp}, "mesh: listen address " + tcp + fmt.Sprintf(": TCP port %d is in use by ", tcpPort)},
		{[]string{quic}, "mesh: listen address " + quic + fmt.Sprintf(": UDP port %d is in use by ", udpPort)},
	} {
		var c Config
		for _, s := range tc.addrs {
			c.ListenAddrs = append(c.ListenAddrs, ma.StringCast(s))
		}
		err := c.CheckPorts()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.addrs, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v: %v, want an error starting %q", tc.addrs, err, tc.want)
		}
	}
}
