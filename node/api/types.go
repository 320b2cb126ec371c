package api

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// The JSON bodies of the API. Jobs are served as market.JobRecord (fields
// id, spec, state, reason, term, epoch, cards, placements [{share, epoch,
// node, cards, model, state, price_cny, started_at, ended_at, card_seconds,
// cost_cny, exit_code}], card_seconds, cost_cny, exit_code, submitted_at,
// running_at, ended_at, explanation) and submitted as market.JobSpec.

// JobList is the body of GET /v1/jobs: the caller's jobs, newest first.
type JobList struct {
	Jobs []market.JobRecord `json:"jobs"`
	// Asked is how many nodes the list was gathered from, the answering
	// node included; 0 when it lists only what it holds.
	Asked int `json:"asked,omitempty"`
	// Unanswered names the members asked that did not answer in time:
	// jobs only they hold are missing from Jobs. Absent when every member
	// answered.
	Unanswered []string `json:"unanswered,omitempty"`
}

// JobLister is implemented by a Backend that gathers the caller's jobs
// from other nodes: GET /v1/jobs then calls ListJobs instead of Jobs, and
// serves what it says of the nodes that did not answer.
type JobLister interface {
	ListJobs(ctx context.Context) (JobList, error)
}

// ScaleRequest is the body of POST /v1/jobs/{id}/scale.
type ScaleRequest struct {
	Cards int `json:"cards"`
}

// SecretsRequest is the body of POST /v1/secrets: the values of a job's
// secrets by variable name.
type SecretsRequest struct {
	Values map[string]string `json:"values"`
}

// MaxSecretsBytes bounds the body of POST /v1/secrets.
const MaxSecretsBytes = 256 << 10

// PayloadRef names a payload in a spec's payload field.
type PayloadRef = market.PayloadRef

// PayloadUpload is the body of a PUT /v1/payloads/{manifest} answer: the
// node keeps the manifest for the owner until Expires (or, once a job
// names it, while the job lives), and lacks the chunks Missing lists.
type PayloadUpload struct {
	// Ref is what to put in the spec's payload field.
	Ref PayloadRef `json:"ref"`
	// Missing are the digests of the manifest's chunks the node does not
	// hold ("sha256:…", each once): PUT each to
	// /v1/payloads/{manifest}/chunks/{digest}. Empty: the node holds the
	// whole tree already.
	Missing []string `json:"missing"`
	// MissingBytes is their total size.
	MissingBytes int64 `json:"missing_bytes"`
	// Expires is when the node lets the upload go if no job names it.
	Expires time.Time `json:"expires"`
}

// Peer is one member of the mesh as this node sees it.
type Peer struct {
	ID    string `json:"id"`
	Self  bool   `json:"self,omitempty"`
	State string `json:"state"` // alive, suspect, dead, left
	// Addrs are full multiaddrs ending in /p2p/ID, usable with --join.
	Addrs     []string `json:"addrs"`
	Region    string   `json:"region,omitempty"`
	Cards     int      `json:"cards"`
	FreeCards int      `json:"free_cards"`
	Models    []string `json:"models,omitempty"`
	// SimulatedModels are the models among Models whose cards the peer's
	// ad marks simulated (gpumesh node --sim).
	SimulatedModels []string  `json:"simulated_models,omitempty"`
	LastHeard       time.Time `json:"last_heard,omitzero"`
	RTTMillis       float64   `json:"rtt_ms,omitempty"`
	// Conn is how this node is connected to the peer now: "direct" (its
	// own TCP or QUIC connection, perhaps hole-punched through NATs),
	// "relayed" (only through a circuit relay) or "" (none open).
	Conn string `json:"conn,omitempty"`
	// Coordinator says whether the peer coordinates jobs.
	Coordinator bool `json:"coordinator"`
	// Standby says the peer will coordinate once it has been a member
	// long enough, and holds job records meanwhile when the mesh has too
	// few coordinators.
	Standby bool `json:"standby,omitempty"`
}

// PeerList is the body of GET /v1/peers.
type PeerList struct {
	Peers []Peer `json:"peers"`
}

// Card is one of this node's cards and what it is doing.
type Card struct {
	device.Card
	// Simulated says the card is simulated (gpumesh node --sim).
	Simulated bool   `json:"simulated,omitempty"`
	Healthy   bool   `json:"healthy"`
	State     string `json:"state"` // free, reserved, running
	Job       string `json:"job,omitempty"`
	Share     int    `json:"share,omitempty"`
	Epoch     uint64 `json:"epoch,omitempty"`
}

// CardList is the body of GET /v1/cards.
type CardList struct {
	Cards []Card `json:"cards"`
}

// Health is the body of /healthz and /readyz.
type Health struct {
	// Status is "ok", or "unready" when a readiness check fails (503).
	Status string `json:"status"`
	// Checks are /readyz's checks by name ("store", "devices", "mesh"),
	// true when passing.
	Checks map[string]bool `json:"checks,omitempty"`
	// NotReady says why each failing check fails.
	NotReady map[string]string `json:"not_ready,omitempty"`
	// Reason is NotReady in one line, by check name: "mesh: alone: ...".
	Reason string `json:"reason,omitempty"`
}

// Info is the body of GET /v1/info: what a client needs to know before it
// signs.
type Info struct {
	// Network is the mesh's name; owners sign specs for it.
	Network string `json:"network"`
	// Owner is the owner the request authenticated as, "" if none.
	Owner string `json:"owner,omitempty"`
}
