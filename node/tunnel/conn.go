package tunnel

import (
	"net"
	"time"
)

// netConn is a tunnel as the net.Conn an http.Transport pools.
type netConn struct {
	Conn
	local, remote net.Addr
}

var _ net.Conn = (*netConn)(nil)

// tunnelAddr names a tunnel's end in a net.Conn.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "gpumesh-tunnel" }
func (a tunnelAddr) String() string  { return string(a) }

func asNetConn(c Conn, remote string) net.Conn {
	return &netConn{Conn: c, local: tunnelAddr("local"), remote: tunnelAddr(remote)}
}

func (c *netConn) LocalAddr() net.Addr  { return c.local }
func (c *netConn) RemoteAddr() net.Addr { return c.remote }

type deadliner interface {
	SetDeadline(time.Time) error
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// Deadlines are the stream's; a pipe within this node has none.
func (c *netConn) SetDeadline(t time.Time) error {
	if d, ok := c.Conn.(deadliner); ok {
		return d.SetDeadline(t)
	}
	return nil
}

func (c *netConn) SetReadDeadline(t time.Time) error {
	if d, ok := c.Conn.(deadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

func (c *netConn) SetWriteDeadline(t time.Time) error {
	if d, ok := c.Conn.(deadliner); ok {
		return d.SetWriteDeadline(t)
	}
	return nil
}
