package market

import "time"

// Ready is what a Node has decided since the last Advance. The driver
// handles it in this order, then calls Advance with it:
//
//  1. persist Jobs, Attempts and TrackRecords, delete ForgetTrackRecords
//     (before TrackRecords: a supplier may be dropped and seen again),
//  2. send Messages (To "" is the broadcast topic),
//  3. stop the executions in Stop, start those in Start,
//  4. deliver Notifications to API watchers, publish Ad if set.
//
// The slices and records are the driver's to read, not to modify.
type Ready struct {
	Messages      []Message
	Start         []Execution
	Stop          []StopExecution
	Jobs          []JobRecord // records of jobs this node coordinates that changed
	Attempts      []Attempt   // attempts this node runs that changed
	Notifications []Notification
	// Ad is this node's capacity ad when it changed, else nil.
	Ad *Ad
	// TrackRecords are the supplier track records this node keeps as a
	// coordinator that changed (an attempt ended): persist them and hand
	// them back in Config.TrackRecords at the next start.
	// ForgetTrackRecords names suppliers whose record was dropped
	// (Config.TrackRecordLimit): delete them.
	TrackRecords       []TrackRecord
	ForgetTrackRecords []string

	trackVersions []uint64 // TrackRecords' versions, for Advance
}

// Execution asks the executor to start one share of a job on this node's
// cards.
type Execution struct {
	Job         string
	Share       int
	Epoch       uint64
	Coordinator string
	// Cards are the IDs of this node's cards the share may see.
	Cards []string
	Exec  ExecSpec
	Kind  Kind
	// World is the job's card count when fully placed (WORLD_SIZE).
	World int
	// Gang places the share in its gang's roster (nil for jobs that are
	// not LayoutPerNode).
	Gang *GangInfo
	// Restore is the checkpoint to restore into the attempt's checkpoint
	// directory before it starts, nil for none.
	Restore *Checkpoint
}

// StopExecution asks the executor to stop a share (SIGTERM, grace, SIGKILL)
// and report ExecutionExited when its process is gone.
type StopExecution struct {
	Job   string
	Share int
	Epoch uint64
	Cause Cause
	// By and Reason, for a Stop from a coordinator (CauseStopped): who
	// sent it and why it said, for the node's log.
	By     string
	Reason string
}

// Notification says a job changed state.
type Notification struct {
	Job    string    `json:"job"`
	From   JobState  `json:"from"`
	To     JobState  `json:"to"`
	Reason string    `json:"reason,omitempty"`
	Epoch  uint64    `json:"epoch"`
	At     time.Time `json:"at"`
}

// AttemptState is where a share's attempt stands on the node that runs it.
type AttemptState string

// The attempt states, in order.
const (
	AttemptCommitted AttemptState = "committed" // cards held; waiting to start (gang roster, preempted work exiting)
	AttemptRunning   AttemptState = "running"   // execution requested
	AttemptStopping  AttemptState = "stopping"  // stop requested; waiting for the process to go
	AttemptDone      AttemptState = "done"      // over; reporting to the coordinator
	AttemptClosed    AttemptState = "closed"    // report acknowledged (or given up): forget it
)

// Attempt is the supplier's record of one share it runs, for persistence.
type Attempt struct {
	Job         string       `json:"job"`
	Share       int          `json:"share"`
	Epoch       uint64       `json:"epoch"`
	Term        uint64       `json:"term"`
	Coordinator string       `json:"coordinator"`
	Cards       []string     `json:"cards"`
	PriceCNY    float64      `json:"price_cny"`
	State       AttemptState `json:"state"`
	StartedAt   time.Time    `json:"started_at,omitzero"`
	CardSeconds float64      `json:"card_seconds"`
	Cause       Cause        `json:"cause,omitempty"`
	ExitCode    int          `json:"exit_code"`
	// EndedAt is when the attempt ended (state done), and Acked whether
	// its coordinator acknowledged the end.
	EndedAt time.Time `json:"ended_at,omitzero"`
	Acked   bool      `json:"acked,omitempty"`
	// Reason says why it ended, for the owner (ExecutionExited.Reason).
	Reason string `json:"reason,omitempty"`
	// Outputs is the manifest of what it left in its working directory
	// (ExecutionExited.Outputs).
	Outputs string `json:"outputs,omitempty"`
	// Owner is the job's owner and Service its service spec, from the
	// owner's signed spec in the award ("" and nil for an unsigned one).
	Owner   string       `json:"owner,omitempty"`
	Service *ServiceSpec `json:"service,omitempty"`
	// Ready says the replica's readiness probe answers (ExecutionReady).
	Ready   bool   `json:"ready,omitempty"`
	Version uint64 `json:"version"`
}

// ValidateEnded checks an ended attempt read back from storage
// (Config.EndedAttempts): it names a job, share, epoch and coordinator,
// and its state is done.
func (a Attempt) ValidateEnded() error {
	if err := checkAttempt(a.Job, a.Share, a.Epoch); err != nil {
		return err
	}
	if a.State != AttemptDone || a.Coordinator == "" || len(a.Coordinator) > maxIDLen {
		return badf("attempt %s share %d epoch %d: want state done and a coordinator, got state %q coordinator %q", a.Job, a.Share, a.Epoch, a.State, a.Coordinator)
	}
	return nil
}
