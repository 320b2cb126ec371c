package executor

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// egress builds the network of a NetworkEgress attempt with the ip and nft
// tools: a named network namespace "gpumesh-u<uid>" joined to the node by a
// veth pair (node side "gmh<uid>", job side "gmj<uid>") on a /31 of
// Config.EgressNet, a default route through the node, and two nftables
// tables:
//
//   - inside the namespace, "inet gpumesh": every packet leaving by the veth
//     to BlockedNets, to the node's own addresses or to Config.BlockPorts,
//     and all IPv6, is refused. The job's uid has no capabilities in that
//     namespace, so it cannot change them.
//   - on the node, "inet gpumesh_u<uid>": packets from the veth to the node
//     itself are dropped (its API and mesh ports on any of its addresses),
//     forwarded packets to BlockedNets are dropped again, nothing new may
//     enter the veth, and the job's address is masqueraded on the way out.
//
// teardown deletes the namespace, the veth and the node's table.
type egress struct {
	ip, nft    string // tool paths
	pool       netip.Prefix
	uidMin     uint32
	blockPorts []int
	log        *slog.Logger
}

// netnsDir is where ip keeps named network namespaces.
const netnsDir = "/var/run/netns"

// BlockedNets returns the IPv4 ranges a NetworkEgress job may not reach:
// "this network", RFC 1918 private networks, shared address space
// 100.64.0.0/10, loopback, link-local 169.254.0.0/16 (with cloud metadata
// at 169.254.169.254), IETF protocol assignments, benchmarking, multicast
// and reserved space. (All IPv6 is refused, which covers ULA fc00::/7 and
// link-local fe80::/10.)
func BlockedNets() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func blocked(a netip.Addr) bool {
	for _, p := range BlockedNets() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// newEgress finds the tools egress needs; the error names what is missing.
func newEgress(cfg Config) (*egress, error) {
	var missing []string
	ip, err := exec.LookPath("ip")
	if err != nil {
		missing = append(missing, "ip (package iproute2)")
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		missing = append(missing, "nft (package nftables)")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("egress needs %s", strings.Join(missing, " and "))
	}
	return &egress{ip: ip, nft: nft, pool: cfg.EgressNet.Masked(), uidMin: cfg.UIDMin, blockPorts: cfg.BlockPorts, log: cfg.Logger}, nil
}

func (e *egress) netns(uid uint32) string  { return "gpumesh-u" + strconv.FormatUint(uint64(uid), 10) }
func (e *egress) hostIf(uid uint32) string { return "gmh" + strconv.FormatUint(uint64(uid), 10) }
func (e *egress) jobIf(uid uint32) string  { return "gmj" + strconv.FormatUint(uint64(uid), 10) }
func (e *egress) table(uid uint32) string  { return "gpumesh_u" + strconv.FormatUint(uint64(uid), 10) }

// nsPath is the file that names the attempt's network namespace.
func (e *egress) nsPath(uid uint32) string { return filepath.Join(netnsDir, e.netns(uid)) }

// link returns the node's and the job's address on the attempt's /31.
func (e *egress) link(uid uint32) (host, job netip.Addr, err error) {
	idx := uint64(uid - e.uidMin)
	links := uint64(1) << (32 - e.pool.Bits() - 1)
	if idx >= links {
		return host, job, fmt.Errorf("%w: egress net %s has room for %d links, uid %d needs link %d",
			ErrNetworkUnavailable, e.pool, links, uid, idx)
	}
	b := e.pool.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(2 * idx)
	host = netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)})
	return host, host.Next(), nil
}

// present tells whether anything of uid's egress network exists.
func (e *egress) present(uid uint32) bool {
	_, err1 := os.Stat(e.nsPath(uid))
	_, err2 := os.Stat(filepath.Join("/sys/class/net", e.hostIf(uid)))
	return err1 == nil || err2 == nil
}

// setup builds uid's egress network. On error it tears down what it made.
func (e *egress) setup(uid uint32) (err error) {
	host, job, err := e.link(uid)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			e.teardown(uid)
		}
	}()
	ns, hif, jif := e.netns(uid), e.hostIf(uid), e.jobIf(uid)
	if err := e.run(e.ip, []string{"-batch", "-"}, strings.Join([]string{
		"netns add " + ns,
		"link add " + hif + " type veth peer name " + jif + " netns " + ns,
		"addr add " + host.String() + "/31 dev " + hif,
		"link set " + hif + " up",
	}, "\n")); err != nil {
		return err
	}
	if err := e.run(e.ip, []string{"-n", ns, "-batch", "-"}, strings.Join([]string{
		"link set lo up",
		"addr add " + job.String() + "/31 dev " + jif,
		"link set " + jif + " up",
		"route add default via " + host.String() + " dev " + jif,
	}, "\n")); err != nil {
		return err
	}
	if err := e.run(e.ip, []string{"netns", "exec", ns, e.nft, "-f", "-"}, e.jobRules(jif)); err != nil {
		return err
	}
	if err := e.run(e.nft, []string{"-f", "-"}, e.hostRules(uid, hif, job)); err != nil {
		return err
	}
	return e.forwarding()
}

// teardown removes uid's egress network; what is already gone is skipped.
func (e *egress) teardown(uid uint32) {
	_ = e.run(e.nft, []string{"delete", "table", "inet", e.table(uid)}, "")
	if _, err := os.Stat(filepath.Join("/sys/class/net", e.hostIf(uid))); err == nil {
		if err := e.run(e.ip, []string{"link", "del", e.hostIf(uid)}, ""); err != nil {
			e.log.Warn("executor: egress teardown", "err", err)
		}
	}
	if _, err := os.Stat(e.nsPath(uid)); err == nil {
		if err := e.run(e.ip, []string{"netns", "del", e.netns(uid)}, ""); err != nil {
			e.log.Warn("executor: egress teardown", "err", err)
		}
	}
}

// jobRules is the namespace's own filter: what the job may send.
func (e *egress) jobRules(jif string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet gpumesh {\n")
	fmt.Fprintf(&b, "  set blocked { type ipv4_addr; flags interval; elements = { %s } }\n", strings.Join(e.blockedElems(), ", "))
	fmt.Fprintf(&b, "  chain output {\n    type filter hook output priority filter; policy accept;\n")
	fmt.Fprintf(&b, "    oifname \"lo\" accept\n")
	// A private network's TCP redirected to the node's listener on
	// loopback (nat output) keeps the interface of its first route here.
	fmt.Fprintf(&b, "    ip daddr 127.0.0.0/8 accept\n")
	// TCP is refused with a reset: the job's connect fails at once (ICMP
	// errors are rate-limited, so a second refused SYN would wait a second).
	fmt.Fprintf(&b, "    meta nfproto ipv6 meta l4proto tcp reject with tcp reset\n")
	fmt.Fprintf(&b, "    meta nfproto ipv6 reject with icmpv6 type admin-prohibited\n")
	fmt.Fprintf(&b, "    ip daddr @blocked meta l4proto tcp reject with tcp reset\n")
	fmt.Fprintf(&b, "    ip daddr @blocked reject with icmp type admin-prohibited\n")
	if ports := e.ports(); ports != "" {
		fmt.Fprintf(&b, "    tcp dport { %s } reject with tcp reset\n", ports)
		fmt.Fprintf(&b, "    udp dport { %s } reject with icmp type admin-prohibited\n", ports)
	}
	fmt.Fprintf(&b, "    oifname != %q drop\n  }\n}\n", jif)
	return b.String()
}

// hostRules is the node's table for uid's link.
func (e *egress) hostRules(uid uint32, hif string, job netip.Addr) string {
	t := e.table(uid)
	var b strings.Builder
	// Replace any leftover table of the same name in one transaction.
	fmt.Fprintf(&b, "table inet %s {}\ndelete table inet %s\n", t, t)
	fmt.Fprintf(&b, "table inet %s {\n", t)
	fmt.Fprintf(&b, "  set blocked { type ipv4_addr; flags interval; elements = { %s } }\n", strings.Join(e.blockedElems(), ", "))
	fmt.Fprintf(&b, "  chain input {\n    type filter hook input priority filter - 10; policy accept;\n")
	fmt.Fprintf(&b, "    iifname %q drop\n  }\n", hif)
	fmt.Fprintf(&b, "  chain forward {\n    type filter hook forward priority filter - 10; policy accept;\n")
	fmt.Fprintf(&b, "    iifname %q meta nfproto ipv6 drop\n", hif)
	fmt.Fprintf(&b, "    iifname %q ip daddr @blocked drop\n", hif)
	fmt.Fprintf(&b, "    oifname %q ct state established,related accept\n", hif)
	fmt.Fprintf(&b, "    oifname %q drop\n  }\n", hif)
	fmt.Fprintf(&b, "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n")
	fmt.Fprintf(&b, "    ip saddr %s oifname != %q masquerade\n  }\n}\n", job, hif)
	return b.String()
}

// blockedElems is BlockedNets plus the node's own IPv4 addresses.
func (e *egress) blockedElems() []string {
	var out []string
	for _, p := range BlockedNets() {
		out = append(out, p.String())
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && !blocked(ip.Unmap()) {
				out = append(out, ip.Unmap().String())
			}
		}
	}
	return out
}

func (e *egress) ports() string {
	var out []string
	seen := map[int]bool{}
	for _, p := range e.blockPorts {
		if !seen[p] {
			seen[p] = true
			out = append(out, strconv.Itoa(p))
		}
	}
	return strings.Join(out, ", ")
}

// forwarding turns on IPv4 forwarding on the node, which egress needs.
func (e *egress) forwarding() error {
	const p = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("egress: enabling IPv4 forwarding: %w", err)
	}
	e.log.Warn("executor: enabled IPv4 forwarding (net.ipv4.ip_forward=1) for sandbox egress")
	return nil
}

func (e *egress) run(tool string, args []string, stdin string) error {
	cmd := exec.Command(tool, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("egress: %s %s: %s", filepath.Base(tool), strings.Join(args, " "), msg)
	}
	return nil
}

// nameservers picks the resolvers of egress jobs: cfg's, else the node's
// own that are public IPv4 addresses, else 1.1.1.1 and 8.8.8.8.
func nameservers(cfg Config) []netip.Addr {
	if len(cfg.Nameservers) > 0 {
		return cfg.Nameservers
	}
	var out []netip.Addr
	b, _ := os.ReadFile("/etc/resolv.conf")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && !blocked(a) {
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		out = []netip.Addr{netip.AddrFrom4([4]byte{1, 1, 1, 1}), netip.AddrFrom4([4]byte{8, 8, 8, 8})}
	}
	return out
}

// resolvConf is the resolv.conf of an egress job.
func resolvConf(servers []netip.Addr) []byte {
	var b bytes.Buffer
	b.WriteString("# written by gpumesh for a sandboxed job with egress\n")
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	return b.Bytes()
}
