package executor

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// privatePeer is the other end of the veth that holds PrivateInterface: it
// stays in the namespace with no address (a veth pair works where the
// dummy module is missing, and egress needs veth anyway).
const privatePeer = "gang0p"

// privateTable is the nftables table of the private network inside the
// attempt's namespace.
const privateTable = "gpumesh_private"

// isolated makes uid's named network namespace with only loopback up: the
// namespace of a NetworkNone attempt on a private network (egress.setup
// makes an egress attempt's). teardown removes it.
func (e *egress) isolated(uid uint32) (err error) {
	defer func() {
		if err != nil {
			e.teardown(uid)
		}
	}()
	ns := e.netns(uid)
	if err := e.run(e.ip, []string{"netns", "add", ns}, ""); err != nil {
		return err
	}
	return e.run(e.ip, []string{"-n", ns, "link", "set", "lo", "up"}, "")
}

// private gives uid's namespace (made by setup or isolated) the attempt's
// private address and the redirect of its TCP to the rest of the network
// to a listener held in the namespace, which it returns. teardown of the
// namespace removes the rest.
func (e *egress) private(uid uint32, p *PrivateNet) (_ net.Listener, err error) {
	ns := e.netns(uid)
	if err := e.run(e.ip, []string{"-n", ns, "-batch", "-"}, strings.Join([]string{
		"link add " + PrivateInterface + " type veth peer name " + privatePeer,
		"addr add " + p.Addr.String() + " dev " + PrivateInterface,
		"link set " + privatePeer + " up",
		"link set " + PrivateInterface + " up",
	}, "\n")); err != nil {
		return nil, err
	}
	var ln net.Listener
	if err := inNetns(e.nsPath(uid), func() error {
		var err error
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		return nil, fmt.Errorf("private network: listening in the job's namespace: %w", err)
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := e.run(e.ip, []string{"netns", "exec", ns, e.nft, "-f", "-"}, privateRules(p, port)); err != nil {
		return nil, err
	}
	return ln, nil
}

// privateRules is the namespace's table for its private network: TCP to
// another address of the network goes to the node's listener on port;
// anything else to those addresses is refused at once.
func privateRules(p *PrivateNet, port int) string {
	var b strings.Builder
	self, subnet := p.Addr.Addr(), p.Addr.Masked()
	fmt.Fprintf(&b, "table ip %s {\n", privateTable)
	fmt.Fprintf(&b, "  chain to_node {\n    type nat hook output priority -100; policy accept;\n")
	fmt.Fprintf(&b, "    ip daddr %s ip daddr != %s meta l4proto tcp redirect to :%d\n  }\n", subnet, self, port)
	// After the redirect (priority dstnat) TCP's destination is loopback:
	// what still goes to the network is another protocol.
	fmt.Fprintf(&b, "  chain others {\n    type filter hook output priority filter; policy accept;\n")
	fmt.Fprintf(&b, "    ip daddr %s ip daddr != %s reject with icmp type admin-prohibited\n  }\n}\n", subnet, self)
	return b.String()
}

// inNetns runs fn on a thread inside the network namespace named by path;
// the thread is never unlocked and ends with it. A socket fn makes stays
// in that namespace wherever it is used from.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the namespace
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("entering %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// soOriginalDst is SO_ORIGINAL_DST of linux/netfilter_ipv4.h.
const soOriginalDst = 80

// OriginalDst returns where a connection accepted from a PrivateListener
// was going before it was redirected: an address of the private network
// and a port.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, errors.New("executor: not a TCP connection")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa unix.RawSockaddrInet4
	var serr error
	if err := rc.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(sa))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_IP, soOriginalDst,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
		}
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("executor: the connection's original destination: %w", serr)
	}
	pb := (*[2]byte)(unsafe.Pointer(&sa.Port)) // network byte order
	port := uint16(pb[0])<<8 | uint16(pb[1])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}
