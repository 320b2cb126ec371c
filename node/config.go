package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/cardedit"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/ownerkey"
	"github.com/gpumesh/gpumesh/node/probe"
)

// CoordinatorMode says whether a node coordinates jobs.
type CoordinatorMode string

// The coordinator modes.
const (
	// CoordinatorAuto: the node coordinates jobs once it has been a member
	// for Config.CoordinatorAfter. Nodes that come and go often (a café PC
	// taken back, a home PC switched off) rarely stay that long, so they
	// rarely coordinate: the rule keeps job records on steady machines.
	// Before that the node is a standby: it holds job records while the
	// mesh has fewer coordinators than Config.Replicas.
	CoordinatorAuto CoordinatorMode = "auto"
	// CoordinatorNever: the node only supplies cards and forwards
	// submissions.
	CoordinatorNever CoordinatorMode = "never"
)

// ParseCoordinatorMode reads the --coordinator flag.
func ParseCoordinatorMode(s string) (CoordinatorMode, error) {
	switch CoordinatorMode(s) {
	case CoordinatorAuto, CoordinatorNever:
		return CoordinatorMode(s), nil
	}
	return "", fmt.Errorf("coordinator mode %q: want auto or never", s)
}

// Defaults of Config.
const (
	DefaultTickInterval     = 20 * time.Millisecond
	DefaultIdleTickInterval = 250 * time.Millisecond
	DefaultCoordinatorAfter = 30 * time.Second
	DefaultSendWorkers      = 8
	DefaultReplicas         = 3
	DefaultMetaFreeEvery    = 10 * time.Second
	DefaultMaxSubmissions   = 256
)

// Config configures a Node. DataDir is required; every other field has the
// default its comment states.
type Config struct {
	// DataDir holds the identity key, the state file, payloads and attempt
	// directories. Created 0700 if missing.
	DataDir string
	// Mesh configures identity, listening, joining, the network name and
	// secret. DataDir and Logger are filled in from this Config when empty;
	// Meta is the node's (region and cards).
	Mesh mesh.Config
	// Sim, when set, puts the node on this in-memory network instead of a
	// real libp2p host (demos, benchmarks, tests).
	Sim *mesh.SimNetwork
	// Devices are the card backends. nil: every real backend
	// (device.DefaultBackends).
	Devices []device.Backend
	// Region is the supplier's label, advertised with its cards.
	Region string
	// Prices overrides the price per card-hour (CNY) of model keys; a model
	// not listed asks the catalog's default.
	Prices map[string]float64
	// Availability is what the node advertises about its uptime; zero asks
	// coordinators to assume their default.
	Availability market.Availability
	// Coordinator says whether the node coordinates jobs. Default auto.
	Coordinator CoordinatorMode
	// CoordinatorAfter is how long an auto node must have been a member
	// before it coordinates. Default 30 s; simulations set it lower.
	CoordinatorAfter time.Duration
	// Replicas is R: a job record is held by its coordinator and the next
	// R-1 members in HRW order. Default 3.
	Replicas int
	// Executor configures the executor; Root defaults to DataDir/attempts,
	// Isolation to auto, HideDirs to include DataDir, and BlockPorts to
	// include the API's port and every port the mesh listens on.
	Executor executor.Config
	// Images configures how images are pulled and kept (node/image):
	// Keychain, Mirrors, MaxBytes (gpumesh node --image-cache-max),
	// Transport, Platform. The node fills in Dir (DataDir/images), Blobs
	// (its content store), UIDShift (the executor's ContainerIDBase),
	// Peers (its peers' layers) and Logger.
	Images image.Config
	// CardEdits configures how a job in an image gets its cards
	// (node/cardedit): through the supplier's CDI specs (CDIDirs, default
	// /etc/cdi and /var/run/cdi; NoCDI turns them off) where they name the
	// cards, else by gpumesh's built-in rules per vendor. DevDir defaults
	// to Executor.DevDir.
	CardEdits cardedit.Config
	// FenceCommand starts the node's fence keeper (node/fence.Command():
	// this binary with the keeper's hidden subcommand), which kills an
	// attempt whose lease lapses while the node is frozen or dead. nil
	// runs without one: a frozen or killed node's attempts then run on
	// until the node stops them (in-process meshes, tests, the demo).
	FenceCommand []string
	// API, when set, serves the local API on API.Addr.
	API *api.Config
	// Ingress, when set, is the address ("host:port") where the node
	// serves the public services of the mesh to anyone:
	// http://Ingress/JOB_ID/… reaches a ready replica of JOB_ID when its
	// owner marked it public (market.ServiceSpec.Public). Default: none.
	Ingress string
	// Dashboard, when set, is served at / of the API.
	Dashboard http.Handler
	// Policy is the supplier's choice of the jobs it bids for and runs:
	// owners allowed and denied, the longest run, the most network, and the
	// caps on a job's memory, pids and CPU weight, which are also the
	// limits of a job that declares none. The zero Policy admits every job
	// and caps nothing (gpumesh node caps by default: AutoJobMemory,
	// DefaultMaxJobPids).
	Policy market.Policy
	// Owner signs the specs submitted, and the job calls made, through the
	// Go API in-process (Submit, Cancel, Scale, Logs called directly): the
	// node acts as this owner. Default: a key kept in DataDir/owner.key,
	// made on first start. Requests through the HTTP API act as the owner
	// they authenticate as, never as this one.
	Owner *owner.Key
	// Verify says when this node, as a coordinator, requires a supplier to
	// pass the verification probe (node/probe) before asking it to bid:
	// market.VerifyNew, VerifyAlways or VerifyNever. Default: new on a mesh
	// without a secret (Mesh.Secret), never in a private one.
	Verify market.VerifyMode
	// Probe configures the probe this node sends as a coordinator (its
	// zero value: 1 s of work per card at catalog speed, a 10 s deadline).
	Probe probe.Config
	// ProbeBackend runs the probes this node answers as a supplier.
	// Default: probe.NewCUDA() (NVIDIA cards through the CUDA driver;
	// others answered as not probed).
	ProbeBackend probe.Backend
	// Market adjusts the market's configuration (timings) before the node
	// starts; tests and simulations use it.
	Market func(*market.Config)
	// CheckpointInterval is how often a running attempt's checkpoint
	// directory is stored and, when it changed, shipped to its holders and
	// reported to its coordinator. Default 30 s.
	CheckpointInterval time.Duration
	// CheckpointLimit bounds one checkpoint's size; a bigger one is not
	// shipped. Default 0: no limit but the content store's (StoreMax).
	CheckpointLimit int64
	// CheckpointKeep is how many checkpoints of each share this node keeps:
	// as a runner (the newest it shipped), as a holder, and in the records
	// of the jobs it coordinates. Default DefaultCheckpointKeep (2); at
	// most 100.
	CheckpointKeep int
	// StoreMax bounds the bytes of the node's content store (checkpoints,
	// and what it holds for other nodes' jobs). Default 0: half of what
	// the file system under DataDir could give it, at most a quarter of
	// the disk (node/blob.DefaultLimit).
	StoreMax int64
	// KeepOutputs is how long the checkpoints, payload and outputs of a
	// job that ended are kept. Default 24 h.
	KeepOutputs time.Duration
	// KeepJobs is how long the record of a job that ended is kept, as its
	// coordinator or a replica; then only its tombstone stays
	// (retention.go). Default DefaultKeepJobs (72 h).
	KeepJobs time.Duration
	// MaxPayload bounds one payload this node takes from an owner, or
	// holds for a job it coordinates (413 beyond). Default 0: no limit but
	// the content store's and the owner's quota.
	MaxPayload int64
	// OwnerQuota bounds what this node keeps of payloads for one owner:
	// the distinct payloads of its uploads and of its jobs that did not
	// end KeepOutputs ago (413 beyond). Default 0: half of the content
	// store's limit.
	OwnerQuota int64
	// TickInterval is how often the market's clock advances. Default 20 ms.
	TickInterval time.Duration
	// IdleTickInterval is how often it advances while the market is quiet
	// (market.Node.Quiet: no job coordinated here has anything left to do,
	// no card is reserved, no attempt runs): nothing then waits on a
	// deadline, and every input still gets its turn at once. It is never
	// shorter than TickInterval. Default 250 ms: an idle node wakes 4
	// times a second, not 50.
	IdleTickInterval time.Duration
	// ReserveSettle is how long a change of this node's cards that only
	// reserves them for a bid, or releases such a reservation, waits before
	// it is advertised (most end within it; see publishSupply). Default:
	// the market's BidWindow + AwardTimeout (650 ms), one bid-and-award
	// cycle.
	ReserveSettle time.Duration
	// MetaFreeEvery is the least time between two membership metadata
	// updates that change only the free-card count (the capacity ads carry
	// it at once; see updateMeta). Default 10 s.
	MetaFreeEvery time.Duration
	// SendWorkers bounds how many destinations market messages are sent
	// to at once; each destination has its own queue, so one that does not
	// answer holds up only its own messages. Default 8.
	SendWorkers int
	// MaxSubmissions bounds the submissions this node works on at once as
	// their coordinator; one more is answered 429 with a Retry-After, and
	// so is any while the driver's queue is half full (admission.go).
	// Default 256.
	MaxSubmissions int
	// Version is this binary's version, shown in status and metrics.
	Version string
	// Logger receives the node's logs. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Coordinator == "" {
		c.Coordinator = CoordinatorAuto
	}
	if c.CoordinatorAfter == 0 {
		c.CoordinatorAfter = DefaultCoordinatorAfter
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.KeepOutputs <= 0 {
		c.KeepOutputs = DefaultKeepOutputs
	}
	if c.KeepJobs <= 0 {
		c.KeepJobs = DefaultKeepJobs
	}
	if c.CheckpointKeep == 0 {
		c.CheckpointKeep = DefaultCheckpointKeep
	}
	if c.TickInterval <= 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.IdleTickInterval <= 0 {
		c.IdleTickInterval = DefaultIdleTickInterval
	}
	c.IdleTickInterval = max(c.IdleTickInterval, c.TickInterval)
	if c.MetaFreeEvery <= 0 {
		c.MetaFreeEvery = DefaultMetaFreeEvery
	}
	if c.SendWorkers <= 0 {
		c.SendWorkers = DefaultSendWorkers
	}
	if c.MaxSubmissions == 0 {
		c.MaxSubmissions = DefaultMaxSubmissions
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Mesh.DataDir == "" {
		c.Mesh.DataDir = c.DataDir
	}
	if c.Mesh.Logger == nil {
		c.Mesh.Logger = c.Logger
	}
	if c.Mesh.Network == "" {
		c.Mesh.Network = mesh.DefaultNetwork
	}
	return c
}

// Validate reports the first field of c that is wrong.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("node: DataDir is required")
	}
	if _, err := ParseCoordinatorMode(string(c.Coordinator)); err != nil && c.Coordinator != "" {
		return fmt.Errorf("node: %w", err)
	}
	if c.MaxPayload < 0 || c.OwnerQuota < 0 {
		return fmt.Errorf("node: MaxPayload %d, OwnerQuota %d: must not be negative", c.MaxPayload, c.OwnerQuota)
	}
	if c.Replicas < 0 || c.Replicas > 7 {
		return fmt.Errorf("node: Replicas %d: want 1 to 7", c.Replicas)
	}
	if c.CheckpointKeep < 0 || c.CheckpointKeep > 100 {
		return fmt.Errorf("node: CheckpointKeep %d: want 1 to 100", c.CheckpointKeep)
	}
	if c.CoordinatorAfter < 0 {
		return fmt.Errorf("node: CoordinatorAfter %s: must not be negative", c.CoordinatorAfter)
	}
	if c.MaxSubmissions < 0 {
		return fmt.Errorf("node: MaxSubmissions %d: must not be negative", c.MaxSubmissions)
	}
	if c.ReserveSettle < 0 {
		return fmt.Errorf("node: ReserveSettle %s: must not be negative", c.ReserveSettle)
	}
	for model, p := range c.Prices {
		if p <= 0 || p > market.MaxPriceCap {
			return fmt.Errorf("node: price of %s: %v CNY per card-hour: want (0, %d]", model, p, market.MaxPriceCap)
		}
	}
	return nil
}

// nodeOwnerKey is Config.Owner, else the key in the data dir.
func nodeOwnerKey(cfg Config) (owner.Key, error) {
	if cfg.Owner != nil {
		if !cfg.Owner.Valid() {
			return owner.Key{}, errors.New("node: Config.Owner is the zero key")
		}
		return *cfg.Owner, nil
	}
	k, err := ownerkey.LoadOrCreate(cfg.DataDir)
	if err != nil {
		return owner.Key{}, fmt.Errorf("node: %w", err)
	}
	return k, nil
}
