package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/mesh"
)

// Config configures a Metrics.
type Config struct {
	// Version is the build's version, shown by gpumesh_build_info.
	// Default: "devel".
	Version string
	// Gossip, when set, returns the node's gossip counters. It is called
	// on every scrape and by Sample, from any goroutine, and must not block
	// (gossip.Gossip.Stats does not). Nil leaves the gossip metrics out.
	Gossip func() gossip.Stats
	// Network, when set, returns the bytes this node's host has received
	// and sent on every protocol (libp2p's bandwidth counter). The same
	// rules as Gossip apply. Nil leaves gpumesh_network_* out.
	Network func() (in, out uint64)
	// Membership, when set, returns the counters of the membership
	// protocol's transport (mesh.Mesh.Stats). The same rules as Gossip
	// apply. Nil leaves gpumesh_membership_* out.
	Membership func() mesh.Stats
	// PlacementWindow is the span of the placement-latency figures of
	// Fill. Default 5 minutes.
	PlacementWindow time.Duration
	// RerouteWindow is the span of the reroute figures of Fill. Default
	// 1 hour.
	RerouteWindow time.Duration
	// RateWindow is the span of the per-second rates of Fill. Default
	// 1 minute.
	RateWindow time.Duration
	// WindowSamples is how many observations each window keeps for its
	// quantiles. Default 4096.
	WindowSamples int
	// Runtime adds the Go runtime's and the process's standard metrics
	// (go_*, process_*). Default (DefaultConfig) true.
	Runtime bool
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		Version:         "devel",
		PlacementWindow: 5 * time.Minute,
		RerouteWindow:   time.Hour,
		RateWindow:      time.Minute,
		WindowSamples:   4096,
		Runtime:         true,
	}
}

// ErrInvalidConfig is wrapped by the errors of Validate.
var ErrInvalidConfig = errors.New("metrics: invalid config")

// Validate reports the first field out of range, naming it.
func (c Config) Validate() error {
	switch {
	case c.PlacementWindow <= 0:
		return fmt.Errorf("%w: PlacementWindow %v: want > 0", ErrInvalidConfig, c.PlacementWindow)
	case c.RerouteWindow <= 0:
		return fmt.Errorf("%w: RerouteWindow %v: want > 0", ErrInvalidConfig, c.RerouteWindow)
	case c.RateWindow <= 0:
		return fmt.Errorf("%w: RateWindow %v: want > 0", ErrInvalidConfig, c.RateWindow)
	case c.WindowSamples <= 0 || c.WindowSamples > 1<<20:
		return fmt.Errorf("%w: WindowSamples %d: want 1..%d", ErrInvalidConfig, c.WindowSamples, 1<<20)
	}
	return nil
}
