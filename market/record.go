package market

import "time"

// JobState is where a job stands in its lifecycle:
//
//	pending → bidding → placing → running → succeeded | failed | cancelled
//	                                 ↕
//	                             rerouting
type JobState string

// The job states.
const (
	JobPending   JobState = "pending"   // waiting to be placed (Reason says why)
	JobBidding   JobState = "bidding"   // bid requests out
	JobPlacing   JobState = "placing"   // awards out, waiting for accepts
	JobRunning   JobState = "running"   // every share runs (an elastic job may be growing)
	JobRerouting JobState = "rerouting" // a share was lost and is being placed again
	JobSucceeded JobState = "succeeded" // every share exited 0
	JobFailed    JobState = "failed"    // a share exited non-zero, or the mesh can never satisfy the spec
	JobCancelled JobState = "cancelled" // cancelled by its owner
	// JobMoved is not a state of the job but of this node's hold on it: a
	// coordinator of a higher term has taken the job over (Reason names
	// it), and this node has let it go.
	JobMoved JobState = "moved"
)

// Terminal reports whether s is an end state.
func (s JobState) Terminal() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCancelled
}

// PlacementState is where one attempt of one share stands, as its
// coordinator sees it.
type PlacementState string

// The placement states.
const (
	PlacementAwarded  PlacementState = "awarded"  // award sent, no answer yet
	PlacementAccepted PlacementState = "accepted" // cards committed; a gang member waits for its Start
	PlacementRunning  PlacementState = "running"  // told to start; renewing its lease
	PlacementStopping PlacementState = "stopping" // told to stop; final usage not in yet
	PlacementRejected PlacementState = "rejected" // the award was rejected or timed out
	PlacementExited   PlacementState = "exited"   // its process exited (ExitCode)
	PlacementStopped  PlacementState = "stopped"  // stopped by the coordinator
	PlacementLost     PlacementState = "lost"     // renewals stopped, or preempted, card lost, fenced
)

// live reports whether the attempt holds (or may hold) cards.
func (s PlacementState) live() bool {
	return s == PlacementAwarded || s == PlacementAccepted || s == PlacementRunning || s == PlacementStopping
}

// Live reports whether an attempt in this state holds (or may hold) cards:
// awarded, accepted, running or stopping.
func (s PlacementState) Live() bool { return s.live() }

// Placement is one attempt at one share of a job: a node's cards under an
// epoch. Share numbers are stable; a share placed again keeps its number
// (slot layouts) or is replaced by new shares (LayoutAny), and its new
// attempt has a higher epoch.
type Placement struct {
	Share int    `json:"share"`
	Epoch uint64 `json:"epoch"`
	Node  string `json:"node"`
	// Region is the node's region as its bid said ("" unknown): a
	// service's replicas are spread over regions by it.
	Region string   `json:"region,omitempty"`
	Cards  []string `json:"cards"`
	Model  string   `json:"model"` // of its cards; several joined by "+" when the job mixes models (JobSpec.MixedModels)
	// Simulated says the cards are simulated (`gpumesh node --sim`): only
	// a job that allows simulated cards is placed on them.
	Simulated bool           `json:"simulated,omitempty"`
	State     PlacementState `json:"state"`
	// Cause says why an attempt that is over ended.
	Cause  Cause  `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// PriceCNY is what the job pays per card-hour (the mean over the cards);
	// BidCNY what the supplier asked.
	PriceCNY    float64   `json:"price_cny"`
	BidCNY      float64   `json:"bid_cny"`
	AwardedAt   time.Time `json:"awarded_at"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	CardSeconds float64   `json:"card_seconds"`
	CostCNY     float64   `json:"cost_cny"`
	ExitCode    *int      `json:"exit_code,omitempty"`
	// Outputs, for an attempt that ended, is the manifest digest of what
	// it left in its working directory, which its node keeps for that
	// node's --keep-outputs (24 h by default): `gpumesh cp JOB:PATH DEST`
	// copies from it. Empty when the node keeps none.
	Outputs string `json:"outputs,omitempty"`
	// Receipt is the latest receipt of the attempt the coordinator billed
	// (with Config.BillOnlyReceipts): the runner's signed statement of
	// CardSeconds, countersigned (node/receipts). It travels with the
	// record, so a successor coordinator's bill still proves it.
	Receipt []byte `json:"receipt,omitempty"`
	// Ready says a service replica's readiness probe answers, as its
	// runner last said (see ServiceSpec); a replica of a service with a
	// port counts as running only while it does.
	Ready bool `json:"ready,omitempty"`
}

// JobRecord is everything the coordinator knows of a job: what node
// persists, replicates and serves to `gpumesh job ID`.
type JobRecord struct {
	ID          string   `json:"id"`
	Spec        JobSpec  `json:"spec"`
	Coordinator string   `json:"coordinator"`
	State       JobState `json:"state"`
	// Reason says why the job is in its state: what a pending job waits
	// for, why a job failed.
	Reason string `json:"reason,omitempty"`
	// Term is the coordinator generation (1 for the first coordinator; a
	// successor takes over with a higher one).
	Term uint64 `json:"term"`
	// Epoch is the highest attempt epoch issued; it rises on every
	// placement and re-placement and never falls.
	Epoch uint64 `json:"epoch"`
	// Cards is the card count the job is meant to hold now (elastic jobs
	// move it; a service counts all replicas).
	Cards      int         `json:"cards"`
	Placements []Placement `json:"placements"`
	// ClearingPriceCU is the latest round's uniform clearing price, CNY per
	// surviving compute-unit hour.
	ClearingPriceCU float64 `json:"clearing_price_cu,omitempty"`
	// CardSeconds and CostCNY are the bill so far: accepted usage of every
	// attempt times its price.
	CardSeconds float64      `json:"card_seconds"`
	CostCNY     float64      `json:"cost_cny"`
	ExitCode    *int         `json:"exit_code,omitempty"`
	Restarts    int          `json:"restarts,omitempty"`
	SubmittedAt time.Time    `json:"submitted_at"`
	RunningAt   time.Time    `json:"running_at,omitzero"`
	EndedAt     time.Time    `json:"ended_at,omitzero"`
	Explanation *Explanation `json:"explanation,omitempty"`
	// Checkpoints are the newest checkpoints of each share the coordinator
	// accepted (Config.CheckpointKeep of each), oldest first.
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	// MovedTo and MovedTerm name the coordinator this node let the job go
	// to, in a record in state JobMoved.
	MovedTo   string `json:"moved_to,omitempty"`
	MovedTerm uint64 `json:"moved_term,omitempty"`
	// Version rises on every change.
	Version uint64 `json:"version"`
	// Signature is the owner's signature of Spec (see SignedSpec); nil for
	// a job submitted unsigned where that is allowed.
	Signature *SpecSignature `json:"signature,omitempty"`
}

// Live returns the placements that hold (or may hold) cards now.
func (r *JobRecord) Live() []Placement {
	var out []Placement
	for _, p := range r.Placements {
		if p.State.live() {
			out = append(out, p)
		}
	}
	return out
}
