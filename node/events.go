package node

import (
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
)

// The events a node publishes (GET /v1/events, the dashboard's Activity
// pane):
//
//   - of the jobs it coordinates: every change of state ("job"), and the
//     steps people follow: an auction that cleared ("auction"), shares
//     placed and running ("placement"), a share lost and placed again
//     ("reroute"), the job's end ("end"), a job taken over ("takeover").
//     They carry the job's owner: the stream sends them in full to that
//     owner alone (api.Event.ForCaller);
//   - of its own cards, whoever coordinates the job: an attempt that starts
//     here ("placement", Node set to this node) and one that ends here
//     ("end"). A supplier coordinates few of the jobs it runs, and without
//     these its operator saw no activity while its cards worked. They name
//     the job as the node's card list does, to whoever may read the node;
//   - of the membership ("member").

// hub fans API events out to subscribers; a subscriber that falls behind
// misses events rather than slowing the node.
type hub struct {
	mu     sync.Mutex
	subs   map[chan api.Event]struct{}
	closed bool
}

func newHub() *hub { return &hub{subs: map[chan api.Event]struct{}{}} }

func (h *hub) subscribe() (<-chan api.Event, func()) {
	ch := make(chan api.Event, 256)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *hub) publish(ev api.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		close(ch)
		delete(h.subs, ch)
	}
}

// notify publishes a job's change of state, and the step it is (an auction
// that cleared, shares placed, a reroute, the end), and feeds the metrics.
// Driver only.
func (n *Node) notify(note market.Notification) {
	n.observeNote(note)
	ev := api.Event{Type: "job", At: note.At, Job: note.Job, State: string(note.To), From: string(note.From), Reason: note.Reason, Epoch: note.Epoch}
	if rec, ok := n.mk.Job(note.Job); ok {
		ev.Owner = rec.Spec.Owner
	}
	n.events.publish(ev)
	switch {
	case note.To == market.JobRerouting:
		ev.Type = "reroute"
	case note.To == market.JobPlacing:
		ev.Type = "auction"
	case note.To == market.JobRunning && (note.From == market.JobPlacing || note.From == market.JobRerouting):
		ev.Type = "placement"
	case note.To.Terminal() && note.To != market.JobMoved:
		ev.Type = "end"
	default:
		return
	}
	n.events.publish(ev)
}

// notifyAttempts publishes the attempts that start or end on this node's
// cards in a Ready: starts are its executions, ends its attempts whose
// record turned done. Driver only.
func (n *Node) notifyAttempts(rd market.Ready) {
	self, now := n.self, time.Now()
	for _, e := range rd.Start {
		ev := api.Event{Type: "placement", At: now, Job: e.Job, Share: e.Share, Epoch: e.Epoch, Node: self,
			Model: n.modelOf(e.Cards), Cards: len(e.Cards), State: string(market.AttemptRunning)}
		for _, a := range rd.Attempts {
			if a.Job == e.Job && a.Share == e.Share && a.Epoch == e.Epoch {
				ev.PriceCNY = a.PriceCNY
			}
		}
		n.events.publish(ev)
	}
	for _, a := range rd.Attempts {
		key := attemptKey{a.Job, a.Share, a.Epoch}
		switch {
		case a.State == market.AttemptClosed:
			delete(n.endsSent, key)
		case a.State == market.AttemptDone && !n.endsSent[key]:
			n.endsSent[key] = true
			code := a.ExitCode
			n.events.publish(api.Event{Type: "end", At: a.EndedAt, Job: a.Job, Share: a.Share, Epoch: a.Epoch, Node: self,
				Model: n.modelOf(a.Cards), Cards: len(a.Cards), PriceCNY: a.PriceCNY, State: string(a.State), Cause: string(a.Cause), ExitCode: &code})
		}
	}
}

func memberEvent(ev mesh.Event) api.Event {
	return api.Event{Type: "member", At: ev.Time, Peer: ev.Peer.String(), State: ev.Kind.String()}
}
