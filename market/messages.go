package market

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/device"
)

// Message is what one node's market says to another. To is a node ID, or ""
// for the broadcast topic (every node, this one included, should receive
// it). From is filled by Node on the way out; on the way in it is the
// authenticated sender (node checks it against the stream's peer ID).
type Message struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	Payload Payload `json:"payload"`
}

// Broadcast is the To of a message for every node.
const Broadcast = ""

// Payload is the typed body of a Message: one of *BidRequest, *Bid,
// *Decline, *Award, *Accept, *Reject, *Release, *Start, *Renewal,
// *RenewalAck, *Stop, *AttemptEnded, *EndAck, *Superseded or *Moving.
type Payload interface {
	// JobID is the job the message is about.
	JobID() string
	// Type is the payload's name, stable for logs and wire tags.
	Type() string
	validate() error
}

// ErrBadMessage is wrapped by Step's error for a message that is malformed:
// it changes nothing.
var ErrBadMessage = errors.New("bad message")

// Coordinator → supplier and supplier → coordinator payloads. Every field is
// checked on receipt; a bad one makes Step return ErrBadMessage.
type (
	// BidRequest asks a supplier to reserve up to Want cards that pass
	// Filter (at least Min, or none) and bid them: cards of one model,
	// unless MixedModels (JobSpec.MixedModels) lets a share mix them.
	//
	// Owner, Duration, Network and Resources say what the supplier's
	// Policy needs to know of the job (its owner ID, expected duration,
	// network and declared resources); a supplier judges them again by the
	// owner's signed spec in the Award.
	BidRequest struct {
		Job      string     `json:"job"`
		Term     uint64     `json:"term"`
		Round    uint64     `json:"round"`
		Filter   Filter     `json:"filter"`
		Want     int        `json:"want"`
		Min      int        `json:"min"`
		Owner    string     `json:"owner,omitempty"`
		Duration Duration   `json:"duration,omitempty"`
		Network  JobNetwork `json:"network,omitempty"`
		Resources
		MixedModels bool `json:"mixed_models,omitempty"`
		// Image tells that the job runs in an OCI image (JobSpec.Images):
		// suppliers that run no images decline it.
		Image bool `json:"image,omitempty"`
		// Gang tells that the job is a gang that may span nodes
		// (JobSpec.SpansNodes): on network none or egress, suppliers that
		// cannot give it a private network decline it.
		Gang bool `json:"gang,omitempty"`
	}
	// Bid answers a BidRequest: the cards now reserved under Lease for
	// LeaseFor, their asking prices, and the supplier's availability.
	Bid struct {
		Job          string       `json:"job"`
		Round        uint64       `json:"round"`
		Lease        string       `json:"lease"`
		LeaseFor     Duration     `json:"lease_for"`
		Cards        []BidCard    `json:"cards"`
		Availability Availability `json:"availability"`
		Region       string       `json:"region,omitempty"`
	}
	// Decline answers a BidRequest the supplier cannot serve.
	Decline struct {
		Job    string `json:"job"`
		Round  uint64 `json:"round"`
		Reason string `json:"reason"`
	}
	// Award gives a share of the job to a supplier: the named cards of its
	// lease, at PriceCNY per card-hour (the mean over the cards), as attempt
	// Epoch. Start says whether to start at once; a gang member waits for a
	// Start with the roster. Signed is the owner's signed spec, which the
	// supplier verifies (Config.RequireSigned) and judges by its Policy;
	// Exec must be the signed spec's.
	Award struct {
		Job      string      `json:"job"`
		Term     uint64      `json:"term"`
		Round    uint64      `json:"round"`
		Lease    string      `json:"lease"`
		Share    int         `json:"share"`
		Epoch    uint64      `json:"epoch"`
		Cards    []string    `json:"cards"`
		PriceCNY float64     `json:"price_cny"`
		Start    bool        `json:"start"`
		Exec     ExecSpec    `json:"exec"`
		Kind     Kind        `json:"kind"`
		World    int         `json:"world"` // the job's cards when fully placed
		Gang     *GangInfo   `json:"gang,omitempty"`
		Signed   *SignedSpec `json:"signed,omitempty"`
		// Restore is the checkpoint the attempt starts from, if any.
		Restore *Checkpoint `json:"restore,omitempty"`
	}
	// Accept says the supplier committed the cards of an Award.
	Accept struct {
		Job     string `json:"job"`
		Share   int    `json:"share"`
		Epoch   uint64 `json:"epoch"`
		Lease   string `json:"lease"`
		Started bool   `json:"started"`
	}
	// Reject says the supplier could not take an Award.
	Reject struct {
		Job    string `json:"job"`
		Share  int    `json:"share"`
		Epoch  uint64 `json:"epoch"`
		Lease  string `json:"lease"`
		Reason string `json:"reason"`
	}
	// Release frees a reservation the coordinator will not award.
	Release struct {
		Job   string `json:"job"`
		Lease string `json:"lease"`
	}
	// Start starts a committed gang member with the final roster.
	Start struct {
		Job   string   `json:"job"`
		Term  uint64   `json:"term"`
		Share int      `json:"share"`
		Epoch uint64   `json:"epoch"`
		World int      `json:"world"`
		Gang  GangInfo `json:"gang"`
	}
	// Renewal is a runner's lease renewal: it is alive, and has used
	// CardSeconds so far in this attempt (cumulative, for billing).
	Renewal struct {
		Job         string  `json:"job"`
		Term        uint64  `json:"term"`
		Share       int     `json:"share"`
		Epoch       uint64  `json:"epoch"`
		Started     bool    `json:"started"`
		CardSeconds float64 `json:"card_seconds"`
		// Receipt is the runner's signed statement of CardSeconds (node
		// signs it every few seconds, node/receipts; opaque here). With
		// Config.BillOnlyReceipts only a renewal that carries one is
		// billed.
		Receipt []byte `json:"receipt,omitempty"`
		// Ready says a service replica's readiness probe answers (see
		// ServiceSpec).
		Ready bool `json:"ready,omitempty"`
	}
	// RenewalAck extends a runner's lease. Countersig, when set, is the
	// coordinator's countersignature of the receipt the renewal carried
	// (node sets it; opaque here).
	RenewalAck struct {
		Job        string `json:"job"`
		Term       uint64 `json:"term"`
		Share      int    `json:"share"`
		Epoch      uint64 `json:"epoch"`
		Countersig []byte `json:"countersig,omitempty"`
	}
	// Stop tells a runner to stop an attempt (cancelled, scaled down,
	// superseded by a later epoch, or unknown to the coordinator).
	Stop struct {
		Job    string `json:"job"`
		Term   uint64 `json:"term"`
		Share  int    `json:"share"`
		Epoch  uint64 `json:"epoch"`
		Reason string `json:"reason"`
	}
	// AttemptEnded reports the end of an attempt and its final usage. It is
	// sent again until an EndAck comes (or Config.ReportTTL passes). A
	// Preempted notice is an AttemptEnded with Cause CausePreempted.
	AttemptEnded struct {
		Job         string  `json:"job"`
		Share       int     `json:"share"`
		Epoch       uint64  `json:"epoch"`
		Cause       Cause   `json:"cause"`
		ExitCode    int     `json:"exit_code"`
		CardSeconds float64 `json:"card_seconds"`
		// Reason says why, for the owner (ExecutionExited.Reason), at
		// most MaxEndReasonBytes; empty when the process simply exited.
		Reason string `json:"reason,omitempty"`
		// Outputs is the manifest digest of the attempt's working
		// directory as it ended, kept by the runner
		// (ExecutionExited.Outputs); empty when it keeps none.
		Outputs string `json:"outputs,omitempty"`
		// Receipt is the runner's signed statement of the final usage, as
		// in Renewal.
		Receipt []byte `json:"receipt,omitempty"`
	}
	// EndAck acknowledges an AttemptEnded; Countersig as in RenewalAck.
	EndAck struct {
		Job        string `json:"job"`
		Share      int    `json:"share"`
		Epoch      uint64 `json:"epoch"`
		Countersig []byte `json:"countersig,omitempty"`
	}
	// Superseded tells a coordinator that a coordinator of a higher term
	// holds the job now (a runner answers a stale coordinator with it): the
	// stale one stops what it placed alone and lets the job go.
	Superseded struct {
		Job         string `json:"job"`
		Term        uint64 `json:"term"`
		Coordinator string `json:"coordinator"`
	}
	// Moving tells a coordinator that the runner of an attempt is draining
	// (leaving on purpose): the share should move before the node goes.
	Moving struct {
		Job   string `json:"job"`
		Term  uint64 `json:"term"`
		Share int    `json:"share"`
		Epoch uint64 `json:"epoch"`
	}
)

// BidCard is one card in a Bid.
type BidCard struct {
	ID           string        `json:"id"`
	Model        string        `json:"model"`
	Vendor       device.Vendor `json:"vendor"`
	MemoryMiB    uint64        `json:"memory_mib"`
	ComputeUnits float64       `json:"compute_units"`
	// PriceCNY is the asking price per card-hour for this job (the
	// preemptible price for a preemptible job).
	PriceCNY float64 `json:"price_cny"`
	// Preempts says that taking this card stops preemptible work on it.
	Preempts bool `json:"preempts,omitempty"`
	// Simulated says the card is simulated (device.Card.Simulated).
	Simulated bool `json:"simulated,omitempty"`
}

// ExecSpec is what an executor needs of the job's spec to run a share.
// Network is the spec's NetworkOrDefault; Resources are as the spec
// declares them (zero fields: the supplier's defaults).
type ExecSpec struct {
	Images  []ImageRef        `json:"images,omitempty"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	Payload *PayloadRef       `json:"payload,omitempty"`
	Data    *DataSpec         `json:"data,omitempty"`
	Network JobNetwork        `json:"network,omitempty"`
	Service *ServiceSpec      `json:"service,omitempty"`
	Resources
}

// ExecOf returns what an executor needs of spec.
func ExecOf(spec *JobSpec) ExecSpec {
	return ExecSpec{Images: spec.Images, Command: spec.Command, Env: spec.Env, Payload: spec.Payload, Data: spec.Data, Network: spec.NetworkOrDefault(), Service: spec.Service, Resources: spec.Resources}
}

// GangInfo places one member of a gang job (LayoutPerNode over several
// nodes) in its roster: torchrun's NNODES and NODE_RANK; the master is the
// node of rank 0 (node resolves it to MASTER_ADDR). Members is the whole
// roster in rank order, as the coordinator started it: the nodes carry
// the gang's private network between these attempts only (empty from a
// coordinator of wire version 1, whose gangs run on network host).
type GangInfo struct {
	NNodes   int          `json:"nnodes"`
	NodeRank int          `json:"node_rank"`
	Master   string       `json:"master"`
	Members  []GangMember `json:"members"`
}

// GangMember is one rank of a gang's roster: the node that runs it, and
// its share and attempt epoch.
type GangMember struct {
	Node  string `json:"node"`
	Share int    `json:"share"`
	Epoch uint64 `json:"epoch"`
}

// Cause says why an attempt ended.
type Cause string

// The causes of an attempt's end.
const (
	CauseExited    Cause = "exited"     // the process exited by itself (ExitCode)
	CauseStopped   Cause = "stopped"    // the coordinator asked it to stop
	CausePreempted Cause = "preempted"  // an on-demand job took its cards
	CauseCardLost  Cause = "card_lost"  // a card went unhealthy or disappeared
	CauseFenced    Cause = "fenced"     // the runner could not renew its lease and stopped itself
	CauseTimeLimit Cause = "time_limit" // it ran as long as the supplier's Policy.MaxDuration allows
	// CauseNotStarted: the supplier could not ready it (its image could
	// not be pulled or unpacked there); another supplier may.
	CauseNotStarted Cause = "not_started"
)

// JobID implements Payload.
func (m *BidRequest) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Bid) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Decline) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Award) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Accept) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Reject) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Release) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Start) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Renewal) JobID() string { return m.Job }

// JobID implements Payload.
func (m *RenewalAck) JobID() string { return m.Job }

// JobID implements Payload.
func (m *Stop) JobID() string { return m.Job }

// JobID implements Payload.
func (m *AttemptEnded) JobID() string { return m.Job }

// JobID implements Payload.
func (m *EndAck) JobID() string { return m.Job }

// Type implements Payload.
func (*BidRequest) Type() string { return "bid_request" }

// Type implements Payload.
func (*Bid) Type() string { return "bid" }

// Type implements Payload.
func (*Decline) Type() string { return "decline" }

// Type implements Payload.
func (*Award) Type() string { return "award" }

// Type implements Payload.
func (*Accept) Type() string { return "accept" }

// Type implements Payload.
func (*Reject) Type() string { return "reject" }

// Type implements Payload.
func (*Release) Type() string { return "release" }

// Type implements Payload.
func (*Start) Type() string { return "start" }

// Type implements Payload.
func (*Renewal) Type() string { return "renewal" }

// Type implements Payload.
func (*RenewalAck) Type() string { return "renewal_ack" }

// Type implements Payload.
func (*Stop) Type() string { return "stop" }

// Type implements Payload.
func (*AttemptEnded) Type() string { return "attempt_ended" }

// Type implements Payload.
func (*EndAck) Type() string { return "end_ack" }

const (
	maxIDLen    = 256
	maxTextLen  = 1024
	maxMsgCards = MaxCards
)

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
}

func checkJob(job string) error {
	if err := ValidateJobID(job); err != nil {
		return badf("job: %v", err)
	}
	return nil
}

func checkAttempt(job string, share int, epoch uint64) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if share < 0 || share > MaxCards*MaxReplicas {
		return badf("share %d out of range", share)
	}
	if epoch == 0 {
		return badf("epoch must be at least 1")
	}
	return nil
}

func checkID(what, id string) error {
	if id == "" || len(id) > maxIDLen {
		return badf("%s: want 1 to %d bytes, got %d", what, maxIDLen, len(id))
	}
	return nil
}

func checkMoney(what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxPriceCap {
		return badf("%s: %v out of range", what, v)
	}
	return nil
}

func checkCardIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > maxMsgCards {
		return badf("cards: want 1 to %d, got %d", maxMsgCards, len(ids))
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if err := checkID("card id", id); err != nil {
			return err
		}
		if seen[id] {
			return badf("card %q listed twice", id)
		}
		seen[id] = true
	}
	return nil
}

func (m *BidRequest) validate() error {
	if err := checkJob(m.Job); err != nil {
		return err
	}
	if m.Round == 0 {
		return badf("round must be at least 1")
	}
	if m.Want < 1 || m.Want > MaxCards || m.Min < 1 || m.Min > m.Want {
		return badf("want %d, min %d: want 1 <= min <= want <= %d", m.Want, m.Min, MaxCards)
	}
	if err := m.Filter.validate(); err != nil {
		return badf("%v", err)
	}
	if len(m.Owner) > maxIDLen || m.Duration < 0 || m.Duration.Std() > MaxExpectedDuration {
		return badf("owner or duration out of range")
	}
	if m.Network != "" {
		if _, err := ParseJobNetwork(string(m.Network)); err != nil {
			return badf("%v", err)
		}
	}
	if err := m.Resources.validate(); err != nil {
		return badf("%v", err)
	}
	return nil
}

func (m *Bid) validate() error {
	if err := checkJob(m.Job); err != nil {
		return err
	}
	if m.Round == 0 {
		return badf("round must be at least 1")
	}
	if err := checkID("lease", m.Lease); err != nil {
		return err
	}
	if m.LeaseFor <= 0 || m.LeaseFor.Std() > time.Hour {
		return badf("lease_for %v out of range", m.LeaseFor)
	}
	if m.Availability.MTBF < 0 || len(m.Region) > maxIDLen {
		return badf("availability or region out of range")
	}
	ids := make([]string, len(m.Cards))
	for i, c := range m.Cards {
		ids[i] = c.ID
		if err := checkMoney("price_cny", c.PriceCNY); err != nil {
			return err
		}
		if math.IsNaN(c.ComputeUnits) || c.ComputeUnits < 0 || c.ComputeUnits > 1000 || c.Model == "" {
			return badf("card %q: bad model or compute units", c.ID)
		}
	}
	return checkCardIDs(ids)
}

func (m *Decline) validate() error {
	if err := checkJob(m.Job); err != nil {
		return err
	}
	if m.Round == 0 || len(m.Reason) > maxTextLen {
		return badf("round or reason out of range")
	}
	return nil
}

func (m *Award) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	if err := checkID("lease", m.Lease); err != nil {
		return err
	}
	if err := checkCardIDs(m.Cards); err != nil {
		return err
	}
	if err := checkMoney("price_cny", m.PriceCNY); err != nil {
		return err
	}
	if m.World < 1 || m.World > MaxCards*MaxReplicas {
		return badf("world %d out of range", m.World)
	}
	if m.Gang != nil {
		if err := m.Gang.validate(); err != nil {
			return err
		}
	}
	if m.Restore != nil {
		if err := m.Restore.Validate(); err != nil {
			return err
		}
	}
	spec := JobSpec{ID: m.Job, Cards: 1, MaxPriceCNY: 1, Images: m.Exec.Images, Command: m.Exec.Command, Env: m.Exec.Env, Payload: m.Exec.Payload}
	if err := spec.validateCommand(); err != nil {
		return badf("exec: %v", err)
	}
	if err := spec.validateImages(); err != nil {
		return badf("exec: %v", err)
	}
	if m.Exec.Network != "" {
		if _, err := ParseJobNetwork(string(m.Exec.Network)); err != nil {
			return badf("exec: %v", err)
		}
	}
	if err := m.Exec.Resources.validate(); err != nil {
		return badf("exec: %v", err)
	}
	if m.Signed != nil && (m.Signed.Spec.ID != m.Job || len(m.Signed.Signature.Sig) > 64) {
		return badf("signed spec of job %q in an award for %q", m.Signed.Spec.ID, m.Job)
	}
	return nil
}

func (g *GangInfo) validate() error {
	if g.NNodes < 1 || g.NNodes > MaxCards || g.NodeRank < 0 || g.NodeRank >= g.NNodes {
		return badf("gang: rank %d of %d out of range", g.NodeRank, g.NNodes)
	}
	if err := checkID("gang master", g.Master); err != nil {
		return err
	}
	if len(g.Members) == 0 {
		return nil // a coordinator of wire version 1 sends none (its gangs run on network host)
	}
	if len(g.Members) != g.NNodes {
		return badf("gang: a roster of %d members for %d nodes", len(g.Members), g.NNodes)
	}
	if g.Members[0].Node != g.Master {
		return badf("gang: rank 0 runs on %s, not on the master %s", g.Members[0].Node, g.Master)
	}
	for i, m := range g.Members {
		if err := checkID(fmt.Sprintf("gang member %d", i), m.Node); err != nil {
			return err
		}
		if m.Share < 0 || m.Share > MaxCards*MaxReplicas || m.Epoch == 0 {
			return badf("gang: member %d is share %d epoch %d", i, m.Share, m.Epoch)
		}
	}
	return nil
}

func (m *Accept) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	return checkID("lease", m.Lease)
}

func (m *Reject) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	if len(m.Reason) > maxTextLen {
		return badf("reason too long")
	}
	return checkID("lease", m.Lease)
}

func (m *Release) validate() error {
	if err := checkJob(m.Job); err != nil {
		return err
	}
	return checkID("lease", m.Lease)
}

func (m *Start) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	if m.World < 1 || m.World > MaxCards*MaxReplicas {
		return badf("world %d out of range", m.World)
	}
	return m.Gang.validate()
}

func (m *Renewal) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	if math.IsNaN(m.CardSeconds) || math.IsInf(m.CardSeconds, 0) || m.CardSeconds < 0 {
		return badf("card_seconds %v out of range", m.CardSeconds)
	}
	return checkReceiptBytes("receipt", m.Receipt)
}

func (m *RenewalAck) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	return checkReceiptBytes("countersig", m.Countersig)
}

// MaxReceiptBytes bounds the receipt bytes a message carries.
const MaxReceiptBytes = 4096

func checkReceiptBytes(field string, b []byte) error {
	if len(b) > MaxReceiptBytes {
		return badf("%s: %d bytes, at most %d", field, len(b), MaxReceiptBytes)
	}
	return nil
}

func (m *Stop) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	if len(m.Reason) > maxTextLen {
		return badf("reason too long")
	}
	return nil
}

func (m *AttemptEnded) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	switch m.Cause {
	case CauseExited, CauseStopped, CausePreempted, CauseCardLost, CauseFenced, CauseTimeLimit, CauseNotStarted:
	default:
		return badf("cause %q unknown", m.Cause)
	}
	if math.IsNaN(m.CardSeconds) || math.IsInf(m.CardSeconds, 0) || m.CardSeconds < 0 {
		return badf("card_seconds %v out of range", m.CardSeconds)
	}
	if len(m.Reason) > MaxEndReasonBytes || !utf8.ValidString(m.Reason) {
		return badf("reason: at most %d bytes of UTF-8, got %d", MaxEndReasonBytes, len(m.Reason))
	}
	if m.Outputs != "" && !sha256Digest.MatchString(m.Outputs) {
		return badf("outputs %q: want \"sha256:\" and 64 lower-case hex digits", clipText(m.Outputs))
	}
	return checkReceiptBytes("receipt", m.Receipt)
}

func (m *EndAck) validate() error {
	if err := checkAttempt(m.Job, m.Share, m.Epoch); err != nil {
		return err
	}
	return checkReceiptBytes("countersig", m.Countersig)
}

// JobID implements Payload.
func (m *Superseded) JobID() string { return m.Job }
func (m *Moving) JobID() string     { return m.Job }

// Type implements Payload.
func (*Superseded) Type() string { return "superseded" }
func (*Moving) Type() string     { return "moving" }

func (m *Moving) validate() error {
	if err := checkJob(m.Job); err != nil {
		return err
	}
	if m.Share < 0 || m.Share > MaxCards {
		return badf("share %d out of range", m.Share)
	}
	if m.Epoch == 0 || m.Term == 0 {
		return badf("epoch and term must be at least 1")
	}
	return nil
}

func (m *Superseded) validate() error {
	if err := checkJob(m.Job); err != nil {
		return err
	}
	if m.Term == 0 {
		return badf("term must be at least 1")
	}
	return checkID("coordinator", m.Coordinator)
}
