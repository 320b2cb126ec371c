package node

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/jobstate"
)

// This file holds read-only views of a running node for simulations,
// demos and benchmarks (node/sim): what they check the invariants against
// and measure, without going through the API.

// Process is an attempt whose process is running on this node now.
type Process struct {
	Job   string
	Share int
	Epoch uint64
	// Cards are the IDs of the cards the process was made to see (through
	// its vendor's visible-devices variable).
	Cards     []string
	StartedAt time.Time
}

// Processes lists the attempts whose processes run on this node now: the
// ground truth of which card is in use by which job. It reads the node's
// own handles on its attempts, on the driver goroutine, so it waits for
// the driver (or ctx). An attempt still starting is left out, and so is
// one whose process has exited, so two entries never overlap in time only
// because of the snapshot.
func (n *Node) Processes(ctx context.Context) ([]Process, error) {
	var runs []*executor.Run
	err := n.do(ctx, func() {
		for _, slot := range n.runs {
			slot.mu.Lock()
			if r := slot.run; r != nil {
				runs = append(runs, r)
			}
			slot.mu.Unlock()
		}
	})
	if err != nil {
		return nil, err
	}
	byRef := map[string]string{} // "VAR=ref" → card ID
	for _, c := range n.devices.Cards() {
		for _, kv := range device.VisibleEnv([]device.Card{c}, []device.Card{c}) {
			if !strings.HasPrefix(kv, device.EnvCUDAOrder+"=") {
				byRef[kv] = c.ID
			}
		}
	}
	var out []Process
	for _, r := range runs {
		select {
		case <-r.Done():
			continue
		default:
		}
		a := r.Attempt()
		p := Process{Job: a.JobID, Share: a.Share, Epoch: a.Epoch, StartedAt: r.StartedAt()}
		for name, value := range a.DeviceEnv {
			if value == device.NoDevices {
				continue
			}
			for _, ref := range strings.Split(value, ",") {
				if id, ok := byRef[name+"="+ref]; ok {
					p.Cards = append(p.Cards, id)
				}
			}
		}
		slices.Sort(p.Cards)
		out = append(out, p)
	}
	return out, nil
}

// CoordinatedJobs returns the latest record of every job this node
// coordinates or has coordinated since it started (as last persisted),
// without asking any peer.
func (n *Node) CoordinatedJobs() []market.JobRecord {
	self := n.self
	var out []market.JobRecord
	for _, r := range n.view.All() {
		if r.Coordinator == self {
			out = append(out, r)
		}
	}
	jobstate.SortJobs(out)
	return out
}

// GossipStats returns the counters of the node's gossip layer.
func (n *Node) GossipStats() gossip.Stats { return n.gossip.Stats() }

// BookCards counts the cards, and the free cards, in the capacity ads this
// node holds now.
func (n *Node) BookCards() (cards, free int) {
	for _, s := range n.gossip.Book().Snapshot(time.Now()) {
		cards += s.Cards
		free += s.FreeCards
	}
	return cards, free
}
