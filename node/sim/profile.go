package sim

import (
	"time"

	"github.com/gpumesh/gpumesh/mesh"
)

// SimProfile is the membership timing of a simulated mesh: many full nodes
// share a few cores, so a probe answered late means a busy CPU, not a dead
// peer. It starts from memberlist's LAN timing (probe every second, 500 ms
// probe timeout, suspicion multiplier 4) and gossips news every 20 ms,
// each piece transmitted once per log10(N+1) (RetransmitMult 1; members
// that hear it pass it on), with a 1 s stream timeout.
//
// The short gossip round matters because the node announces its metadata
// on the goroutine that drives its market and waits for memberlist to
// finish broadcasting it (memberlist's UpdateNode, bounded by the stream
// timeout): with the LAN or fast profile that wait is several gossip
// rounds per change of a card's state, which throttles a busy node's
// market to a few changes a second.
func SimProfile() mesh.Profile {
	p := mesh.LANProfile()
	p.Name = "sim"
	p.GossipInterval = 20 * time.Millisecond
	p.RetransmitMult = 1
	p.StreamTimeout = time.Second
	return p
}
