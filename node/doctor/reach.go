package doctor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gpumesh/gpumesh/internal/portuse"
	"github.com/gpumesh/gpumesh/mesh"
)

// portsState is what checkPorts found, for the mesh checks after it.
type portsState struct {
	result Result
	free   bool // every listen port can be listened on
}

// socketOf is the network and host:port a listen address binds, as
// net.Listen takes them ("tcp4", "0.0.0.0:4747"); ok is false for an
// address that binds no socket of its own (a relay address, DNS).
func socketOf(a ma.Multiaddr) (network, addr string, ok bool) {
	ip, rest := ma.SplitFirst(a)
	tr, _ := ma.SplitFirst(rest)
	if ip == nil || tr == nil {
		return "", "", false
	}
	fam := ""
	switch ip.Protocol().Code {
	case ma.P_IP4:
		fam = "4"
	case ma.P_IP6:
		fam = "6"
	default:
		return "", "", false
	}
	switch tr.Protocol().Code {
	case ma.P_TCP:
		network = "tcp" + fam
	case ma.P_UDP:
		network = "udp" + fam
	default:
		return "", "", false
	}
	return network, net.JoinHostPort(ip.Value(), tr.Value()), true
}

// checkPorts: the node's listen ports are free, or held by a gpumesh node
// already running here.
func checkPorts(cfg Config) portsState {
	st := portsState{result: Result{Check: "listen port"}, free: true}
	var free, mine, others []string
	for _, a := range cfg.ListenAddrs {
		network, addr, ok := socketOf(a)
		if !ok {
			continue
		}
		desc := strings.ToUpper(network[:3]) + " " + addr
		err := cfg.System.CheckPort(network, addr)
		var busy *portuse.BusyError
		switch {
		case err == nil:
			free = append(free, desc)
		case errors.As(err, &busy) && strings.Contains(busy.Command, "gpumesh"):
			st.free = false
			mine = append(mine, busy.Error())
		default:
			st.free = false
			others = append(others, err.Error())
		}
	}
	r := &st.result
	switch {
	case len(others) > 0:
		r.Status, r.Found = Fail, strings.Join(others, "; ")
		r.Fix = "stop what holds the port, or give the node another port (--listen /ip4/0.0.0.0/tcp/PORT)"
	case len(mine) > 0:
		r.Status, r.Found = OK, "a gpumesh node is running here: "+strings.Join(mine, "; ")
	default:
		r.Status, r.Found = OK, "free: "+strings.Join(free, ", ")
	}
	return st
}

// checkMesh: whether peers of the mesh can dial this machine, and what
// kind of NAT it is behind, by a probe through the --join peers.
func checkMesh(ctx context.Context, cfg Config, ports portsState) []Result {
	reach := Result{Check: "mesh reachability"}
	nat := Result{Check: "NAT type"}
	if cfg.Probe == nil {
		reach.Status, reach.Found = Skip, "not checked: give --join PEER_ADDRESS to ask a peer of the mesh"
		nat.Status, nat.Found = Skip, "not checked: give --join PEER_ADDRESS (two peers tell the NAT's kind)"
		return []Result{reach, nat}
	}
	listen := cfg.ListenAddrs
	if !ports.free { // the node runs, or something else holds its port: probe from any port
		listen = nil
		for _, a := range cfg.ListenAddrs {
			if network, _, ok := socketOf(a); ok {
				ip, _ := ma.SplitFirst(a)
				if strings.HasPrefix(network, "tcp") {
					listen = append(listen, ma.Multiaddr{*ip}.Encapsulate(ma.StringCast("/tcp/0")))
				}
			}
		}
	}
	res, err := cfg.Probe(ctx, listen)
	if err != nil {
		reach.Status, reach.Found = Fail, "the probe did not run: "+err.Error()
		nat.Status, nat.Found = Skip, "not checked"
		return []Result{reach, nat}
	}
	var answered []mesh.ProbePeer
	var failed []string
	for _, p := range res.Peers {
		if p.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.Addr, p.Err))
		} else {
			answered = append(answered, p)
		}
	}
	if len(answered) == 0 {
		reach.Status, reach.Found = Fail, "no --join peer answered: "+strings.Join(failed, "; ")
		reach.Fix = "check the peer's address and that this machine may connect out to it (firewall, proxy)"
		nat.Status, nat.Found = Skip, "not checked: no peer answered"
		return []Result{reach, nat}
	}
	ips, _ := cfg.System.InterfaceIPs()
	reach = reachResult(res, ports, failed)
	nat = natResult(answered, ips)
	return []Result{reach, nat}
}

// reachResult says whether a peer could dial this machine back.
func reachResult(res mesh.ProbeResult, ports portsState, failed []string) Result {
	r := Result{Check: "mesh reachability"}
	note := ""
	if len(failed) > 0 {
		note = fmt.Sprintf(" (%d peer%s did not answer: %s)", len(failed), plural(len(failed)), strings.Join(failed, "; "))
	}
	switch {
	case !ports.free:
		r.Status, r.Found = Skip, "not checked: the listen port is held (see listen port); a running node shows its own in `gpumesh status`"+note
	case len(res.Reachable) > 0:
		r.Status, r.Found = OK, "a peer dialled this machine back at "+joinAddrs(res.Reachable)+": peers connect directly"+note
	case len(res.Unreachable) > 0:
		r.Status = Warn
		r.Found = "a peer could not dial this machine back at " + joinAddrs(res.Unreachable) + ": peers reach it through relays, or directly after hole punching" + note
		r.Fix = "for direct connections forward TCP and UDP port " + portOf(res.Unreachable[0]) + " on the router to this machine, or open it in the firewall"
	default:
		r.Status = Warn
		r.Found = "not tested: " + errString(res.ReachErr) + note
		r.Fix = "join a peer that runs gpumesh with NAT traversal on (not --no-nat), at a public address"
	}
	return r
}

func errString(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}

// natResult tells from the addresses the peers saw whether this machine is
// behind NAT, and of what kind: a NAT that gives one outside port to every
// peer (endpoint-independent mapping) lets hole punching work; one that
// gives each peer its own (symmetric) leaves peers behind NAT relayed.
func natResult(peers []mesh.ProbePeer, local []net.IP) Result {
	r := Result{Check: "NAT type"}
	isLocal := func(ip net.IP) bool {
		for _, l := range local {
			if l.Equal(ip) {
				return true
			}
		}
		return false
	}
	// By transport (tcp, udp): the outside ports seen, and whether any
	// peer saw another IP than this machine's own.
	type seen struct{ ports map[string]bool }
	byTransport := map[string]*seen{}
	var outside []string
	behind := false
	for _, p := range peers {
		if p.Observed == nil {
			continue
		}
		ip, err := manet.ToIP(p.Observed)
		if err != nil {
			continue
		}
		tr, port := transportPort(p.Observed)
		if !isLocal(ip) {
			behind = true
			outside = append(outside, p.Observed.String())
		}
		if tr == "" {
			continue
		}
		if byTransport[tr] == nil {
			byTransport[tr] = &seen{ports: map[string]bool{}}
		}
		byTransport[tr].ports[port] = true
	}
	if !behind {
		r.Status, r.Found = OK, "none: the peers see this machine's own address"
		return r
	}
	symmetric, compared := false, false
	for tr, s := range byTransport {
		if len(s.ports) > 1 {
			symmetric = true
		}
		// Two addresses of one peer share one connection: only distinct
		// peers compare mappings.
		ids := map[string]bool{}
		for _, p := range peers {
			if t, _ := transportPort(p.Observed); t == tr {
				ids[p.ID.String()] = true
			}
		}
		compared = compared || len(ids) > 1
	}
	seenAs := strings.Join(dedupe(outside), ", ")
	switch {
	case symmetric:
		r.Status = Warn
		r.Found = "symmetric NAT: each peer sees another outside port (" + seenAs + "); hole punching will fail and peers behind NAT reach this machine through relays"
		r.Fix = "forward the listen port on the router, or ask the network's owner for a NAT with endpoint-independent mapping (full cone)"
	case compared:
		r.Status = OK
		r.Found = "behind NAT, one outside port for every peer (endpoint-independent mapping, seen as " + seenAs + "): hole punching can connect peers directly"
	default:
		r.Status = OK
		r.Found = "behind NAT (seen as " + seenAs + "); its kind is unknown: give two --join peers to compare the ports they see"
	}
	return r
}

// transportPort is the transport ("tcp", "udp") and port of a.
func transportPort(a ma.Multiaddr) (string, string) {
	if a == nil {
		return "", ""
	}
	if v, err := a.ValueForProtocol(ma.P_TCP); err == nil {
		return "tcp", v
	}
	if v, err := a.ValueForProtocol(ma.P_UDP); err == nil {
		return "udp", v
	}
	return "", ""
}

func portOf(a ma.Multiaddr) string {
	if _, p := transportPort(a); p != "" {
		return p
	}
	return strconv.Itoa(mesh.DefaultPort)
}

func joinAddrs(as []ma.Multiaddr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
