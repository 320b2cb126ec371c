package gangnet

import (
	"fmt"
	"hash/fnv"
	"net/netip"
)

// MaxRank is the highest rank a private network has an address for: a
// /16 holds 65534 hosts.
const MaxRank = 65533

// Subnet is the job's private network: 10.X.0.0/16, X from 1 to 254
// derived from the job's ID. Every share's namespace holds only its own
// address, so jobs whose subnets coincide never meet; deriving X from the
// ID only makes two jobs' addresses differ in logs.
func Subnet(job string) netip.Prefix {
	h := fnv.New32a()
	h.Write([]byte(job))
	x := byte(1 + h.Sum32()%254)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, x, 0, 0}), 16)
}

// Addr is the address of the share of the given rank on the job's private
// network, with the network's prefix length: rank 0 (the gang's master,
// MASTER_ADDR) is 10.X.0.1/16, rank 1 10.X.0.2/16 and so on.
func Addr(job string, rank int) (netip.Prefix, error) {
	if rank < 0 || rank > MaxRank {
		return netip.Prefix{}, fmt.Errorf("gangnet: rank %d: a private network has addresses for ranks 0 to %d", rank, MaxRank)
	}
	b := Subnet(job).Addr().As4()
	n := rank + 1
	b[2], b[3] = byte(n>>8), byte(n)
	return netip.PrefixFrom(netip.AddrFrom4(b), 16), nil
}

// RankOf is the rank whose address a is on the job's private network;
// false when a is not one.
func RankOf(job string, a netip.Addr) (int, bool) {
	if !Subnet(job).Contains(a) {
		return 0, false
	}
	b := a.As4()
	n := int(b[2])<<8 | int(b[3])
	if n < 1 || n > MaxRank+1 {
		return 0, false
	}
	return n - 1, true
}
