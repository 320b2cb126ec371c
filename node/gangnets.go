package node

import (
	"fmt"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/gangnet"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A gang's private network (node/gangnet), wired into the node:
//
//   - A gang across nodes whose network is none or egress gets one: each
//     of its attempts here runs with the address of its rank on the
//     job's subnet (executor.PrivateNet), MASTER_ADDR is rank 0's, and
//     the node carries the attempt's connections to the other ranks over
//     the gangnet protocol, to the nodes the coordinator's roster (the
//     gang's Start) names. A gang on network host meets on the nodes'
//     own addresses, as before; a gang on one node at 127.0.0.1.
//   - A node whose executor cannot give private networks says why in its
//     market Policy (NoPrivateNet): it declines gangs across nodes unless
//     their network is host.

// startGangnet starts the service that carries gangs' private networks.
func (n *Node) startGangnet() error {
	svc, err := gangnet.New(gangnet.Config{Host: n.mesh.Host(), Network: n.mesh.Network(), Logger: n.log, Reach: n.reachable})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.gang = svc
	return nil
}

// reachable gives libp2p every address membership knows of a peer:
// behind NAT, its relayed ones (/p2p-circuit) are the ways in, which the
// peerstore may not hold when it holds a direct one that fails.
func (n *Node) reachable(id peer.ID) {
	n.dialable(id)
	if m, ok := n.mesh.Member(id); ok && len(m.Addrs) > 0 {
		n.mesh.Host().Peerstore().AddAddrs(id, m.Addrs, addrTTL)
	}
}

// onPrivateNet tells whether a gang attempt runs on its job's private
// network: a gang across nodes, not on network host, whose coordinator
// sent the roster (one of wire version 1 sends none, and runs its gangs
// on host).
func onPrivateNet(e market.Execution) bool {
	g := e.Gang
	return g != nil && g.NNodes > 1 && e.Exec.Network != market.NetworkHost && len(g.Members) == g.NNodes
}

// gangOf is a gang attempt's rendezvous: torchrun's variables and, on a
// private network, the attempt's address there. master is the master
// node's own address (for a gang on network host).
func gangOf(e market.Execution, master string) (*executor.Gang, *executor.PrivateNet, error) {
	g := &executor.Gang{NNodes: e.Gang.NNodes, NodeRank: e.Gang.NodeRank, MasterPort: masterPort(e.Job, e.Epoch), WorldSize: e.World}
	switch {
	case e.Gang.NNodes == 1:
		g.MasterAddr = "127.0.0.1"
		return g, nil, nil
	case !onPrivateNet(e):
		if master == "" {
			return nil, nil, fmt.Errorf("no address for the gang's master %s", e.Gang.Master)
		}
		g.MasterAddr = master
		return g, nil, nil
	}
	addr, err := gangnet.Addr(e.Job, e.Gang.NodeRank)
	if err != nil {
		return nil, nil, err
	}
	m, err := gangnet.Addr(e.Job, 0)
	if err != nil {
		return nil, nil, err
	}
	g.MasterAddr = m.Addr().String()
	return g, &executor.PrivateNet{Addr: addr}, nil
}

// joinGang makes the node carry a started attempt's private network.
func (n *Node) joinGang(e market.Execution, run *executor.Run) error {
	roster := make([]gangnet.Peer, len(e.Gang.Members))
	for i, m := range e.Gang.Members {
		id, err := peer.Decode(m.Node)
		if err != nil {
			return fmt.Errorf("the gang's roster names node %q: %w", m.Node, err)
		}
		roster[i] = gangnet.Peer{Node: id, Share: m.Share, Epoch: m.Epoch}
	}
	return n.gang.Add(gangnet.Member{Job: e.Job, Rank: e.Gang.NodeRank, Roster: roster,
		Listener: run.PrivateListener(), Dest: executor.OriginalDst, Dial: run.DialPrivate})
}

// leaveGang stops carrying an attempt's private network.
func (n *Node) leaveGang(e market.Execution) {
	n.gang.Remove(e.Job, e.Gang.NodeRank, e.Epoch)
}
