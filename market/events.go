package market

import (
	"errors"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// Event is an input to Node.Step. Every event carries the time it happened
// (Now) in the node's clock: the Node never reads a clock. A Now earlier
// than one already stepped counts as the later one.
type Event interface {
	at() time.Time
}

// The events a Node takes.
type (
	// Tick lets time pass: leases lapse, renewals go out, rounds close,
	// silent runners are declared lost, waiting jobs retry. Node drives it
	// every few tens of milliseconds (RenewInterval/3 or finer).
	Tick struct{ Now time.Time }

	// JobSubmitted hands a job to this node, which coordinates it. The spec
	// is validated (Step returns the *SpecError); a job ID already known
	// returns ErrJobExists. Signature is the owner's signature of Spec; with
	// Config.RequireSigned a missing or wrong one returns ErrUnsigned or
	// ErrBadSpecSignature.
	JobSubmitted struct {
		Now       time.Time
		Spec      JobSpec
		Signature *SpecSignature
	}

	// JobAdopted makes this node the coordinator of a job from its record:
	// a replica when the job's coordinator is gone, or this node's own
	// record after a restart. The job continues under Term (at least the
	// record's term + 1): its runners are told to renew here, whatever the
	// record shows missing is placed again, epochs continue. A job held here
	// at that term or higher already returns ErrStale.
	JobAdopted struct {
		Now    time.Time
		Record JobRecord
		Term   uint64
	}

	// JobEnded ends a job this node coordinates as Record, a record of its
	// end held elsewhere: the job ended under another coordinator while
	// this node ran a stale copy (it resumed an old record after a
	// restart). Its attempts stop, and its state, reason and exit code
	// become the record's. A Record that shows no end is ErrBadEvent.
	JobEnded struct {
		Now    time.Time
		Record JobRecord
	}

	// CancelJob cancels a job this node coordinates: executions stop and
	// reservations are released.
	CancelJob struct {
		Now    time.Time
		Job    string
		Reason string // optional, recorded
	}

	// AwardHeld tells the coordinator that its award of the job's share
	// under Epoch waits for the job's record to reach its replicas before
	// it leaves (a node holds every award so), and AwardSent that it left
	// at Now. An award's time for an answer counts from when it left: under
	// load the hold alone took longer than AwardTimeout, and awards timed
	// out before they had left, their shares given to spares whose awards
	// waited the same way. A held award is given up on only after
	// MaxAwardHold. Either event for an attempt no longer awaiting its
	// answer changes nothing.
	AwardHeld struct {
		Now   time.Time
		Job   string
		Share int
		Epoch uint64
	}
	AwardSent struct {
		Now   time.Time
		Job   string
		Share int
		Epoch uint64
	}

	// ScaleJob changes the card count of a running elastic job within its
	// spec's range: up by an incremental auction, down by stopping whole
	// shares and starting nothing (shrink.go). A scale-down that whole
	// shares cannot meet exactly stops as much as it can without going
	// below Cards: the job's record then holds more cards than asked.
	ScaleJob struct {
		Now   time.Time
		Job   string
		Cards int
	}

	// MessageReceived delivers a message from a peer (or the broadcast
	// topic). Message.From must be the authenticated sender.
	MessageReceived struct {
		Now     time.Time
		Message Message
	}

	// PeerLost is a hint that a peer is gone (libp2p disconnect, memberlist
	// dead). It is never acted on alone: shares on that peer are declared
	// lost only if they also stay silent for Config.HintGrace.
	PeerLost struct {
		Now  time.Time
		Node string
	}

	// CardsChanged replaces this node's cards: a card missing from Cards has
	// disappeared, one with Health.Healthy false is withdrawn, new ones are
	// offered. Work on a card that goes is stopped and reported.
	CardsChanged struct {
		Now   time.Time
		Cards []device.Card
	}

	// Drain says this node is about to leave the mesh on purpose (an
	// operator's drain, SIGTERM with a drain timeout). It stops offering its
	// cards and asks the coordinator of each attempt it runs to move it: a
	// service's replica gets its replacement running first and is stopped
	// after (no gap), other shares are stopped at once (SIGTERM, so they can
	// checkpoint) and placed again elsewhere. Irreversible until the node
	// restarts.
	Drain struct{ Now time.Time }

	// ExecutionStarted reports that the executor started an Execution's
	// process: billing starts now.
	ExecutionStarted struct {
		Now   time.Time
		Job   string
		Share int
		Epoch uint64
	}

	// ExecutionExited reports that an execution's process is gone, whether
	// it exited by itself or was stopped: billing stops now and its cards
	// are free again. ExitCode is the process's status (-1 if killed).
	// CheckpointTaken reports a checkpoint of a share of a job this node
	// coordinates, from the node From that runs the share; node checks
	// first that a holder other than From has it whole.
	CheckpointTaken struct {
		Now        time.Time
		Job        string
		From       string
		Checkpoint Checkpoint
	}

	ExecutionExited struct {
		Now      time.Time
		Job      string
		Share    int
		Epoch    uint64
		ExitCode int
		// Fenced says the process was killed because its lease lapsed
		// (the node's fence keeper killed it while the node was frozen):
		// the attempt ends fenced, whatever its exit code.
		Fenced bool
		// NotStarted says the supplier could not ready the attempt for
		// reasons of its own (the job's image could not be pulled or
		// unpacked there: Reason says why): it ends not_started, and the
		// coordinator places the share elsewhere, failing the job once
		// MaxNotStarted suppliers could not start it.
		NotStarted bool
		// Reason, when not empty, says why for the job's owner: above all
		// why a process did not start ("executable file not found in
		// $PATH: nvidia-smi"). It travels to the coordinator in the
		// AttemptEnded, cut to MaxEndReasonBytes, and becomes the
		// placement's reason (and the job's, when the job fails by it).
		Reason string
		// Outputs, when not empty, is the digest of the manifest of what
		// the attempt left in its working directory, which its runner
		// keeps for a while (node --keep-outputs): it travels in the
		// AttemptEnded and becomes the placement's Outputs.
		Outputs string
	}
)

func (e Tick) at() time.Time             { return e.Now }
func (e JobSubmitted) at() time.Time     { return e.Now }
func (e JobAdopted) at() time.Time       { return e.Now }
func (e JobEnded) at() time.Time         { return e.Now }
func (e CancelJob) at() time.Time        { return e.Now }
func (e AwardHeld) at() time.Time        { return e.Now }
func (e AwardSent) at() time.Time        { return e.Now }
func (e ScaleJob) at() time.Time         { return e.Now }
func (e MessageReceived) at() time.Time  { return e.Now }
func (e PeerLost) at() time.Time         { return e.Now }
func (e CardsChanged) at() time.Time     { return e.Now }
func (e Drain) at() time.Time            { return e.Now }
func (e ExecutionStarted) at() time.Time { return e.Now }
func (e CheckpointTaken) at() time.Time  { return e.Now }
func (e ExecutionExited) at() time.Time  { return e.Now }

// Errors Step returns for expected outcomes. None of them changes anything,
// except where a reply is the protocol's answer (a Release for a stale bid,
// a Stop for a renewal of a superseded attempt).
var (
	// ErrBadEvent: the event is nil, has no time, or a field is out of range.
	ErrBadEvent = errors.New("bad event")
	// ErrJobExists: JobSubmitted for a job ID this node already has.
	ErrJobExists = errors.New("job exists")
	// ErrUnknownJob: the job is not one this node coordinates or runs.
	ErrUnknownJob = errors.New("unknown job")
	// ErrJobEnded: the job is already succeeded, failed or cancelled.
	ErrJobEnded = errors.New("job has ended")
	// ErrNotElastic: ScaleJob outside the spec's elastic range, or on a job
	// without one.
	ErrNotElastic = errors.New("not within the job's elastic range")
	// ErrStale: the message belongs to a round, lease or epoch that is over.
	ErrStale = errors.New("stale message")
	// ErrRefused: the message breaks the protocol (a bid nobody asked for,
	// more cards than requested, an award for cards the lease lacks).
	ErrRefused = errors.New("message refused")
)
