package market

import (
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market/owner"
)

// Kind says how a job runs and what it pays.
type Kind string

// The job kinds. The empty Kind means KindBatch.
const (
	// KindBatch runs to completion on on-demand cards and is never preempted.
	KindBatch Kind = "batch"
	// KindPreemptible runs to completion at the supplier's preemptible price
	// (a discount, PricePolicy.PreemptibleDiscount) and may be stopped when an
	// on-demand job needs its cards; it is then placed again elsewhere.
	KindPreemptible Kind = "preemptible"
	// KindService runs Replicas copies until cancelled, each copy on its own
	// node with Cards cards; a copy that exits or is lost is placed again.
	KindService Kind = "service"
)

// LayoutMode says how a job's cards may be spread over nodes.
type LayoutMode string

// The layout modes. The empty LayoutMode means LayoutAny.
const (
	// LayoutAny spreads cards over any nodes; each node's cards form a share.
	LayoutAny LayoutMode = "any"
	// LayoutPerNode places exactly Layout.PerNode cards on each node used
	// (a gang job: torchrun's nproc_per_node), one share per node.
	LayoutPerNode LayoutMode = "per_node"
	// LayoutOneNode places all the job's cards on one node.
	LayoutOneNode LayoutMode = "one_node"
)

// Limits on a job spec.
const (
	// MaxCards is the most cards one job may ask for.
	MaxCards = 4096
	// MaxCardsPerNode is the most cards one node is assumed to hold (the
	// largest servers gpumesh knows carry 8 or 16 accelerators). A layout
	// that needs more on one node can never be satisfied and is refused.
	MaxCardsPerNode = 16
	// MaxPriceCap is the highest max price a spec may name, in CNY per
	// card-hour; it keeps arithmetic on prices far from overflow.
	MaxPriceCap = 10000
	// MaxReplicas is the most replicas a service may ask for.
	MaxReplicas = 256
	// MaxExpectedDuration is the longest expected duration a spec may name.
	MaxExpectedDuration = 365 * 24 * time.Hour
	// maxCommandArgs, maxArgBytes, maxEnv and maxEnvBytes bound the command
	// and environment a record carries.
	maxCommandArgs = 256
	maxArgBytes    = 4096
	maxEnv         = 256
	maxEnvBytes    = 64 << 10
	maxMinMemMiB   = 1 << 20 // 1 TiB
	maxMinCU       = 100
)

// Layout says how a job's cards are spread over nodes.
type Layout struct {
	// Mode is any (default), per_node or one_node.
	Mode LayoutMode `json:"mode,omitempty"`
	// PerNode is the number of cards on each node for LayoutPerNode
	// (1 to MaxCardsPerNode, dividing Cards); 0 otherwise.
	PerNode int `json:"per_node,omitempty"`
}

// Elastic is the range a job's card count may move in once it runs.
type Elastic struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// PayloadRef names the job's payload: a tree of files in the nodes'
// content stores (node/blob), restored into each share's work directory
// before its command starts. The owner's signature covers the manifest's
// digest, so a share runs only the bytes its owner signed; the bytes move
// between nodes as chunks, by stream, never by gossip.
type PayloadRef struct {
	// Manifest is the digest of the tree's manifest: "sha256:" and 64
	// lower-case hex digits.
	Manifest string `json:"manifest"`
	// Size is the size of the tree's files in bytes (0 for a tree of
	// empty files and directories).
	Size int64 `json:"size"`
	// Holder is the node the owner uploaded the tree to (its peer ID): it
	// keeps the tree while the job lives, and the job's coordinator and
	// runners fetch it from there.
	Holder string `json:"holder"`
	// Path is where in the work directory the tree goes ("" or "." for
	// the directory itself; see WorkPath).
	Path string `json:"path,omitempty"`
}

// JobSpec is what a job owner asks for. Its JSON form is what the API and
// the CLI's --json take. Zero values mean the documented defaults; Validate
// says which field is wrong when one is.
type JobSpec struct {
	// ID names the job (see ValidateJobID and NewJobID). Required.
	ID string `json:"id"`
	// Owner is the owner ID (owner.ID, "o1...") of the key that signs the
	// spec (see SignSpec); only that owner may read or steer the job.
	// Empty in an unsigned spec; SignSpec fills it in.
	Owner string `json:"owner,omitempty"`
	// Name is a label for people. Optional.
	Name string `json:"name,omitempty"`

	// Cards is the number of cards wanted, 1 to MaxCards. For a service it
	// is the number of cards of each replica (at most MaxCardsPerNode).
	Cards int `json:"cards"`
	// Models lists the allowed card models: catalog keys ("h100-sxm-80g"),
	// derived keys of uncatalogued cards ("x-tesla-t4-15g") or patterns
	// with '*' ("h100-*", "rtx4090-*"). Empty allows every model.
	Models []string `json:"models,omitempty"`
	// Vendors lists the allowed vendors. Empty allows every vendor.
	Vendors []device.Vendor `json:"vendors,omitempty"`
	// MinMemoryMiB is the least memory per card. A card's memory counts in
	// whole GiB as it rounds (a 24564 MiB RTX 4090 has 24 GiB = 24576 MiB).
	// 0: no minimum.
	MinMemoryMiB uint64 `json:"min_memory_mib,omitempty"`
	// MinComputeUnits is the least compute per card (dense BF16 TFLOPS / 312;
	// an A100 is 1.0). A card whose compute is unknown does not qualify when
	// this is set. 0: no minimum.
	MinComputeUnits float64 `json:"min_compute_units,omitempty"`
	// Layout says how the cards may be spread over nodes. Default: any.
	Layout Layout `json:"layout"`
	// MixedModels lets a share (the cards the job gets on one node) hold
	// cards of more than one model. Default false: every share's cards
	// are of one model, whatever Models allows (a job of 2 cards never
	// gets an A100 and an RTX 4090 side by side). Shares on different
	// nodes may differ either way: Models pins the model of all of them.
	MixedModels bool `json:"mixed_models,omitempty"`
	// AllowSimulated lets the job run on simulated cards (a supplier's
	// `gpumesh node --sim`: catalog figures, no hardware behind them).
	// Default false: a coordinator never asks a supplier to bid its
	// simulated cards for the job, a supplier never bids or runs them for
	// it, and a job only simulated cards could take waits in pending,
	// saying so. Demos, benchmarks and tests set it.
	AllowSimulated bool `json:"allow_simulated,omitempty"`
	// MaxPriceCNY is the most the owner pays per card-hour. Required, > 0.
	MaxPriceCNY float64 `json:"max_price_cny"`
	// Kind is batch (default), preemptible or service.
	Kind Kind `json:"kind,omitempty"`
	// Replicas is the number of copies of a service (default 1); only
	// services have replicas.
	Replicas int `json:"replicas,omitempty"`
	// ExpectedDuration is how long the owner expects the job to run. It
	// weighs suppliers' availability in clearing; 0 uses the coordinator's
	// Config.DefaultDuration.
	ExpectedDuration Duration `json:"expected_duration,omitempty"`
	// Elastic, when set, lets a running job be scaled between Min and Max
	// cards (see ScaleJob).
	Elastic *Elastic `json:"elastic,omitempty"`

	// Images, when set, makes the job run in an OCI image: each share in
	// the image named for its cards' vendor (see ImageRef and ImageFor),
	// under the supplier's container runtime. A job whose images name
	// vendors is placed only on cards of those vendors. Empty: the command
	// runs on the supplier's own system (a host-command job).
	Images []ImageRef `json:"images,omitempty"`
	// Command is the program and its arguments. Required without Images;
	// with Images it replaces the image's Cmd (as docker run's arguments
	// do), and empty runs the image's Entrypoint and Cmd.
	Command []string `json:"command"`
	// Env is extra environment for the job. Names starting with GPUMESH_ are
	// reserved for what the executor sets.
	Env map[string]string `json:"env,omitempty"`
	// Payload names a tree of files restored into the job's work
	// directory before it starts.
	Payload *PayloadRef `json:"payload,omitempty"`
	// Data names inputs staged from object storage before the command
	// starts, outputs sent there after it ends, and the secrets (such as
	// the storage's credentials) only the job's runners receive.
	Data *DataSpec `json:"data,omitempty"`
	// Network is the network the job needs where it runs: none, egress (the
	// public internet only) or host (the supplier's own network). Empty
	// means none; see NetworkOrDefault. Suppliers bid only for jobs whose
	// network their policy allows (Policy.MaxNetwork), which is egress by
	// default (gpumesh node --job-network). A gang across nodes on none or
	// egress also has a private network between its shares, which only
	// suppliers that can give it bid for (Policy.NoPrivateNet); on host
	// its ranks meet on the suppliers' own networks.
	Network JobNetwork `json:"network,omitempty"`
	// Service says how a service job is reached (its port, readiness
	// probe, and whether an ingress serves it to anyone); only services
	// have one.
	Service *ServiceSpec `json:"service,omitempty"`
	// Resources caps what each share may use on its node besides its cards
	// (memory_bytes, pids, cpu_weight at the top level of the JSON). Zero
	// fields take the supplier's defaults; suppliers whose policy caps less
	// than a declared field do not bid.
	Resources
}

// ErrInvalidSpec is wrapped by every error Validate returns.
var ErrInvalidSpec = errors.New("invalid job spec")

// SpecError names the field of a JobSpec that is wrong and why.
type SpecError struct {
	Field string // JSON name of the field: "cards", "layout.per_node"
	Msg   string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalidSpec) hold.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

func specErr(field, format string, args ...any) error {
	return &SpecError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// KindOrDefault returns the job's kind, KindBatch when unset.
func (s *JobSpec) KindOrDefault() Kind {
	if s.Kind == "" {
		return KindBatch
	}
	return s.Kind
}

// LayoutMode returns the job's layout mode, LayoutAny when unset.
func (s *JobSpec) LayoutMode() LayoutMode {
	if s.Layout.Mode == "" {
		return LayoutAny
	}
	return s.Layout.Mode
}

// ReplicaCount returns the number of service replicas (1 when unset); 1 for
// other kinds.
func (s *JobSpec) ReplicaCount() int {
	if s.KindOrDefault() != KindService || s.Replicas == 0 {
		return 1
	}
	return s.Replicas
}

// TotalCards is the number of cards the job holds when fully placed at its
// initial size: Cards, times the replicas for a service.
func (s *JobSpec) TotalCards() int { return s.Cards * s.ReplicaCount() }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
var derivedKey = regexp.MustCompile(`^x-[a-z0-9][a-z0-9.-]*$`)
var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Validate checks the spec against the catalog (nil means
// device.DefaultCatalog) and returns a *SpecError naming the first field that
// is wrong, wrapping ErrInvalidSpec. It refuses contradictory fields and
// layouts that can never be satisfied (see MaxCardsPerNode).
func (s *JobSpec) Validate(cat *device.Catalog) error {
	if cat == nil {
		cat = device.DefaultCatalog()
	}
	if err := ValidateJobID(s.ID); err != nil {
		return specErr("id", "%s", strings.TrimPrefix(err.Error(), ErrInvalidJobID.Error()+": "))
	}
	if err := checkText("owner", s.Owner, 256); err != nil {
		return err
	}
	if s.Owner != "" {
		if _, err := owner.ParseID(s.Owner); err != nil {
			return specErr("owner", "%v", err)
		}
	}
	if err := checkText("name", s.Name, 128); err != nil {
		return err
	}
	if s.Cards < 1 || s.Cards > MaxCards {
		return specErr("cards", "must be between 1 and %d, got %d", MaxCards, s.Cards)
	}
	if err := s.validateKind(); err != nil {
		return err
	}
	if err := s.validateLayout(); err != nil {
		return err
	}
	if err := s.validateElastic(); err != nil {
		return err
	}
	if math.IsNaN(s.MaxPriceCNY) || s.MaxPriceCNY <= 0 || s.MaxPriceCNY > MaxPriceCap {
		return specErr("max_price_cny", "must be above 0 and at most %d CNY per card-hour, got %v", MaxPriceCap, s.MaxPriceCNY)
	}
	if s.ExpectedDuration < 0 || s.ExpectedDuration.Std() > MaxExpectedDuration {
		return specErr("expected_duration", "must be between 0 and %v, got %v", MaxExpectedDuration, s.ExpectedDuration)
	}
	if err := s.validateCards(cat); err != nil {
		return err
	}
	if err := s.validateCommand(); err != nil {
		return err
	}
	if err := s.validateImages(); err != nil {
		return err
	}
	if err := s.validateNetwork(); err != nil {
		return err
	}
	if err := s.Resources.validate(); err != nil {
		return err
	}
	if p := s.Payload; p != nil {
		if !sha256Digest.MatchString(p.Manifest) {
			return specErr("payload.manifest", "want \"sha256:\" and 64 lower-case hex digits, got %q", clipText(p.Manifest))
		}
		if p.Size < 0 {
			return specErr("payload.size", "must not be negative, got %d", p.Size)
		}
		if p.Holder == "" || len(p.Holder) > maxIDLen || strings.ContainsFunc(p.Holder, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return specErr("payload.holder", "want the peer ID of the node that holds the payload, got %q", clipText(p.Holder))
		}
		if p.Path != "" {
			if _, err := WorkPath(p.Path); err != nil {
				return specErr("payload.path", "%v", err)
			}
		}
	}
	if s.Data != nil {
		if err := s.Data.validate(s.Env); err != nil {
			return err
		}
	}
	return nil
}

func (s *JobSpec) validateKind() error {
	switch s.KindOrDefault() {
	case KindBatch, KindPreemptible:
		if s.Replicas != 0 {
			return specErr("replicas", "only service jobs have replicas (kind is %s)", s.KindOrDefault())
		}
		if s.Service != nil {
			return specErr("service", "only service jobs have a port (kind is %s)", s.KindOrDefault())
		}
	case KindService:
		if s.Replicas < 0 || s.Replicas > MaxReplicas {
			return specErr("replicas", "must be between 1 and %d, got %d", MaxReplicas, s.Replicas)
		}
		if s.Cards > MaxCardsPerNode {
			return specErr("cards", "a service replica runs on one node: at most %d cards, got %d", MaxCardsPerNode, s.Cards)
		}
		if s.Service != nil {
			if err := s.Service.validate(); err != nil {
				return err
			}
		}
	default:
		return specErr("kind", "want batch, preemptible or service, got %q", s.Kind)
	}
	return nil
}

func (s *JobSpec) validateLayout() error {
	switch s.LayoutMode() {
	case LayoutAny:
		if s.Layout.PerNode != 0 {
			return specErr("layout.per_node", "only the per_node layout takes a per-node count")
		}
	case LayoutPerNode:
		k := s.Layout.PerNode
		if k < 1 || k > MaxCardsPerNode {
			return specErr("layout.per_node", "must be between 1 and %d (the most cards a node holds), got %d", MaxCardsPerNode, k)
		}
		if s.Cards%k != 0 {
			return specErr("layout.per_node", "%d cards per node does not divide %s", k, text.Count(s.Cards, "card"))
		}
		if s.KindOrDefault() == KindService {
			return specErr("layout", "a service places each replica on one node; set cards per replica and replicas instead")
		}
	case LayoutOneNode:
		if s.Layout.PerNode != 0 && s.Layout.PerNode != s.Cards {
			return specErr("layout.per_node", "only the per_node layout takes a per-node count")
		}
		if s.Cards > MaxCardsPerNode {
			return specErr("layout", "one_node needs %d cards on one node; no node holds more than %d", s.Cards, MaxCardsPerNode)
		}
	default:
		return specErr("layout.mode", "want any, per_node or one_node, got %q", s.Layout.Mode)
	}
	return nil
}

func (s *JobSpec) validateElastic() error {
	e := s.Elastic
	if e == nil {
		return nil
	}
	switch {
	case s.KindOrDefault() == KindService:
		return specErr("elastic", "services scale by replicas, not by an elastic range")
	case s.LayoutMode() == LayoutOneNode:
		return specErr("elastic", "a one_node job cannot grow beyond its node")
	case e.Min < 1 || e.Min > e.Max:
		return specErr("elastic", "want 1 <= min <= max, got min %d max %d", e.Min, e.Max)
	case e.Max > MaxCards:
		return specErr("elastic.max", "must be at most %d, got %d", MaxCards, e.Max)
	case s.Cards < e.Min || s.Cards > e.Max:
		return specErr("cards", "%d is outside the elastic range %d..%d", s.Cards, e.Min, e.Max)
	}
	if k := s.Layout.PerNode; s.LayoutMode() == LayoutPerNode && (e.Min%k != 0 || e.Max%k != 0) {
		return specErr("elastic", "min %d and max %d must be multiples of %d cards per node", e.Min, e.Max, k)
	}
	return nil
}

// validateCards checks the card filter: every model names something, every
// vendor is known, and at least one catalogued model passes all of the
// filter when the filter names catalogued models only.
func (s *JobSpec) validateCards(cat *device.Catalog) error {
	for i, v := range s.Vendors {
		if !slices.Contains(device.Vendors(), v) {
			return specErr(fmt.Sprintf("vendors[%d]", i), "unknown vendor %q (known: %s)", v, joinVendors(device.Vendors()))
		}
	}
	if s.MinMemoryMiB > maxMinMemMiB {
		return specErr("min_memory_mib", "must be at most %d MiB, got %d", maxMinMemMiB, s.MinMemoryMiB)
	}
	if math.IsNaN(s.MinComputeUnits) || s.MinComputeUnits < 0 || s.MinComputeUnits > maxMinCU {
		return specErr("min_compute_units", "must be between 0 and %d, got %v", maxMinCU, s.MinComputeUnits)
	}
	derived := false // a derived key or pattern: uncatalogued cards may match
	var allowed []device.Model
	for i, m := range s.Models {
		field := fmt.Sprintf("models[%d]", i)
		switch {
		case strings.ContainsAny(m, "*?["):
			if _, err := path.Match(m, ""); err != nil {
				return specErr(field, "bad pattern %q: %v", m, err)
			}
			n := 0
			for _, cm := range cat.Models() {
				if ok, _ := path.Match(m, cm.Key); ok {
					allowed = append(allowed, cm)
					n++
				}
			}
			if strings.HasPrefix(m, device.DerivedKeyPrefix) {
				derived = true
			} else if n == 0 {
				return specErr(field, "pattern %q matches no model (did you mean %s?)", m, strings.Join(cat.Closest(strings.TrimRight(m, "*?"), 3), ", "))
			}
		case device.IsDerivedKey(m):
			if !derivedKey.MatchString(m) {
				return specErr(field, "derived key %q: want \"x-\" and lower-case letters, digits, '.' and '-'", m)
			}
			derived = true
		default:
			cm, ok := cat.Lookup(m)
			if !ok {
				return specErr(field, "unknown model %q (did you mean %s?)", m, strings.Join(cat.Closest(m, 3), ", "))
			}
			allowed = append(allowed, cm)
		}
	}
	if len(s.Models) == 0 {
		if s.MinComputeUnits == 0 {
			return nil // every model allowed, no minimum to check
		}
		allowed, derived = cat.Models(), true
	}
	// An uncatalogued card's compute is unknown, so it never meets a compute
	// minimum; it might meet the vendor and memory ones.
	if s.MinComputeUnits > 0 && !slices.ContainsFunc(allowed, func(m device.Model) bool { return m.ComputeUnits >= s.MinComputeUnits }) {
		return specErr("min_compute_units", "no allowed model has %v compute units per card", s.MinComputeUnits)
	}
	if derived {
		return nil
	}
	if !slices.ContainsFunc(allowed, func(m device.Model) bool { return len(s.Vendors) == 0 || slices.Contains(s.Vendors, m.Vendor) }) {
		return specErr("vendors", "none of the allowed models is made by %s", joinVendors(s.Vendors))
	}
	if !slices.ContainsFunc(allowed, func(m device.Model) bool { return m.MemoryGiB*1024 >= s.MinMemoryMiB }) {
		return specErr("min_memory_mib", "no allowed model has %d MiB per card", s.MinMemoryMiB)
	}
	if !slices.ContainsFunc(allowed, func(m device.Model) bool {
		return (len(s.Vendors) == 0 || slices.Contains(s.Vendors, m.Vendor)) &&
			m.MemoryGiB*1024 >= s.MinMemoryMiB && m.ComputeUnits >= s.MinComputeUnits
	}) {
		return specErr("models", "no allowed model meets the vendor, memory and compute minimums together")
	}
	return nil
}

func (s *JobSpec) validateCommand() error {
	if len(s.Images) == 0 && (len(s.Command) == 0 || s.Command[0] == "") {
		return specErr("command", "required: the program to run and its arguments")
	}
	if len(s.Command) > maxCommandArgs {
		return specErr("command", "at most %d arguments, got %d", maxCommandArgs, len(s.Command))
	}
	for i, a := range s.Command {
		if len(a) > maxArgBytes || strings.IndexByte(a, 0) >= 0 {
			return specErr(fmt.Sprintf("command[%d]", i), "must be at most %s with no NUL", text.Bytes(maxArgBytes))
		}
	}
	if len(s.Env) > maxEnv {
		return specErr("env", "at most %d variables, got %d", maxEnv, len(s.Env))
	}
	size := 0
	for k, v := range s.Env {
		switch {
		case !envName.MatchString(k):
			return specErr("env", "bad variable name %q: want letters, digits and '_'", k)
		case strings.HasPrefix(k, "GPUMESH_"):
			return specErr("env", "%s: names starting with GPUMESH_ are set by the executor", k)
		case strings.IndexByte(v, 0) >= 0:
			return specErr("env", "%s: value contains NUL", k)
		}
		size += len(k) + len(v) + 2
	}
	if size > maxEnvBytes {
		return specErr("env", "at most %s in all, got %s", text.Bytes(maxEnvBytes), text.Bytes(int64(size)))
	}
	return nil
}

func checkText(field, v string, max int) error {
	if len(v) > max {
		return specErr(field, "at most %s, got %s", text.Bytes(int64(max)), text.Bytes(int64(len(v))))
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return specErr(field, "must be printable text")
		}
	}
	return nil
}

func joinVendors(vs []device.Vendor) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// clipText shortens s for an error message.
func clipText(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
