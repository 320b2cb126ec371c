package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ClusterConfig configures a Cluster. Suppliers and Dir are required.
type ClusterConfig struct {
	// Suppliers are the nodes to run (PlanSuppliers). The first is the
	// gateway: every other node joins through it, and it serves API.
	Suppliers []Supplier
	// Dir holds one data directory per supplier.
	Dir string
	// API, when set, is served by the gateway.
	API *api.Config
	// Dashboard, when set, is served at / of the gateway's API.
	Dashboard http.Handler
	// Owner, when set, is the owner every node submits and steers jobs as
	// (node.Config.Owner). Default: each node its own key.
	Owner *owner.Key
	// TimeScale is how many times faster than life the simulation runs:
	// each node advertises its tier's MTBF divided by it. Default 1.
	TimeScale float64
	// Latency is the one-way delay of every link. Default 0.
	Latency time.Duration
	// Market adjusts every node's market configuration.
	Market func(*market.Config)
	// Profile is the nodes' membership timing. Default mesh.FastProfile().
	Profile *mesh.Profile
	// TickInterval is how often each node's market clock advances.
	// Default node.DefaultTickInterval.
	TickInterval time.Duration
	// StartWorkers is how many nodes start at once. Default 4.
	StartWorkers int
	// OnStarted, when set, is called by StartCluster after each node it
	// starts, with the nodes up so far and the nodes of the plan, from the
	// goroutine that started it: calls may come at once from StartWorkers
	// goroutines.
	OnStarted func(up, total int)
	// OnEvent, when set, receives every node's API events (job changes,
	// reroutes, members) from the goroutine that reads that node's
	// subscription. It must not block for long.
	OnEvent func(supplier string, ev api.Event)
	// Logger receives the nodes' logs. Default: discard.
	Logger *slog.Logger
}

// Cluster is a mesh of simulated suppliers, each a full gpumesh node
// (node.Start) on one in-memory network (mesh.SimNetwork). Jobs run as
// real processes. Suppliers leave (gracefully or by crashing) and come
// back as new peers. Its methods are safe for concurrent use; Close stops
// every node and waits for every goroutine.
//
// Every node is connected to the gateway and to every coordinator when it
// starts. mesh.SimNetwork makes a link between two peers only when
// memberlist's transport first dials one from the other; a market message
// (gossip.Direct) to a peer memberlist has not contacted yet fails with
// "cannot connect". Runners and suppliers talk to coordinators, the
// gateway to everyone (logs, submissions), so those links are made up
// front.
type Cluster struct {
	cfg ClusterConfig
	net *mesh.SimNetwork
	cat *device.Catalog

	mu      sync.Mutex
	members map[string]*Member
	order   []string // supplier names in plan order
	closed  bool
	wg      sync.WaitGroup // event readers
}

// Member is one supplier of a Cluster and its node while it is up.
type Member struct {
	Supplier Supplier
	// Cards are the supplier's simulated cards.
	Cards []device.Card
	// Node is the running node; nil while the supplier is down.
	Node *node.Node
	// Starts counts how many times the supplier's node started.
	Starts int
	// UpSince is when the node last started; DownSince when it last went.
	UpSince, DownSince time.Time
}

// ErrClusterClosed is returned by calls on a closed cluster.
var ErrClusterClosed = errors.New("sim: cluster closed")

// StartError is StartCluster's error: what stopped the start (ctx's error
// when it ended), and how many of the plan's nodes were up then (they were
// stopped before StartCluster returned).
type StartError struct {
	Up, Total int
	Err       error
}

func (e *StartError) Error() string { return e.Err.Error() }

// Unwrap returns what stopped the start.
func (e *StartError) Unwrap() error { return e.Err }

// StartCluster starts the gateway, then the other suppliers joining
// through it, StartWorkers at a time. It returns once every node is up (not
// once the mesh has converged: see WaitFormed). On error (ctx ending
// included: no node starts after that) every node started is stopped and
// the error is a *StartError.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if len(cfg.Suppliers) == 0 || cfg.Dir == "" {
		return nil, errors.New("sim: a cluster needs suppliers and a directory")
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.StartWorkers <= 0 {
		cfg.StartWorkers = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		cfg:     cfg,
		net:     mesh.NewSimNetwork(mesh.SimOptions{Latency: cfg.Latency, Logger: cfg.Logger}),
		cat:     device.DefaultCatalog(),
		members: map[string]*Member{},
	}
	for _, s := range cfg.Suppliers {
		if _, dup := c.members[s.Name]; dup {
			c.net.Close()
			return nil, fmt.Errorf("sim: supplier %s twice in the plan", s.Name)
		}
		sim, err := device.NewSim(s.SimSpec(), s.Name, c.cat)
		if err != nil {
			c.net.Close()
			return nil, fmt.Errorf("sim: supplier %s: %w", s.Name, err)
		}
		cards, _ := sim.Cards(context.Background())
		c.members[s.Name] = &Member{Supplier: s, Cards: cards}
		c.order = append(c.order, s.Name)
	}
	total := len(c.order)
	var up atomic.Int64
	start := func(name string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.Start(ctx, name); err != nil {
			return err
		}
		n := int(up.Add(1))
		if cfg.OnStarted != nil {
			cfg.OnStarted(n, total)
		}
		return nil
	}
	fail := func(err error) (*Cluster, error) {
		e := &StartError{Up: len(c.Up()), Total: total, Err: err}
		if ctx.Err() != nil {
			c.Abort() // interrupted: be back at once, not after every node's leave
		} else {
			c.Close()
		}
		return nil, e
	}
	if err := start(c.order[0]); err != nil {
		return fail(err)
	}
	sem := make(chan struct{}, cfg.StartWorkers)
	errs := make(chan error, len(c.order))
	var wg sync.WaitGroup
	for _, name := range c.order[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs <- ctx.Err()
				return
			}
			defer func() { <-sem }()
			errs <- start(name)
		}()
	}
	wg.Wait()
	close(errs)
	var first error
	for err := range errs {
		if err != nil && (first == nil || errors.Is(first, ctx.Err())) {
			first = err // a node's own failure says more than ctx's end
		}
	}
	if first != nil {
		return fail(first)
	}
	return c, nil
}

// Start starts a supplier's node and joins it to the mesh through the
// gateway. A supplier that comes back is a new peer (a fresh identity and
// data directory: a PC reinstalled, or a café seat taken by another
// machine). A supplier already up is left alone.
func (c *Cluster) Start(ctx context.Context, name string) error {
	c.mu.Lock()
	m, ok := c.members[name]
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClusterClosed
	case !ok:
		c.mu.Unlock()
		return fmt.Errorf("sim: no supplier %s", name)
	case m.Node != nil:
		c.mu.Unlock()
		return nil
	}
	gw := c.members[c.order[0]].Node
	c.mu.Unlock()

	s := m.Supplier
	sim, err := device.NewSim(s.SimSpec(), s.Name, c.cat)
	if err != nil {
		return err
	}
	cfg := node.Config{
		DataDir:          filepath.Join(c.cfg.Dir, fmt.Sprintf("%s.%d", s.Name, m.Starts+1)),
		Sim:              c.net,
		Devices:          []device.Backend{sim},
		Region:           s.Name,
		Prices:           map[string]float64{},
		Availability:     market.Availability{MTBF: market.Duration(time.Duration(float64(s.Churn.MTBF) / c.cfg.TimeScale))},
		Coordinator:      node.CoordinatorNever,
		CoordinatorAfter: time.Millisecond,
		Executor:         executor.Config{Isolation: executor.IsolationProcess, Grace: 2 * time.Second},
		Market:           c.cfg.Market,
		TickInterval:     c.cfg.TickInterval,
		Logger:           c.cfg.Logger.With("supplier", s.Name),
		Owner:            c.cfg.Owner,
	}
	if c.cfg.Profile != nil {
		cfg.Mesh.Profile = *c.cfg.Profile
	}
	if s.Churn.MTBF <= 0 {
		cfg.Availability = market.Availability{}
	}
	if s.Cards > 0 {
		cfg.Prices[s.Model] = s.PriceCNY
	}
	if s.Coordinates {
		cfg.Coordinator = node.CoordinatorAuto
	}
	if gw != nil {
		cfg.Mesh.Join = gw.Mesh().Addrs()
	} else if name == c.order[0] {
		cfg.API, cfg.Dashboard = c.cfg.API, c.cfg.Dashboard
	} else {
		return fmt.Errorf("sim: the gateway %s is down: %s cannot join", c.order[0], name)
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sim: supplier %s: %w", s.Name, err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		n.Close()
		return ErrClusterClosed
	}
	m.Node, m.UpSince = n, time.Now()
	m.Starts++
	var peers []peer.ID
	for i, other := range c.order {
		o := c.members[other]
		if o == m || o.Node == nil {
			continue
		}
		if i == 0 || o.Supplier.Coordinates || s.Coordinates {
			peers = append(peers, o.Node.ID())
		}
	}
	if c.cfg.OnEvent != nil {
		ch, _ := n.Subscribe() // ends when the node closes
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for ev := range ch {
				c.cfg.OnEvent(name, ev)
			}
		}()
	}
	c.mu.Unlock()
	for _, p := range peers {
		if err := c.net.Connect(n.ID(), p); err != nil {
			c.cfg.Logger.Debug("sim: cannot connect", "supplier", name, "peer", p, "err", err)
		}
	}
	return nil
}

// take marks a supplier down and returns its node, or an error if it is not
// up. The gateway never goes: it serves the API and every join.
func (c *Cluster) take(name string) (*node.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[name]
	switch {
	case c.closed:
		return nil, ErrClusterClosed
	case !ok:
		return nil, fmt.Errorf("sim: no supplier %s", name)
	case name == c.order[0]:
		return nil, fmt.Errorf("sim: the gateway %s stays up", name)
	case m.Node == nil:
		return nil, fmt.Errorf("sim: supplier %s is down already", name)
	}
	n := m.Node
	m.Node, m.DownSince = nil, time.Now()
	return n, nil
}

// Leave stops a supplier gracefully: its peers see it leave, its jobs'
// processes stop. It returns once the node is gone.
func (c *Cluster) Leave(name string) error {
	n, err := c.take(name)
	if err != nil {
		return err
	}
	return n.Close()
}

// Crash stops a supplier as a power cut would: its links vanish first, so
// peers must detect the loss, then the node and its processes stop.
func (c *Cluster) Crash(name string) error {
	n, err := c.take(name)
	if err != nil {
		return err
	}
	if err := c.net.Crash(n.ID()); err != nil {
		return err
	}
	return n.Close()
}

// Silence makes a supplier go quiet without closing a connection: every
// message to or from it is delayed by an hour, as a host that hangs or a
// network that black-holes its packets. The node keeps running (its
// runners fence themselves when their leases go unanswered) until Leave.
func (c *Cluster) Silence(name string) error {
	c.mu.Lock()
	m, ok := c.members[name]
	if !ok || m.Node == nil || c.closed {
		c.mu.Unlock()
		return fmt.Errorf("sim: supplier %s is not up", name)
	}
	id := m.Node.ID()
	var others []peer.ID
	for _, o := range c.members {
		if o.Node != nil && o != m {
			others = append(others, o.Node.ID())
		}
	}
	c.mu.Unlock()
	for _, o := range others {
		c.net.SetLatency(id, o, time.Hour)
	}
	return nil
}

// Gateway is the first supplier's node (never down while the cluster
// runs).
func (c *Cluster) Gateway() *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[c.order[0]].Node
}

// Members returns a copy of every member, in plan order.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Member, 0, len(c.order))
	for _, name := range c.order {
		out = append(out, *c.members[name])
	}
	return out
}

// Member returns a copy of one member.
func (c *Cluster) Member(name string) (Member, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[name]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// Up returns the nodes that are up, in plan order.
func (c *Cluster) Up() []*node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node.Node
	for _, name := range c.order {
		if n := c.members[name].Node; n != nil {
			out = append(out, n)
		}
	}
	return out
}

// Formation says how far the mesh has formed, as the gateway sees it.
type Formation struct {
	Up, Members int // nodes up; members alive in the gateway's view
	// Coordinating counts the suppliers up that coordinate; Coordinators
	// the members the gateway sees offering to.
	Coordinating, Coordinators int
	Cards, Book                int // cards of the nodes up; cards in the gateway's book (its own included)
}

// Formed reports the gateway's view now.
func (c *Cluster) Formed() Formation {
	c.mu.Lock()
	var f Formation
	var gw *node.Node
	for i, name := range c.order {
		m := c.members[name]
		if m.Node == nil {
			continue
		}
		f.Up++
		f.Cards += len(m.Cards)
		if m.Supplier.Coordinates {
			f.Coordinating++
		}
		if i == 0 {
			gw = m.Node
			f.Book += len(m.Cards)
		}
	}
	c.mu.Unlock()
	if gw != nil {
		for _, m := range gw.Mesh().Members() {
			if m.State == mesh.StateAlive {
				f.Members++
				if m.Coordinator {
					f.Coordinators++
				}
			}
		}
		cards, _ := gw.BookCards()
		f.Book += cards
	}
	return f
}

// WaitFormed waits until the gateway sees at least frac of the nodes up as
// members, frac of the coordinating ones offering to coordinate, and frac
// of their cards in its book, calling progress (when not nil) every poll. It returns the last formation and ctx's error if ctx
// ends first.
func (c *Cluster) WaitFormed(ctx context.Context, frac float64, progress func(Formation)) (Formation, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		f := c.Formed()
		if progress != nil {
			progress(f)
		}
		if f.Ready(frac) {
			return f, nil
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-tick.C:
		}
	}
}

// Net is the cluster's simulated network.
func (c *Cluster) Net() *mesh.SimNetwork { return c.net }

// Close stops every node (in parallel, gracefully), then the network, and
// waits for every goroutine the cluster started.
func (c *Cluster) Close() error { return c.close(false) }

// Abort stops every node as a power cut would (no graceful leave, which
// takes up to the mesh's LeaveTimeout a node), then the network, and waits
// for every goroutine the cluster started: what an interrupted run needs,
// in about a second however many nodes are up.
func (c *Cluster) Abort() error { return c.close(true) }

func (c *Cluster) close(abort bool) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	var nodes []*node.Node
	for _, name := range slices.Backward(c.order) {
		if m := c.members[name]; m.Node != nil {
			nodes = append(nodes, m.Node)
			m.Node = nil
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	if abort {
		sem = make(chan struct{}, 256)
	}
	for _, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if abort {
				n.Halt() // no graceful leave
			} else {
				n.Close()
			}
		}()
	}
	wg.Wait()
	err := c.net.Close()
	c.wg.Wait()
	return err
}

// Ready reports whether the gateway sees at least frac of the members,
// coordinators and cards up.
func (f Formation) Ready(frac float64) bool {
	return float64(f.Members) >= frac*float64(f.Up) && float64(f.Coordinators) >= frac*float64(f.Coordinating) &&
		float64(f.Book) >= frac*float64(f.Cards)
}
