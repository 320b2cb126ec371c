package market

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// PricePolicy is what a supplier asks for its cards.
type PricePolicy struct {
	// PerModel overrides the price per card-hour (CNY) of a model key. A
	// model not listed asks the catalog's DefaultPriceCNY; an uncatalogued
	// card asks device.Model{MemoryGiB, ComputeUnits}.DefaultPriceCNY().
	PerModel map[string]float64
	// PreemptibleFactor multiplies the price for preemptible jobs. Default
	// 0.6: an RTX 4090-24G at 1.98 asks 1.19, the spot price the product
	// brief quotes. Must be in (0, 1].
	PreemptibleFactor float64
}

// Config configures a Node. Build one with DefaultConfig and change what
// differs; New checks it with Validate. Durations are in the Node's own
// clock (the Now of its events).
type Config struct {
	// ID is this node's identity (its libp2p peer ID). Required.
	ID string
	// Catalog maps model keys to published figures. Default: the embedded
	// device.DefaultCatalog().
	Catalog *device.Catalog
	// Cards are this node's cards at start (CardsChanged replaces them).
	// A node with no cards only coordinates.
	Cards []device.Card
	// Region is advertised with the cards; free text ("cn-east"). Optional.
	Region string
	// Availability is what this node advertises about its uptime.
	Availability Availability
	// Prices is this node's price policy.
	Prices PricePolicy
	// Book is the coordinator's view of the mesh's capacity. Nil means none:
	// every bid request is broadcast, and no job can fail fast.
	Book BookView

	// Network is the mesh's name: owners sign their specs for it (see
	// SignSpec). Default "" (tests); node sets the mesh's name.
	Network string
	// Verify says when this coordinator requires a supplier to pass a
	// verification probe before it asks the supplier to bid (verify.go).
	// Default VerifyNever; node sets gpumesh node --verify.
	Verify VerifyMode
	// BillOnlyReceipts makes the coordinator bill only usage that comes
	// with a receipt (Renewal.Receipt, AttemptEnded.Receipt, which node
	// checks and countersigns before they reach the market): a job's bill
	// is then exactly the sum of its receipts. Default false (tests); node
	// turns it on.
	BillOnlyReceipts bool
	// RequireSigned makes the node refuse, as coordinator, a job whose
	// spec is not signed by its owner for Network (JobSubmitted,
	// JobAdopted), and, as supplier, an award that does not carry the
	// owner's signed spec (Reject). Default false; node turns it on.
	RequireSigned bool
	// Policy is this node's choice, as supplier, of the jobs it bids for
	// and runs. Default: the zero Policy, which admits every job.
	Policy Policy

	// ReserveTTL is how long a supplier holds cards it bid. Default 2s.
	ReserveTTL time.Duration
	// RenewInterval is how often a runner renews its lease with the job's
	// coordinator. Default 200ms.
	RenewInterval time.Duration
	// FenceAfter is how long a runner goes on without a renewal ack before
	// it stops its own attempt (self-fencing). Must be below LostAfter so a
	// cut-off runner has stopped before its share runs elsewhere. A runner
	// that was frozen (no tick for FenceAfter/2: SIGSTOP, a paused VM)
	// renews at once when it resumes and fences only if no ack comes
	// within two RenewIntervals: its job ran on while it was frozen, so the
	// fence would come late anyway, and a short freeze must not stop a
	// share its coordinator still holds. Default 2.3s.
	FenceAfter time.Duration
	// ReportTTL is how long a runner keeps an attempt's end after the
	// attempt ended: it re-sends the AttemptEnded until the coordinator
	// acknowledges it, and answers with it any coordinator that takes the
	// job over later (a successor whose record still shows the attempt
	// running asks the runner before it places the share again). The end
	// is on the runner's disk (Ready.Attempts), so it outlives a restart
	// (Config.EndedAttempts). Default 15m.
	ReportTTL time.Duration

	// CheckpointKeep is how many checkpoints of each share a job's record
	// keeps (the newest). Default 2.
	CheckpointKeep int

	// BidWindow is how long a coordinator waits for bids (it closes early
	// once the best candidates have answered). Default 150ms.
	BidWindow time.Duration
	// AwardTimeout is how long a coordinator waits for an Accept before it
	// gives the share to a spare, for a supplier that answers within it;
	// for one that has answered late, twice its smoothed answer time, at
	// most 4 × AwardTimeout (acceptwait.go). It counts from when the award
	// left: an award its node holds for the job's record to reach the
	// replicas (AwardHeld) waits up to MaxAwardHold. Default 500ms.
	AwardTimeout time.Duration
	// LeaseMargin is subtracted from a bid's lease when the coordinator
	// judges whether it can still award it (the supplier's clock started
	// earlier). Default 250ms.
	LeaseMargin time.Duration
	// LostAfter is how long a coordinator waits without a renewal before it
	// declares a share lost and places it again under a new epoch. The
	// trade-off: a runner frozen or delayed for less than LostAfter minus a
	// renewal interval and a TCP retransmission or two (2 s of SIGSTOP with
	// 5% loss) keeps its share, and a runner lost silently (no dropped
	// connection) runs again elsewhere about LostAfter after its last
	// renewal. Default 2.7s.
	LostAfter time.Duration
	// HintGrace is how long after a PeerLost hint a share must stay silent
	// before it is declared lost (a hint alone never moves a job): two
	// renewal intervals. Default 400ms.
	HintGrace time.Duration
	// RetryMin and RetryMax bound the backoff between placement rounds of a
	// job that cannot be placed yet. Defaults 500ms and 10s.
	RetryMin, RetryMax time.Duration
	// MaxExtensions is how many times a round whose bids fall short asks
	// more candidates before it gives up until a retry. Default 3.
	MaxExtensions int
	// SpareFactor and SpareNodes size the candidate set: a round asks for at
	// least SpareFactor times the cards it needs and at least SpareNodes
	// nodes beyond those it needs. Defaults 1.5 and 2.
	SpareFactor float64
	SpareNodes  int
	// DefaultDuration is the expected duration of a job that names none,
	// for weighing availability. Default 1h.
	DefaultDuration time.Duration
	// UnknownMTBF is assumed for a supplier that advertises no MTBF.
	// Default 6h.
	UnknownMTBF time.Duration
	// UnknownComputeUnits is assumed for a card whose compute is unknown,
	// for ranking only. Default 0.1 (such cards rank after known ones unless
	// much cheaper).
	UnknownComputeUnits float64
	// ExplainEntries is the most entries kept in a job's Explanation.
	// Default 64.
	ExplainEntries int

	// TrackRecordLimit is the most suppliers this node keeps a track record
	// of as a coordinator (track.go); past it the least recently seen
	// record without losses goes first. 0 keeps none: clearing takes every
	// advertised MTBF at its word. Default 4096 (about a megabyte).
	TrackRecordLimit int
	// TrackHalfLife is how fast a track record forgets: its losses and run
	// time halve every TrackHalfLife. Default 24h.
	TrackHalfLife time.Duration
	// TrackRecords are the track records persisted by an earlier run of
	// this node (Ready.TrackRecords), restored at start; each must pass
	// TrackRecord.Validate. Default none.
	TrackRecords []TrackRecord
	// EndedAttempts are attempts of this node that ended (state
	// AttemptDone) as an earlier run persisted them (Ready.Attempts), an
	// attempt that died with that run included (cause CauseFenced):
	// restored at start, each is kept until ReportTTL after its EndedAt,
	// reported to its coordinator until acknowledged, and told to any
	// coordinator that takes its job over. Default none.
	EndedAttempts []Attempt
}

// DefaultConfig returns the defaults documented on Config for node id.
func DefaultConfig(id string) Config {
	return Config{
		ID:                  id,
		Prices:              PricePolicy{PreemptibleFactor: 0.6},
		ReserveTTL:          2 * time.Second,
		RenewInterval:       200 * time.Millisecond,
		FenceAfter:          2300 * time.Millisecond,
		ReportTTL:           15 * time.Minute,
		CheckpointKeep:      2,
		BidWindow:           150 * time.Millisecond,
		AwardTimeout:        500 * time.Millisecond,
		LeaseMargin:         250 * time.Millisecond,
		LostAfter:           2700 * time.Millisecond,
		HintGrace:           400 * time.Millisecond,
		RetryMin:            500 * time.Millisecond,
		RetryMax:            10 * time.Second,
		MaxExtensions:       3,
		SpareFactor:         1.5,
		SpareNodes:          2,
		DefaultDuration:     time.Hour,
		UnknownMTBF:         6 * time.Hour,
		UnknownComputeUnits: 0.1,
		ExplainEntries:      64,
		TrackRecordLimit:    4096,
		TrackHalfLife:       24 * time.Hour,
	}
}

// ErrInvalidConfig is wrapped by the errors of Config.Validate.
var ErrInvalidConfig = errors.New("invalid market config")

// Validate reports the first field of c that is out of range.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	if err := checkID("ID", c.ID); err != nil {
		return bad("ID", "required, at most %d bytes", maxIDLen)
	}
	positive := map[string]time.Duration{
		"ReserveTTL": c.ReserveTTL, "RenewInterval": c.RenewInterval, "FenceAfter": c.FenceAfter,
		"ReportTTL": c.ReportTTL, "BidWindow": c.BidWindow, "AwardTimeout": c.AwardTimeout,
		"LostAfter": c.LostAfter, "HintGrace": c.HintGrace, "RetryMin": c.RetryMin, "RetryMax": c.RetryMax,
		"DefaultDuration": c.DefaultDuration, "UnknownMTBF": c.UnknownMTBF, "TrackHalfLife": c.TrackHalfLife,
	}
	for _, name := range []string{"ReserveTTL", "RenewInterval", "FenceAfter", "ReportTTL", "BidWindow", "AwardTimeout",
		"LostAfter", "HintGrace", "RetryMin", "RetryMax", "DefaultDuration", "UnknownMTBF", "TrackHalfLife"} {
		if positive[name] <= 0 {
			return bad(name, "must be positive, got %v", positive[name])
		}
	}
	switch {
	case c.LeaseMargin < 0 || c.LeaseMargin >= c.ReserveTTL:
		return bad("LeaseMargin", "must be at least 0 and below ReserveTTL (%v), got %v", c.ReserveTTL, c.LeaseMargin)
	case c.FenceAfter >= c.LostAfter:
		return bad("FenceAfter", "must be below LostAfter (%v) so a cut-off runner stops before its share moves, got %v", c.LostAfter, c.FenceAfter)
	case c.RenewInterval >= c.FenceAfter:
		return bad("RenewInterval", "must be below FenceAfter (%v), got %v", c.FenceAfter, c.RenewInterval)
	case c.RetryMin > c.RetryMax:
		return bad("RetryMin", "must not exceed RetryMax (%v), got %v", c.RetryMax, c.RetryMin)
	case math.IsNaN(c.SpareFactor) || c.SpareFactor < 1 || c.SpareFactor > 10:
		return bad("SpareFactor", "must be between 1 and 10, got %v", c.SpareFactor)
	case c.MaxExtensions < 0 || c.MaxExtensions > 8:
		return bad("MaxExtensions", "must be between 0 and 8, got %d", c.MaxExtensions)
	case c.SpareNodes < 0 || c.SpareNodes > 100:
		return bad("SpareNodes", "must be between 0 and 100, got %d", c.SpareNodes)
	case !(c.UnknownComputeUnits > 0) || c.UnknownComputeUnits > 100:
		return bad("UnknownComputeUnits", "must be above 0 and at most 100, got %v", c.UnknownComputeUnits)
	case c.ExplainEntries < 0:
		return bad("ExplainEntries", "must not be negative, got %d", c.ExplainEntries)
	case c.CheckpointKeep < 1 || c.CheckpointKeep > 100:
		return bad("CheckpointKeep", "must be between 1 and 100, got %d", c.CheckpointKeep)
	case c.Verify != "" && c.Verify != VerifyNever && c.Verify != VerifyNew && c.Verify != VerifyAlways:
		return bad("Verify", "must be new, always or never, got %q", c.Verify)
	case c.TrackRecordLimit < 0 || c.TrackRecordLimit > maxTrackRecords:
		return bad("TrackRecordLimit", "must be between 0 and %d, got %d", maxTrackRecords, c.TrackRecordLimit)
	case !(c.Prices.PreemptibleFactor > 0) || c.Prices.PreemptibleFactor > 1:
		return bad("Prices.PreemptibleFactor", "must be above 0 and at most 1, got %v", c.Prices.PreemptibleFactor)
	case c.Availability.MTBF < 0:
		return bad("Availability.MTBF", "must not be negative, got %v", c.Availability.MTBF)
	}
	if err := c.Policy.validate(); err != nil {
		return bad("Policy", "%v", err)
	}
	for model, p := range c.Prices.PerModel {
		if math.IsNaN(p) || p <= 0 || p > MaxPriceCap {
			return bad("Prices.PerModel["+model+"]", "must be above 0 and at most %d, got %v", MaxPriceCap, p)
		}
	}
	for i, a := range c.EndedAttempts {
		if err := a.ValidateEnded(); err != nil {
			return bad(fmt.Sprintf("EndedAttempts[%d]", i), "%v", err)
		}
	}
	for i := range c.TrackRecords {
		if err := c.TrackRecords[i].Validate(); err != nil {
			return bad(fmt.Sprintf("TrackRecords[%d]", i), "%v", err)
		}
	}
	seen := map[string]bool{}
	for i, card := range c.Cards {
		if card.ID == "" || len(card.ID) > maxIDLen || card.Model == "" || seen[card.ID] {
			return bad(fmt.Sprintf("Cards[%d]", i), "needs a unique ID and a model, got ID %q model %q", card.ID, card.Model)
		}
		seen[card.ID] = true
	}
	return nil
}
