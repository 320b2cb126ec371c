package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/blob"
	"github.com/gpumesh/gpumesh/node/blob/transfer"
	"github.com/gpumesh/gpumesh/node/cardedit"
	"github.com/gpumesh/gpumesh/node/datadir"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/fence"
	"github.com/gpumesh/gpumesh/node/gangnet"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/jobstate"
	"github.com/gpumesh/gpumesh/node/layers"
	"github.com/gpumesh/gpumesh/node/stages"
	"github.com/gpumesh/gpumesh/node/store"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Node is a running gpumesh daemon. It owns every goroutine it starts: the
// driver that owns the market, the workers that send its messages, the
// pumps of membership and health events, the watchers of running attempts,
// and the API server. Close stops them all and returns after they exit.
type Node struct {
	cfg Config
	log *slog.Logger
	id  peer.ID
	// self is id.String(), kept: the driver and the replication paths
	// compare records' coordinators with it many times a job, and each
	// String is a base58 encoding.
	self string

	ownerKey owner.Key // signs in-process submissions and calls (tenants.go)
	// versions records peers whose messages are of a newer wire version
	// (versions.go); status warns of them.
	versions *gossip.Versions
	// publishedStates are the card states last handed to the advertiser,
	// by card; settleAt, when set, is when a held-back reservation change
	// is published (publishSupply); reserveSettle is Config.ReserveSettle
	// or its default. Driver only.
	publishedStates map[string]gossip.CardState
	settleAt        time.Time
	reserveSettle   time.Duration

	// The membership metadata last sent, when, and whether a change of
	// its free count is held back (updateMeta); driver only.
	metaSent   mesh.Meta
	metaSentAt time.Time
	metaHeld   bool

	store      *store.Store
	writeFault atomic.Pointer[error] // the last store write's error; nil after one succeeds
	// heldMu orders the records of jobs coordinated elsewhere that this
	// node takes into its view with their writes to the store (replicas,
	// records learnt from peers): see storeReplicas.
	heldMu  sync.Mutex
	devices *device.Manager
	mesh    *mesh.Mesh
	gossip  *gossip.Gossip
	direct  *gossip.Direct
	adv     *gossip.Advertiser
	exec    *executor.Executor
	server  *api.Server
	tun     *tunnels         // exec, port-forward, services (tunnels.go)
	gang    *gangnet.Service // gangs' private networks (gangnets.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	inputs  chan func()   // run on the driver goroutine
	wake    chan struct{} // one token: pending ads or members changed
	out     *lanes        // market messages on their way, by destination (send.go)
	started time.Time

	// Driver-owned (touched only on the driver goroutine).
	turn      turn       // what this turn decided, for the persister (persister.go)
	persister *persister // writes the turns' decisions, then has them carried out
	mk        *market.Node
	book      *book
	trust     trust               // claims, receipts, probes (trust.go)
	ledger    *ledger             // what this node's cards earned (earnings.go)
	endsSent  map[attemptKey]bool // attempts whose end was published (events.go)
	runs      map[attemptKey]*runSlot
	coordNow  atomic.Bool // this node advertises itself as a coordinator
	standby   atomic.Bool // it advertises that it will: auto mode, not a member for CoordinatorAfter yet
	draining  atomic.Bool // Drain was called: no new work

	// Fed by gossip and mesh callbacks, drained by the driver.
	pendingMu      sync.Mutex
	pendingAds     map[peer.ID]gossip.Ad
	pendingMembers []mesh.Event

	// Read by API goroutines.
	view *jobstate.View
	// decided is this node's own records ahead of the view.
	decided *jobstate.Decided
	events  *hub
	repl    *jobstate.Queue // records waiting to go to their replicas (replica.go)
	gate    *jobstate.Gate  // decisions waiting for their record to reach the replicas (commit.go)
	claims  *claims         // claims granted to would-be coordinators (claim.go)
	fences  *fences         // attempts armed with the fence keeper (fencing.go)
	// lostAfter is the market's LostAfter: the keeper's deadlines count from it.
	lostAfter     time.Duration
	keeper        *fence.Keeper
	adopting      jobstate.Adopting // jobs this node is claiming now (claim.go)
	stages        *stages.Clock     // where submitted jobs' time goes (node/stages)
	admitted      admission         // submissions coordinated now (admission.go)
	ship          *shipper
	blobs         *blob.Store                 // the content store (blobs.go)
	images        *image.Cache                // images pulled into it (images.go)
	cardEdits     *cardedit.Editor            // how cards enter images (images.go)
	cardPathCache cardPathCache               // what cardEdits says of the node's cards, for status
	layerAuth     atomic.Pointer[image.Cache] // images, for blobAuth (set after the transfers start)
	layerPeers    *layers.Service             // layers shared with peers (images.go)
	xfer          *transfer.Service           // its transfers to and from peers
	pushes        pushes                      // checkpoints this node agreed to hold
	grants        grants                      // reads allowed for an owner's download
	sizes         manifestSizes               // of payloads counted against owners' quotas (payloads.go)
	uploads       uploads                     // chunk sizes of the payloads being uploaded
	secrets       pendingSecrets              // secrets given to this node that no job names yet (secrets.go)
	obs           *observer                   // driver-owned, but for its atomic status
	resume        []market.JobRecord          // own jobs to adopt again once peers can be asked
	// roles are the members' coordinator roles as last seen (driver-owned):
	// a change moves records between groups (see coordinators).
	roles map[peer.ID]memberRole

	closeOnce sync.Once
}

// attemptKey names one attempt of one share.
type attemptKey struct {
	job   string
	share int
	epoch uint64
}

// Start opens the node's state, discovers its cards, joins the mesh and
// starts serving. It returns once the node is up; ctx bounds start-up only.
// On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Nothing is written before every check that can fail for the
	// user's input or another process in the way has passed: a start
	// refused leaves the data dir as it was.
	if err := datadir.Check(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n := &Node{
		cfg:    cfg,
		log:    cfg.Logger,
		inputs: make(chan func(), 4096),
		wake:   make(chan struct{}, 1),

		runs:       map[attemptKey]*runSlot{},
		endsSent:   map[attemptKey]bool{},
		pendingAds: map[peer.ID]gossip.Ad{},
		roles:      map[peer.ID]memberRole{},
		view:       jobstate.NewView(),
		decided:    jobstate.NewDecided(),
		repl:       jobstate.NewQueue(),
		gate:       jobstate.NewGate(),
		claims:     newClaims(),
		ship:       newShipper(),
		events:     newHub(),
		started:    time.Now(),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.persister = newPersister(n)
	n.out = newLanes(n.ctx, &n.wg, cfg.SendWorkers, n.deliver, func(to peer.ID, count int, err error) {
		n.log.Debug("market messages not delivered", "to", to, "count", count, "err", err)
	})
	var closers []func()
	up := false
	defer func() {
		if !up {
			n.cancel()
			n.wg.Wait()
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	// The API's address is checked first: a bad one fails before anything
	// else starts.
	var err error
	var apiLn net.Listener
	if cfg.API != nil {
		if apiLn, err = api.Listen(*cfg.API); err != nil {
			return nil, err
		}
		closers = append(closers, func() { apiLn.Close() })
	}
	var ingressLn net.Listener
	if cfg.Ingress != "" {
		if ingressLn, err = listenIngress(cfg.Ingress); err != nil {
			return nil, err
		}
		closers = append(closers, func() { ingressLn.Close() })
	}
	if cfg.Sim == nil {
		if err := cfg.Mesh.CheckPorts(); err != nil {
			return nil, err
		}
	}
	if n.devices, err = device.Open(ctx, device.Config{Backends: cfg.Devices, Logger: n.log}); err != nil {
		return nil, fmt.Errorf("node: cards: %w", err)
	}
	closers = append(closers, func() { n.devices.Close() })
	cards := n.devices.Cards()

	// The data dir's files.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	if n.ownerKey, err = nodeOwnerKey(cfg); err != nil {
		return nil, err
	}
	if n.store, err = store.Open(filepath.Join(cfg.DataDir, "state.db")); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	closers = append(closers, func() { n.store.Close() })
	if err := n.loadClaims(); err != nil {
		return nil, fmt.Errorf("node: reading claims: %w", err)
	}

	mcfg := cfg.Mesh
	n.standby.Store(cfg.Coordinator == CoordinatorAuto)
	healthy, models := n.devices.Healthy()
	mcfg.Meta = metaOf(cfg.Region, healthy, models, -1, false, n.standby.Load())
	if cfg.Sim != nil && mcfg.Identity == nil {
		// A simulated node keeps its identity across restarts too.
		if mcfg.Identity, _, err = mesh.LoadIdentity(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if cfg.Sim != nil {
		n.mesh, err = cfg.Sim.AddNode(mcfg)
	} else {
		n.mesh, err = mesh.New(mcfg)
	}
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	closers = append(closers, func() { n.mesh.Close() })
	n.id = n.mesh.ID()
	n.self = n.id.String()
	n.log = n.log.With("node", n.id.ShortString())

	n.versions = gossip.NewVersions()
	n.gossip, err = gossip.New(n.mesh.Host(), gossip.Config{
		Network:     n.mesh.Network(),
		Versions:    n.versions,
		Logger:      n.log,
		OnAd:        n.onAd,
		OnBroadcast: n.onBroadcast,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	closers = append(closers, func() { n.gossip.Close() })
	if err = n.newMetrics(); err != nil {
		return nil, err
	}
	n.stages = stages.New(n.obs.m, n.log)

	if err := n.openBlobs(); err != nil {
		return nil, err
	}
	closers = append(closers, n.closeBlobs)

	n.direct, err = gossip.NewDirect(n.mesh.Host(), gossip.DirectConfig{
		Network:   n.mesh.Network(),
		Versions:  n.versions,
		Logger:    n.log,
		OnMessage: n.onDirect,
		OnCall:    n.serveCall,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	closers = append(closers, func() { n.direct.Close() })

	ecfg := cfg.Executor
	if ecfg.Root == "" {
		ecfg.Root = filepath.Join(cfg.DataDir, "attempts")
	}
	if ecfg.Isolation == "" {
		ecfg.Isolation = executor.IsolationAuto
	}
	ecfg.HideDirs = append(ecfg.HideDirs, cfg.DataDir)
	// A job on egress reaches no address of this node, and not these
	// ports on any address (another local address, a NAT in front).
	ecfg.BlockPorts = append(ecfg.BlockPorts, nodePorts(apiLn, n.mesh.Host().Network().ListenAddresses())...)
	if ecfg.Logger == nil {
		ecfg.Logger = n.log
	}
	if n.exec, err = executor.New(ecfg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	closers = append(closers, func() { n.exec.Close() })
	ccfg := cfg.CardEdits
	if ccfg.DevDir == "" {
		ccfg.DevDir = ecfg.DevDir
	}
	if n.cardEdits, err = cardedit.New(ccfg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := n.openImages(); err != nil {
		return nil, err
	}
	closers = append(closers, n.closeImages)
	n.fences = newFences(nil)
	if len(cfg.FenceCommand) > 0 {
		k, err := fence.Start(cfg.FenceCommand, n.log)
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			n.log.Warn("no fence keeper: the attempts of a frozen or killed node run on until it stops them", "err", err)
		} else if err == nil {
			n.keeper = k
			n.fences = newFences(k)
			closers = append(closers, func() { k.Close() })
		}
	}

	n.cfg.Market = n.trustMarket(n.cfg.Market)
	if err := n.startMarket(cards); err != nil {
		return nil, err
	}
	n.wireTrust()
	if err := n.startTunnels(ingressLn); err != nil {
		return nil, err
	}
	closers = append(closers, func() { n.tun.close() })
	if err := n.startGangnet(); err != nil {
		return nil, err
	}
	closers = append(closers, func() { n.gang.Close() })

	n.adv, err = gossip.NewAdvertiser(n.gossip, n.supply(), gossip.AdvertiserConfig{
		Logger:    n.log,
		Republish: n.gossip.MeshReady(),
		PeerCount: func() int { return n.gossip.Book().Len(time.Now()) },
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	closers = append(closers, func() { n.adv.Close() })

	sub := n.mesh.Subscribe(1024)
	if n.keeper != nil {
		n.wg.Add(1)
		go n.watchFenced(n.keeper)
	}
	n.wg.Add(11)
	go n.persister.run(n.ctx, &n.wg)
	go n.blobJanitor()
	go n.attemptsJanitor()
	go n.jobsJanitor()
	go n.replicateLoop()
	go n.auditLoop()
	go n.checkpointLoop()
	go n.resumeOwn(n.resume)
	go n.pumpMembers(sub)
	go n.pumpHealth()
	go n.drive()

	if apiLn != nil {
		n.serveAPI(apiLn, *cfg.API)
	}
	up = true
	n.log.Info("node started", "peer", n.id, "cards", len(cards), "addrs", fmt.Sprint(n.mesh.Addrs()),
		"job_memory_cap", n.cfg.Policy.MaxMemoryBytes, "job_pids_cap", n.cfg.Policy.MaxPids, "job_cpu_weight_cap", n.cfg.Policy.MaxCPUWeight)
	return n, nil
}

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.id }

// Mesh is the node's membership layer.
func (n *Node) Mesh() *mesh.Mesh { return n.mesh }

// APIAddr is the address the API listens on, "" when it does not.
func (n *Node) APIAddr() string {
	if n.server == nil {
		return ""
	}
	return n.server.Addr()
}

// Close leaves the mesh gracefully (peers see "left"), stops the attempts
// this node runs, and returns after every goroutine has exited.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.server != nil {
			n.server.Close()
		}
		n.tun.close()  // exec sessions hang up; tunnels and probes end
		n.gang.Close() // gangs' connections are cut
		n.cancel()
		n.exec.Close() // the attempts' watchers return once their processes are gone
		n.wg.Wait()
		if n.keeper != nil {
			n.keeper.Close() // after the attempts stopped: it kills nothing
		}
		n.adv.Close()
		n.direct.Close()
		n.closeImages()
		n.closeBlobs()
		n.gossip.Close()
		n.mesh.Close()
		n.devices.Close()
		n.events.close()
		n.store.Close()
		n.log.Info("node stopped")
	})
	return nil
}

// Halt stops the node as Close does, but without leaving the mesh
// gracefully (each leave waits up to the mesh's LeaveTimeout): its peers
// find it dead, as after a crash. For a process being interrupted.
func (n *Node) Halt() error {
	n.mesh.Halt()
	return n.Close()
}

// do runs f on the driver goroutine and waits for it, or for ctx or the
// node to end. Either f ran to its end before do returns nil, or it never
// runs and do returns the error: a caller that gives up may read what f
// would have written (and the request it answered with an error is not
// carried out later behind its back).
func (n *Node) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	const (
		queued = iota
		running
		abandoned
	)
	var state atomic.Int32
	input := func() {
		if state.CompareAndSwap(queued, running) {
			f()
			close(done)
		}
	}
	select {
	case n.inputs <- input:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.ctx.Done():
		return ErrClosed
	}
	var err error
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-n.ctx.Done():
		err = ErrClosed
	}
	if state.CompareAndSwap(queued, abandoned) {
		return err
	}
	<-done // f is running on the driver: it ends
	return nil
}

// doDurable runs f on the driver goroutine, then after on the driver once
// the turn that ran f has persisted (and sent) what it decided, and
// returns after that: the turn's other inputs are written in the same
// transaction. It returns do's error when f never ran, and ErrClosed when
// the node closes before the turn ends.
func (n *Node) doDurable(ctx context.Context, f, after func()) error {
	persisted := make(chan struct{})
	err := n.do(ctx, func() {
		f()
		n.afterTurn(func() {
			after()
			close(persisted)
		})
	})
	if err != nil {
		return err
	}
	// f ran: the turn it ran in ends without waiting for anything else.
	select {
	case <-persisted:
		return nil
	case <-n.ctx.Done():
		return ErrClosed
	}
}

// post queues f for the driver without waiting. It reports false when the
// queue is full or the node is closing: the input is dropped, which the
// market tolerates for messages (they are retried) and which callers of
// post otherwise avoid.
func (n *Node) post(f func()) bool {
	select {
	case n.inputs <- f:
		return true
	case <-n.ctx.Done():
		return false
	default:
		return false
	}
}

// ErrClosed is returned by calls on a closed node.
var ErrClosed = errors.New("node: closed")
