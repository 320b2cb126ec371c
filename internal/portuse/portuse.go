// Package portuse says who holds a port that a listener could not have:
// the process and its command line, where the system tells (Linux, from
// /proc), so that "address already in use" names what to stop.
//
// The node's API listener and its mesh listen addresses both report a
// taken port through it, alike.
package portuse

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// BusyError is a port that another socket holds.
type BusyError struct {
	// Network is "tcp" or "udp".
	Network string
	// Addr is the address that was asked for, host:port.
	Addr string
	// Port is its port.
	Port int
	// PID is the process that holds the port, 0 when it could not be
	// found (another system than Linux, or a process of another user
	// while not root).
	PID int
	// Command is that process's command line, when PID is known.
	Command string
	// Err is the error the listener got.
	Err error
}

// Error names the port and its holder, such as "TCP port 4747 is in use
// by pid 4242 (gpumesh node --data /srv/gpumesh)".
func (e *BusyError) Error() string {
	s := fmt.Sprintf("%s port %d is in use", strings.ToUpper(e.Network), e.Port)
	if e.PID == 0 {
		return s + " by another process"
	}
	return fmt.Sprintf("%s by pid %d (%s)", s, e.PID, e.Command)
}

// Unwrap returns the listener's error.
func (e *BusyError) Unwrap() error { return e.Err }

// Explain returns err, the error of listening on addr (host:port) over
// network ("tcp", "tcp4", "udp6", ...), as a *BusyError when it says that
// the port is in use, naming the process that holds it where it can be
// found. Any other error comes back as it is.
func Explain(network, addr string, err error) error {
	if err == nil || !addrInUse(err) {
		return err
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	proto := "tcp"
	if strings.HasPrefix(network, "udp") {
		proto = "udp"
	}
	e := &BusyError{Network: proto, Addr: addr, Port: port, Err: err}
	if port > 0 {
		e.PID, e.Command = holder(proto, port)
	}
	return e
}

// Check reports whether addr's port can be listened on over network
// ("tcp4", "tcp6", "udp4", "udp6") by opening a listener there and closing
// it at once. It returns a *BusyError when another socket holds the port,
// even one that lets others share it (SO_REUSEPORT, which libp2p sets: two
// nodes would both come up on the port and split its connections); nil
// otherwise, any other error included, which the real listener will report.
// Port 0 is always free.
func Check(network, addr string) error {
	var err error
	switch {
	case strings.HasSuffix(addr, ":0"):
		return nil
	case strings.HasPrefix(network, "udp"):
		var pc net.PacketConn
		if pc, err = net.ListenPacket(network, addr); err == nil {
			pc.Close()
		}
	default:
		var ln net.Listener
		if ln, err = net.Listen(network, addr); err == nil {
			ln.Close()
		}
	}
	var busy *BusyError
	if errors.As(Explain(network, addr, err), &busy) {
		return busy
	}
	return nil
}
