package procbench

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/sim"
)

// Defaults of Config: the first case, 5 nodes × 64 cards, 32
// submitters.
const (
	DefaultNodes      = 5
	DefaultCards      = 64
	DefaultSubmitters = 32
	DefaultJobs       = 300
	DefaultModel      = "a100-80g"
	// DefaultIdle is how long the idle mesh is watched for its CPU and
	// memory before the load.
	DefaultIdle = 10 * time.Second
	// DefaultRetryFor is the submitters' retry bound after 429 and 503
	// (the client's default).
	DefaultRetryFor = 30 * time.Second
	// DefaultDrain bounds the wait, after the last acknowledgement, for
	// every accepted job to run and end.
	DefaultDrain = time.Minute
	// DefaultSingles is how many jobs go in one at a time after the
	// load.
	DefaultSingles = 20
	// MaxNodes bounds Nodes whatever the memory: each node takes two
	// loopback ports and a few threads.
	MaxNodes = 500
	// MaxSubmitters bounds Submitters.
	MaxSubmitters = 4096
	// NodeMiB is what one node process is taken to need (its resident set
	// is about 45 MiB idle at 20 nodes, more under load).
	NodeMiB = 80
)

// Config configures Run. Zero values take the defaults stated.
type Config struct {
	// Binary is the gpumesh binary the nodes run (`Binary node ...`);
	// required.
	Binary string
	// Nodes is the number of node processes. Default 5.
	Nodes int
	// Cards is each node's simulated cards (of Model). Default 64.
	Cards int
	// Model is the simulated cards' catalog key. Default a100-80g.
	Model string
	// Submitters submit at once, each through node i mod Nodes. Default 32.
	Submitters int
	// Jobs is the number of 1-card `true` jobs submitted. Default 300.
	Jobs int
	// Idle is how long the formed mesh is watched idle. Default 10 s.
	Idle time.Duration
	// RetryFor bounds each submission's retries after 429 and 503.
	// Default 30 s; a negative value: no retries.
	RetryFor time.Duration
	// Drain bounds the wait for the jobs to run and end after the last
	// acknowledgement. Default 1 min.
	Drain time.Duration
	// Singles is the number of jobs submitted one at a time after the
	// load, each once the one before ended: what one job waits on a mesh
	// with nothing else to do. Default DefaultSingles; negative: none.
	Singles int
	// ProfileDir, when set, receives each node's CPU profile and
	// execution trace (node-N.cpu.pprof and node-N.trace, from its
	// /debug/pprof/) of the first ProfileFor of the load. Default: none.
	ProfileDir string
	// ProfileFor is how long the profiles cover. Default 10 s.
	ProfileFor time.Duration
	// SkipCoordinatorWait starts the load as soon as every node sees
	// every other alive, without waiting (30 s) until they coordinate:
	// standbys hold the records meanwhile. For tests.
	SkipCoordinatorWait bool
	// Dir holds the nodes' data and logs; default a temporary directory,
	// removed at the end unless KeepDir.
	Dir     string
	KeepDir bool
	// Progress, when set, receives a line on what the run is doing now.
	Progress func(string)
	// Logger receives the bench's own warnings. Default: discard.
	Logger *slog.Logger

	// nodeArgs are added to every node's command line.
	nodeArgs []string
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Nodes, DefaultNodes)
	def(&c.Cards, DefaultCards)
	def(&c.Submitters, DefaultSubmitters)
	def(&c.Jobs, DefaultJobs)
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	if c.RetryFor == 0 {
		c.RetryFor = DefaultRetryFor
	}
	if c.RetryFor < 0 {
		c.RetryFor = 0
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.Singles == 0 {
		c.Singles = DefaultSingles
	}
	if c.ProfileFor <= 0 {
		c.ProfileFor = 10 * time.Second
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrBadConfig is wrapped by Validate's errors.
var ErrBadConfig = errors.New("bad configuration")

// Validate checks the configuration after defaults: counts in range, a
// model the catalog knows, a binary that exists, and a mesh that fits in
// the memory available (about NodeMiB a node, at most 80% of it).
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return bad("--nodes %d: want 1 to %d node processes", c.Nodes, MaxNodes)
	case c.Cards < 1 || c.Cards > device.MaxSimCards:
		return bad("--cards %d: want 1 to %d simulated cards a node", c.Cards, device.MaxSimCards)
	case c.Submitters < 1 || c.Submitters > MaxSubmitters:
		return bad("--submitters %d: want 1 to %d", c.Submitters, MaxSubmitters)
	case c.Jobs < 1:
		return bad("--jobs %d: want at least 1", c.Jobs)
	case c.Idle < 0 || c.Drain < 0:
		return bad("idle and drain windows must not be negative")
	}
	if _, err := device.ParseSimSpec(fmt.Sprintf("%s:%d", c.Model, c.Cards), device.DefaultCatalog()); err != nil {
		return bad("cards %s:%d: %v", c.Model, c.Cards, err)
	}
	if c.Binary == "" {
		return bad("no gpumesh binary to run the nodes")
	}
	if st, err := os.Stat(c.Binary); err != nil || st.IsDir() {
		return bad("gpumesh binary %s: not a file", c.Binary)
	}
	if _, avail := sim.MemInfo(); avail > 0 {
		need := uint64(c.Nodes)*NodeMiB + sim.BaseMiB
		if !sim.Fits(need, avail) {
			return fmt.Errorf("%w: %d node processes × about %d MiB = %d MiB, and %d MiB is available (at most 80%% of it is used); at most about %d nodes fit here",
				sim.ErrTooBig, c.Nodes, NodeMiB, need, avail, maxFit(avail))
		}
	}
	return nil
}

// maxFit is the most node processes that fit in avail MiB.
func maxFit(avail uint64) int {
	n := 0
	for n < MaxNodes && sim.Fits(uint64(n+1)*NodeMiB+sim.BaseMiB, avail) {
		n++
	}
	return n
}
