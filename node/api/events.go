package api

import (
	"time"

	"github.com/gpumesh/gpumesh/market/owner"
)

// Event is one server-sent event of GET /v1/events: data is the JSON of
// Event, the SSE event name is Type.
type Event struct {
	// Type is "job" (a job's change of state), "auction" (its auction
	// cleared), "placement" (shares placed and running; with Node set,
	// one started on the node's own cards), "reroute" (a share lost and
	// placed again), "end" (the job ended; with Node set, an attempt on
	// the node's own cards ended), "takeover" (the node took a job over)
	// or "member" (a member's change of state).
	Type string    `json:"type"`
	At   time.Time `json:"at"`
	// Job events: the job, its new state and why.
	Job    string `json:"job,omitempty"`
	State  string `json:"state,omitempty"`
	From   string `json:"from,omitempty"`
	Reason string `json:"reason,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// Events of the node's own cards: the node, the share, its cards'
	// model and number, the price per card-hour; an end says how the
	// attempt ended (Cause, ExitCode).
	Node     string  `json:"node,omitempty"`
	Share    int     `json:"share,omitempty"`
	Model    string  `json:"model,omitempty"`
	Cards    int     `json:"cards,omitempty"`
	PriceCNY float64 `json:"price_cny,omitempty"`
	Cause    string  `json:"cause,omitempty"`
	ExitCode *int    `json:"exit_code,omitempty"`
	// Member events: the peer and its new state.
	Peer string `json:"peer,omitempty"`
	// Owner is the owner of the job a coordinator's event is about; it is
	// not sent (see ForCaller). "" for events anyone who may read the
	// node may see.
	Owner string `json:"-"`
	// Hidden marks an event of another owner's job, sent without the job,
	// its reason and its epoch.
	Hidden bool `json:"hidden,omitempty"`
}

// ForCaller is the event as GET /v1/events sends it to a caller who is
// owner who ("" for a caller without owner credentials), and whether it
// sends it at all. An event of a job reaches its owner whole; anyone else
// learns that an auction, a placement, a reroute, an end or a takeover
// happened, not of which job or why, and nothing of a mere change of state
// (type "job"). Events without an owner (membership, the node's own
// cards) reach everyone whole.
func (ev Event) ForCaller(who owner.ID) (Event, bool) {
	if ev.Owner == "" || ev.Owner == string(who) {
		return ev, true
	}
	if ev.Type == "job" {
		return Event{}, false
	}
	return Event{Type: ev.Type, At: ev.At, State: ev.State, From: ev.From, Hidden: true}, true
}
