package node

import (
	"fmt"
	"strings"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/store"
)

// Ready implements api.Backend: the checks of /readyz, each nil when it
// passes or saying why it does not.
//
//   - store: the state file is open and reads back, and the node's last
//     write to it succeeded (a node that cannot write cannot keep what it
//     acknowledges);
//   - devices: every card backend whose vendor is present here listed its
//     cards (a failed one leaves the inventory incomplete);
//   - mesh: another member is alive, or the node was given no --join
//     address (the first node of a mesh, or of a LAN found by mDNS, is
//     ready alone: there may be nobody else yet).
func (n *Node) Ready() map[string]error {
	return map[string]error{
		"store":   n.storeReady(),
		"devices": n.devicesReady(),
		"mesh":    n.meshReady(),
	}
}

func (n *Node) storeReady() error {
	if err := n.store.Check(); err != nil {
		return err
	}
	if p := n.writeFault.Load(); p != nil {
		return fmt.Errorf("the last write failed: %w", *p)
	}
	return nil
}

func (n *Node) devicesReady() error {
	var failed []string
	for _, s := range n.devices.Statuses() {
		if s.State == device.StateFailed {
			failed = append(failed, fmt.Sprintf("%s (%s)", s.Backend, s.Reason))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("cards not read: %s", strings.Join(failed, ", "))
	}
	return nil
}

func (n *Node) meshReady() error {
	joins := len(n.cfg.Mesh.Join)
	if n.mesh.NumAlive() > 1 || joins == 0 {
		return nil
	}
	how := fmt.Sprintf("%d --join address(es)", joins)
	if n.cfg.Mesh.MDNS {
		how += " and mDNS"
	}
	return fmt.Errorf("alone: no other member alive yet (looking through %s)", how)
}

// storeApply writes ops to the store and remembers whether the write
// failed, for the store check of /readyz.
func (n *Node) storeApply(ops []store.Op) error {
	err := n.store.Apply(ops)
	n.noteWrite(err, len(ops))
	return err
}

// noteWrite keeps the outcome of a store write of ops ops for the node's
// readiness.
func (n *Node) noteWrite(err error, ops int) {
	switch {
	case err != nil:
		n.writeFault.Store(&err)
	case ops > 0:
		n.writeFault.Store(nil)
	}
}
