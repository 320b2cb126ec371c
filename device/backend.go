package device

import (
	"context"
	"errors"
)

// ErrAbsent marks a backend whose vendor has nothing on this node: no library,
// no tool, or a tool that lists no devices. It is an expected outcome, not a
// failure: a node without NVIDIA cards simply has none. Backends wrap it with
// the reason ("amd-smi and rocm-smi not found on PATH").
var ErrAbsent = errors.New("absent")

// ErrUnknownCard is returned by fault injection for an ID the backend does not
// hold.
var ErrUnknownCard = errors.New("unknown card")

// Backend discovers one kind of card on this node and watches its health.
//
// Contract: Cards and Watch may block — a vendor tool can take seconds, NVML
// waits on the driver — and return soon after ctx is done. The Manager calls
// Cards from one goroutine at a time and Watch at most once, from a goroutine
// of its own, while Cards may run; implementations must allow exactly that.
// A Backend holds no goroutine of its own between calls.
type Backend interface {
	// Name is a short stable name used in Card.Backend, statuses and logs:
	// "nvml", "amd", "hygon", "mthreads", "ascend", "kunlunxin", "sim".
	Name() string

	// Cards lists the cards present now, with fresh telemetry. It returns an
	// error wrapping ErrAbsent when this backend's vendor has nothing on the
	// node, and another error when it is there but cannot be read.
	Cards(ctx context.Context) ([]Card, error)

	// Watch sends health changes on events until ctx is done, then returns
	// nil. It never closes events. A backend without change notifications
	// returns nil at once: its health changes show in the next Cards. An
	// error means watching stopped early; what it knew was sent before.
	Watch(ctx context.Context, events chan<- HealthEvent) error
}

// HealthEvent is a change in one card's health, or its disappearance.
type HealthEvent struct {
	CardID  string `json:"card_id"`
	Backend string `json:"backend"` // filled in by the Manager
	Health  Health `json:"health"`
	// Removed reports that the card is gone from the node (it fell off the
	// bus, or a simulated fault removed it). Health is then unhealthy.
	Removed bool `json:"removed,omitempty"`
}

// BackendState says what a backend found the last time it was asked.
type BackendState string

// The states of a backend.
const (
	StatePresent BackendState = "present" // it listed its cards
	StateAbsent  BackendState = "absent"  // its vendor has nothing here (ErrAbsent)
	StateFailed  BackendState = "failed"  // its vendor is here but could not be read
)

// BackendStatus is one backend's state after discovery, for operators.
type BackendStatus struct {
	Backend string       `json:"backend"`
	State   BackendState `json:"state"`
	Reason  string       `json:"reason,omitempty"` // why absent or failed
	Cards   int          `json:"cards"`
}

func isAbsent(err error) bool { return errors.Is(err, ErrAbsent) }

// DefaultBackends returns a backend for every vendor gpumesh knows, in the
// order the Manager prefers them: NVIDIA (NVML; absent in builds without
// cgo), AMD, Hygon, Moore Threads, Huawei Ascend, Kunlunxin. The vendor-tool
// backends run their tools through r. None of them does anything until asked
// for cards.
func DefaultBackends(r Runner, cat *Catalog) []Backend {
	return []Backend{
		defaultNVIDIA(cat),
		NewAMD(r, cat),
		NewHygon(r, cat),
		NewMThreads(r, cat),
		NewAscend(r, cat),
		NewKunlunxin(r, cat),
	}
}
