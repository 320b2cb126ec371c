package portuse

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A socket that lets others share its port (SO_REUSEPORT, as libp2p's TCP
// transport opens it) still holds the port: a second node would come up on
// it beside the first and take half its connections.
func TestCheckSeesASharedPortTaken(t *testing.T) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The share is real: a second SO_REUSEPORT listener comes up on it.
	second, err := lc.Listen(context.Background(), "tcp4", ln.Addr().String())
	if err != nil {
		t.Fatalf("a second SO_REUSEPORT listener: %v", err)
	}
	second.Close()
	checkBusy(t, "tcp4", ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port)
}
