package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// PrivateNet puts a sandboxed attempt on a network of its job's own: the
// shares of a gang reach each other there, whatever network they have
// otherwise (none or egress), and nothing else can reach it.
//
// In the attempt's network namespace the executor gives the job Addr on
// the interface PrivateInterface (one end of a veth pair that stays in the
// namespace), and redirects every TCP connection the job opens to another
// address of Addr's network (nftables, nat output) to a listener held in
// the namespace (Run.PrivateListener); OriginalDst tells where such a
// connection was going. Whoever accepts them (the node's gangnet) carries
// them to the share that holds that address, which it reaches with
// Run.DialPrivate. Other protocols to the network are refused; the job's
// own address is its own, as loopback is. The job's uid has no capability
// in the namespace, so it cannot change any of it.
type PrivateNet struct {
	// Addr is the attempt's address with the length of its network's
	// prefix (10.37.0.2/16). The network must lie inside a private range
	// (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10), so
	// that it never shadows a public address, and be /8 to /30.
	Addr netip.Prefix
}

// PrivateInterface is the interface that holds an attempt's PrivateNet
// address. A job that uses the network sees NCCL_SOCKET_IFNAME=
// "="+PrivateInterface and GLOO_SOCKET_IFNAME=PrivateInterface (unless its
// spec sets them) and GPUMESH_PRIVATE_ADDR, its address.
const PrivateInterface = "gang0"

// privateRanges are the ranges a PrivateNet may use.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

func (p *PrivateNet) validate(l Limits) error {
	a := p.Addr
	if !a.IsValid() || !a.Addr().Is4() || a.Bits() < 8 || a.Bits() > 30 {
		return fmt.Errorf("executor: private network address %s: want an IPv4 address with a prefix of /8 to /30", a)
	}
	if a.Addr() == a.Masked().Addr() || a.Addr() == lastAddr(a) {
		return fmt.Errorf("executor: private network address %s: the network's first and last addresses are not a host's", a)
	}
	inside := false
	for _, r := range privateRanges {
		inside = inside || (r.Bits() <= a.Bits() && r.Contains(a.Addr()))
	}
	if !inside {
		return fmt.Errorf("executor: private network %s: want a network inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10", a.Masked())
	}
	if l.Network == NetworkHost {
		return errors.New("executor: a private network needs a network namespace of the job's own: network none or egress, not host")
	}
	return nil
}

// lastAddr is the last address of p's network.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// privateEnv adds the variables of a job on a private network to env,
// before the job's own: those it sets win.
func privateEnv(env map[string]string, p *PrivateNet) {
	if p == nil {
		return
	}
	env["NCCL_SOCKET_IFNAME"] = "=" + PrivateInterface // "=": exactly this interface
	env["GLOO_SOCKET_IFNAME"] = PrivateInterface
}

// PrivateListener is where the attempt's TCP connections to other
// addresses of its private network arrive, redirected: OriginalDst of an
// accepted connection is the address and port the job connected to. Nil
// without Attempt.Private. The executor closes it when the attempt ends
// (Accept then fails); the connections accepted from it are the caller's
// to close.
func (r *Run) PrivateListener() net.Listener {
	r.mu.Lock()
	j := r.jail
	r.mu.Unlock()
	if j == nil {
		return nil
	}
	return j.private()
}

// DialPrivate connects to port on the attempt's private address from
// inside its network namespace: a port the job listens on there (on that
// address or on all addresses) is reached. ErrAttemptEnded once the
// attempt's process has exited.
func (r *Run) DialPrivate(ctx context.Context, port int) (net.Conn, error) {
	p := r.attempt.Private
	if p == nil {
		return nil, errors.New("executor: the attempt has no private network")
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("executor: port %d: want 1 to 65535", port)
	}
	r.mu.Lock()
	j, ended := r.jail, !r.result.EndedAt.IsZero() || r.cmd == nil
	r.mu.Unlock()
	if ended || isClosed(r.done) {
		return nil, ErrAttemptEnded
	}
	return j.dial(ctx, netip.AddrPortFrom(p.Addr.Addr(), uint16(port)))
}
