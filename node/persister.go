package node

import (
	"context"
	"sync"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/store"
)

// The persister keeps the driver off the disk. A driver turn decides
// (market.Step, Ready), gathers the turn's writes and hands them over
// (endTurn); the persister commits every turn waiting, in one transaction
// (the store's group commit merges it with what other goroutines write at
// the same moment), then posts the turns' effects back to the driver in
// the order they were decided. So nothing leaves the node, starts or is
// acknowledged before the write that decided it is on disk, as before,
// and the driver decides the next turns while the disk works: under load
// a turn no longer waits for an fsync, which was most of its time.

// turn is what one driver turn decided.
type turn struct {
	ops     []store.Op     // its writes
	effects []market.Ready // what to carry out once they are on disk
	after   []func()       // afterTurn callbacks, after the effects
}

// persister commits turns in order. Its queue is unbounded: the driver
// never waits for it, and each turn it holds is what the driver decided
// in one pass over its bounded input queue.
type persister struct {
	n    *Node
	mu   sync.Mutex
	q    []turn
	wake chan struct{}
	// done carries the turns written, in order, to the driver, which
	// takes them before any other input (drive).
	done chan []turn
	// driverGone is closed when the driver has returned: the last turn
	// it hands over may come after the node's context ended, and is
	// written all the same.
	driverGone chan struct{}
}

func newPersister(n *Node) *persister {
	return &persister{n: n, wake: make(chan struct{}, 1), done: make(chan []turn, 64), driverGone: make(chan struct{})}
}

func (p *persister) push(t turn) {
	p.mu.Lock()
	p.q = append(p.q, t)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run commits what the driver hands over until the node closes; what is
// queued then, up to the driver's last turn, is still written (its
// effects are not carried out).
func (p *persister) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ctx.Done():
			<-p.driverGone // its last turn may still be on its way
			p.flush(false)
			return
		case <-p.wake:
		}
		p.flush(true)
	}
}

// flush commits every queued turn in one transaction and, with effects,
// posts them to the driver in order.
func (p *persister) flush(effects bool) {
	for {
		p.mu.Lock()
		ts := p.q
		p.q = nil
		p.mu.Unlock()
		if len(ts) == 0 {
			return
		}
		var ops []store.Op
		for _, t := range ts {
			ops = append(ops, t.ops...)
		}
		n := p.n
		if err := n.storeApply(ops); err != nil {
			n.log.Error("cannot write state; what this node decides now may not survive a restart", "err", err)
		}
		if !effects {
			continue
		}
		select {
		case p.done <- ts:
		case <-n.ctx.Done():
			return
		}
	}
}

// carryOut runs the effects of turns written, in order, and what waited
// for them. The effects may decide more (an execution that could not
// start): the driver's turn takes it as its own. Driver only.
func (n *Node) carryOut(ts []turn) {
	for _, t := range ts {
		for _, rd := range t.effects {
			n.effects(rd)
		}
		for _, f := range t.after {
			f()
		}
	}
}
