package node

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// Admission. A coordinator refuses a submission it cannot take up now with
// a 429 and a Retry-After, rather than taking it and answering 503 seconds
// later when its replicas did not confirm in time. It is saturated when
// either bound below is reached; both are measures of work already waiting
// on this node, not guesses of its speed:
//
//   - submissions in flight here as their coordinator (checked, stepped
//     into the market, waiting for the replicas' acknowledgement) reach
//     Config.MaxSubmissions;
//   - the driver — the one goroutine that owns the market — has
//     busyQueue inputs waiting (half its queue): every submission, message
//     and timer of this node goes through it, so a queue that long means
//     a new submission would wait behind seconds of work.
//
// The client (gpumesh submit, node/api/client) sends the same signed spec
// again after Retry-After: the job ID is the spec's, so a submission that
// is refused and one that took effect are told apart by the coordinator
// (market.ErrJobExists), and a job never starts twice.

// busyRetryAfter is what a 429 asks the client to wait: the time a
// saturated driver needs to work off a good part of its queue here.
const busyRetryAfter = time.Second

// admission counts the submissions this node coordinates now.
type admission struct {
	inflight atomic.Int64
	refused  atomic.Int64 // 429s answered since start
}

// busyQueue is the driver's queue length at which the node is saturated.
func (n *Node) busyQueue() int { return cap(n.inputs) / 2 }

// admit takes a submission in, or returns the 429 that refuses it while
// the node is saturated. The caller calls release once it has answered.
func (n *Node) admit(job string) (release func(), err error) {
	in := n.admitted.inflight.Add(1)
	reason := ""
	switch q := len(n.inputs); {
	case in > int64(n.cfg.MaxSubmissions):
		reason = fmt.Sprintf("%d submissions in flight here, the most is %d", in-1, n.cfg.MaxSubmissions)
	case q >= n.busyQueue():
		reason = fmt.Sprintf("its driver has %d inputs waiting (saturated at %d)", q, n.busyQueue())
	}
	if reason != "" {
		n.admitted.inflight.Add(-1)
		n.admitted.refused.Add(1)
		n.obs.m.CountBusy()
		return nil, api.Busy(busyRetryAfter, "job %s: node %s is saturated (%s): submit it again with the same ID after %v",
			job, n.id.ShortString(), reason, busyRetryAfter)
	}
	return func() { n.admitted.inflight.Add(-1) }, nil
}
