package node

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Drain implements api.Backend: the node stops offering its cards and asks
// the coordinators of the shares it runs to move them (a service's
// replacement starts before its old replica stops), then waits until no
// attempt runs here or ctx ends. It does not leave the mesh: Close does.
func (n *Node) Drain(ctx context.Context) error {
	if err := n.do(ctx, func() {
		n.step(market.Drain{Now: time.Now()})
		n.draining.Store(true)
		n.log.Info("draining: no new work; moving the shares this node runs")
	}); err != nil {
		return err
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for len(n.exec.Running()) > 0 {
		select {
		case <-ctx.Done():
			n.log.Warn("drain timed out; the shares still here stop with the node", "running", len(n.exec.Running()))
			return ctx.Err()
		case <-n.ctx.Done():
			return ErrClosed
		case <-t.C:
		}
	}
	n.log.Info("drained: no share runs here any more")
	return nil
}
