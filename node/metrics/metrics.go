package metrics

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumesh/gpumesh/node/api"
)

// Metrics holds a node's Prometheus registry (its own: never the global one)
// and every gpumesh_* metric. Its methods are safe for concurrent use and
// cheap enough for the node's driver goroutine: an event method bumps one
// counter or histogram, SetStatus stores one pointer, and the gauges are
// computed from the latest status when Prometheus scrapes.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	status atomic.Pointer[api.Status]

	placement, reroute     prometheus.Histogram
	auctions               *prometheus.CounterVec
	renewals, misses       *prometheus.CounterVec
	billedCNY, billedCards *prometheus.CounterVec
	busy                   prometheus.Counter
	memberChanges          *prometheus.CounterVec
	stages                 *prometheus.HistogramVec

	mu         sync.Mutex // guards the windows and rates below
	placements *Window
	reroutes   *Window
	msgs       *Rate // gossip messages from peers (every verdict)
	bytesIn    *Rate
	bytesOut   *Rate
	future     *Rate // messages ignored as "from the future"
}

// Outcome is how an auction round ended, the label of
// gpumesh_auctions_total.
type Outcome string

// The auction outcomes. Any other value is counted as "other".
const (
	OutcomeCleared      Outcome = "cleared"       // bids covered the spec; awards sent
	OutcomeShort        Outcome = "short"         // bids came but could not cover the spec
	OutcomeNoCandidates Outcome = "no_candidates" // the book held no one to ask
	OutcomeAborted      Outcome = "aborted"       // the job was cancelled or moved mid-round
)

// Role says which side of a lease a count is from, the label of the lease
// metrics.
type Role string

// The lease roles. Any other value is counted as "other".
const (
	// RoleRunner: this node runs a share and renews its lease with the
	// job's coordinator. A miss is a renewal not acknowledged in time.
	RoleRunner Role = "runner"
	// RoleCoordinator: this node coordinates the job and receives
	// renewals. A miss is a lease that expired without one.
	RoleCoordinator Role = "coordinator"
)

// Side says whose bill an amount is on, the label of the billing metrics.
type Side string

// The billing sides.
const (
	// SideCharged: usage of jobs this node coordinates, billed to their
	// owners while it coordinates them (a job taken over counts from the
	// takeover), so that the sum over the mesh is what owners were billed.
	SideCharged Side = "charged"
	// SideEarned: usage of this node's cards, paid to this node.
	SideEarned Side = "earned"
)

// ErrBadAmount is returned by AddBilling for a negative or non-finite
// amount or an unknown side; nothing is counted.
var ErrBadAmount = errors.New("metrics: bad billing amount")

// Latency buckets, in seconds: placement aims at about a second and may
// wait minutes for capacity; a reroute waits for a lease to lapse first.
var (
	placementBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600}
	rerouteBuckets   = []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}
)

// New returns a Metrics with every metric registered on a new registry.
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Version == "" {
		cfg.Version = "devel"
	}
	m := &Metrics{
		cfg: cfg,
		reg: prometheus.NewRegistry(),
		placement: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpumesh_placement_duration_seconds",
			Help:    "Time from a job's submission to all of its shares running, for jobs this node coordinates.",
			Buckets: placementBuckets,
		}),
		reroute: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpumesh_reroute_duration_seconds",
			Help:    "Time from a share's loss (its runner gone or fenced) to its new attempt running, for jobs this node coordinates.",
			Buckets: rerouteBuckets,
		}),
		auctions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_auctions_total",
			Help: "Auction rounds this node ran as coordinator, by outcome (cleared, short, no_candidates, aborted).",
		}, []string{"outcome"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_lease_renewals_total",
			Help: "Lease renewals: sent for shares this node runs (role runner), received for jobs it coordinates (role coordinator).",
		}, []string{"role"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_lease_misses_total",
			Help: "Lease renewals missed: not acknowledged in time (role runner), or leases that lapsed without one (role coordinator).",
		}, []string{"role"}),
		billedCNY: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_billed_cny_total",
			Help: "Money billed in CNY: charged to owners of jobs this node coordinates (side charged), earned by this node's cards (side earned).",
		}, []string{"side"}),
		billedCards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_billed_card_seconds_total",
			Help: "Card-seconds billed, by side as gpumesh_billed_cny_total.",
		}, []string{"side"}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpumesh_submissions_busy_total",
			Help: "Submissions this node refused as their coordinator with 429 (Retry-After) because it was saturated; the clients send them again.",
		}),
		memberChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumesh_member_changes_total",
			Help: "Changes of other members' state as this node saw them, by kind (join, suspect, dead, left): a calm mesh adds none; joins after deaths are flapping.",
		}, []string{"kind"}),
		stages:     newStageHistogram(),
		placements: NewWindow(cfg.PlacementWindow, cfg.WindowSamples),
		reroutes:   NewWindow(cfg.RerouteWindow, cfg.WindowSamples),
		msgs:       NewRate(cfg.RateWindow),
		bytesIn:    NewRate(cfg.RateWindow),
		bytesOut:   NewRate(cfg.RateWindow),
		future:     NewRate(cfg.RateWindow),
	}
	// Known label values start at zero so that rate() and absent() work
	// from the first scrape.
	for _, o := range []Outcome{OutcomeCleared, OutcomeShort, OutcomeNoCandidates, OutcomeAborted} {
		m.auctions.WithLabelValues(string(o))
	}
	for _, r := range []Role{RoleRunner, RoleCoordinator} {
		m.renewals.WithLabelValues(string(r))
		m.misses.WithLabelValues(string(r))
	}
	for _, st := range Stages() {
		m.stages.WithLabelValues(string(st))
	}
	for _, k := range memberChangeKinds {
		m.memberChanges.WithLabelValues(k)
	}
	for _, s := range []Side{SideCharged, SideEarned} {
		m.billedCNY.WithLabelValues(string(s))
		m.billedCards.WithLabelValues(string(s))
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gpumesh_build_info",
		Help:        "Always 1; the labels say which gpumesh build this node runs.",
		ConstLabels: prometheus.Labels{"version": cleanLabel(cfg.Version), "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	cs := []prometheus.Collector{
		buildInfo, m.placement, m.reroute, m.auctions, m.renewals, m.misses, m.billedCNY, m.billedCards, m.busy, m.memberChanges, m.stages,
		statusCollector{m: m},
	}
	if cfg.Gossip != nil {
		cs = append(cs, gossipCollector{stats: cfg.Gossip})
	}
	if cfg.Network != nil {
		cs = append(cs, networkCollector{bytes: cfg.Network})
	}
	if cfg.Membership != nil {
		cs = append(cs, membershipCollector{stats: cfg.Membership})
	}
	if cfg.Runtime {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// Registerer is the node's registry, for collectors of the libraries it
// wires (libp2p's resource manager, for one). Their label sets must be
// bounded as well.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Gatherer is the node's registry, for reading the metrics in tests.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the registry in Prometheus's text and protobuf formats, the
// /metrics endpoint. A collector that fails is logged in the response
// comment and the rest is still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// SetStatus publishes the node's latest status: the member, card, job and
// warning gauges are read from it at the next scrape. The Metrics keeps st;
// the caller must not change it afterwards (build a new one each time).
func (m *Metrics) SetStatus(st *api.Status) { m.status.Store(st) }

// ObservePlacement records that a job placed at at took d from submission to
// running.
func (m *Metrics) ObservePlacement(at time.Time, d time.Duration) {
	m.placement.Observe(max(d, 0).Seconds())
	m.mu.Lock()
	m.placements.Observe(at, d)
	m.mu.Unlock()
}

// ObserveReroute records that a share lost was running again at at, d after
// its loss.
func (m *Metrics) ObserveReroute(at time.Time, d time.Duration) {
	m.reroute.Observe(max(d, 0).Seconds())
	m.mu.Lock()
	m.reroutes.Observe(at, d)
	m.mu.Unlock()
}

// CountAuction counts one auction round by its outcome.
func (m *Metrics) CountAuction(o Outcome) {
	m.auctions.WithLabelValues(oneOf(string(o), string(OutcomeCleared), string(OutcomeShort),
		string(OutcomeNoCandidates), string(OutcomeAborted))).Inc()
}

// CountBusy counts one submission refused with 429 while the node was
// saturated.
func (m *Metrics) CountBusy() { m.busy.Inc() }

// memberChangeKinds are the labels of gpumesh_member_changes_total.
var memberChangeKinds = []string{"join", "suspect", "dead", "left"}

// CountMemberChange counts one change of a member's state (kind join,
// suspect, dead or left; anything else is counted as "other").
func (m *Metrics) CountMemberChange(kind string) {
	m.memberChanges.WithLabelValues(oneOf(kind, memberChangeKinds...)).Inc()
}

// CountLeaseRenewal counts one lease renewal.
func (m *Metrics) CountLeaseRenewal(r Role) {
	m.renewals.WithLabelValues(oneOf(string(r), string(RoleRunner), string(RoleCoordinator))).Inc()
}

// CountLeaseMiss counts one missed lease renewal.
func (m *Metrics) CountLeaseMiss(r Role) {
	m.misses.WithLabelValues(oneOf(string(r), string(RoleRunner), string(RoleCoordinator))).Inc()
}

// AddBilling adds usage to the billing totals of side: the increase since the
// last call, not a running total. It returns ErrBadAmount, counting nothing,
// for a negative or non-finite amount or an unknown side.
func (m *Metrics) AddBilling(side Side, cardSeconds, cny float64) error {
	if side != SideCharged && side != SideEarned {
		return fmt.Errorf("%w: side %q: want %q or %q", ErrBadAmount, side, SideCharged, SideEarned)
	}
	for _, v := range []struct {
		name string
		v    float64
	}{{"card-seconds", cardSeconds}, {"CNY", cny}} {
		if v.v < 0 || math.IsNaN(v.v) || math.IsInf(v.v, 0) {
			return fmt.Errorf("%w: %s %v: want a finite amount ≥ 0", ErrBadAmount, v.name, v.v)
		}
	}
	m.billedCards.WithLabelValues(string(side)).Add(cardSeconds)
	m.billedCNY.WithLabelValues(string(side)).Add(cny)
	return nil
}
