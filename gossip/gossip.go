package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Config configures a Gossip. Network is required; every other field has
// the default its comment states.
type Config struct {
	// Network names the mesh; it goes into every topic name (TopicsFor).
	Network string
	// Book receives the ads heard on the capacity topic. Default: NewBook().
	Book *Book
	// Clock supplies the time for validation and the Book. Default:
	// SystemClock(). (Gossipsub's own heartbeat and peer scoring run on the
	// system clock whatever this is.)
	Clock Clock
	// Versions, if set, records the peers whose messages are of a newer
	// wire version than this node reads.
	Versions *Versions
	// Logger gets debug lines for refused messages and errors of the
	// delivery loop. Default: discard.
	Logger *slog.Logger
	// OnAd, if set, is called from the delivery goroutine after an ad has
	// been folded into the Book. It must not block; node uses it to wake the
	// market. Default: nil.
	OnAd func(Ad)
	// ScoreInspectPeriod is how often PeerScores is refreshed from
	// gossipsub. Default: 1 s.
	ScoreInspectPeriod time.Duration
	// ValidateQueueSize bounds the messages waiting for validation before
	// gossipsub drops new ones (counted as "throttled"). Default: 4096, room
	// for every node of a 1000-node mesh announcing itself at once.
	ValidateQueueSize int
	// SyncPeers is how many peers a node fetches the Book from (SyncFrom)
	// as they join its capacity topic: enough to learn the mesh's capacity
	// at once instead of waiting for slow refreshes. Default: 3; -1 turns
	// automatic syncs off.
	SyncPeers int
	// SyncTimeout bounds one book sync, either side. Default: 10 s.
	SyncTimeout time.Duration
	// OnBroadcast, if set, makes the node join the bid-request topic and
	// receive every checked message published there, its own included
	// (Broadcast). It is called from a delivery goroutine and must not
	// block. Default: nil (the topic is not joined).
	OnBroadcast func(Message)
	// PubSubOptions are appended to gossip's own gossipsub options; tests and
	// simulations use them to tune gossipsub (WithGossipSubParams). Default:
	// none.
	PubSubOptions []pubsub.Option
}

func (c Config) withDefaults() (Config, error) {
	if err := ValidateNetwork(c.Network); err != nil {
		return c, err
	}
	if c.Book == nil {
		c.Book = NewBook()
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ScoreInspectPeriod < 0 || c.ValidateQueueSize < 0 {
		return c, fmt.Errorf("gossip: negative ScoreInspectPeriod %s or ValidateQueueSize %d", c.ScoreInspectPeriod, c.ValidateQueueSize)
	}
	if c.ScoreInspectPeriod == 0 {
		c.ScoreInspectPeriod = time.Second
	}
	if c.ValidateQueueSize == 0 {
		c.ValidateQueueSize = 4096
	}
	switch {
	case c.SyncPeers == 0:
		c.SyncPeers = 3
	case c.SyncPeers < -1:
		return c, fmt.Errorf("gossip: SyncPeers %d: want -1 (off), 0 (default) or more", c.SyncPeers)
	case c.SyncPeers == -1:
		c.SyncPeers = 0
	}
	if c.SyncTimeout < 0 {
		return c, fmt.Errorf("gossip: negative SyncTimeout %s", c.SyncTimeout)
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = 10 * time.Second
	}
	return c, nil
}

// ErrClosed is returned by a Gossip's methods after Close.
var ErrClosed = errors.New("gossip: closed")

// Gossip runs gpumesh's pubsub on a libp2p host: gossipsub with StrictSign,
// peer scoring, a message size limit and a validator on every topic. It
// folds the capacity ads it hears, its own included, into a Book.
//
// It also serves and makes book syncs (SyncFrom), so that a joining node
// learns its peers' capacity at once.
//
// Gossip owns two goroutines (the delivery loop and the sync loop), the
// gossipsub instance and the book-sync handlers in flight; Close stops them
// all and waits.
type Gossip struct {
	cfg    Config
	host   host.Host
	self   peer.ID
	topics Topics
	log    *slog.Logger

	ctx      context.Context
	cancel   context.CancelFunc
	ps       *pubsub.PubSub
	capacity *pubsub.Topic
	sub      *pubsub.Subscription
	counters *counters
	done     chan struct{}
	syncDone chan struct{}

	repairs    chan peer.ID // Repair's queue
	repairDone chan struct{}

	broadcast *pubsub.Topic        // nil unless Config.OnBroadcast is set
	bsub      *pubsub.Subscription // its subscription
	bdone     chan struct{}
	bseq      atomic.Uint64

	serveMu    sync.Mutex
	closing    bool
	serving    sync.WaitGroup
	served     map[peer.ID]time.Time // last sync served to each peer
	serveSlots chan struct{}

	scoresMu  sync.Mutex
	scores    map[peer.ID]float64
	scoresGen uint64 // inspections so far

	closeOnce sync.Once
}

// New starts gossip on h, joins the network's capacity topic and subscribes
// to it. (The bid-request topic is named in Topics but not joined until
// bid requests exist.) The Gossip stays up until Close.
//
// Call New before h connects to its peers: peers connected earlier learn
// that h speaks gossipsub only from an identify push, which go-libp2p's
// mocknet was seen to lose.
func New(h host.Host, cfg Config) (*Gossip, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	topics, _ := TopicsFor(cfg.Network) // the network was validated above
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gossip{
		cfg: cfg, host: h, self: h.ID(), topics: topics,
		log:      cfg.Logger.With("component", "gossip", "network", cfg.Network),
		ctx:      ctx,
		cancel:   cancel,
		counters: newCounters(h.ID(), topics.Capacity, topics.BidRequest),
		done:     make(chan struct{}),
		bdone:    make(chan struct{}),
		syncDone: make(chan struct{}),
		scores:   map[peer.ID]float64{},

		repairs:    make(chan peer.ID, repairQueue),
		repairDone: make(chan struct{}),
		served:     map[peer.ID]time.Time{},

		serveSlots: make(chan struct{}, maxSyncServes),
	}
	opts := []pubsub.Option{
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMessageIdFn(messageID),
		pubsub.WithMaxMessageSize(MaxPubSubMessageSize),
		pubsub.WithPeerScore(scoreParams(topics), scoreThresholds()),
		pubsub.WithPeerScoreInspect(pubsub.PeerScoreInspectFn(g.setScores), cfg.ScoreInspectPeriod),
		pubsub.WithRawTracer(tracer{g.counters}),
		pubsub.WithValidateQueueSize(cfg.ValidateQueueSize),
		pubsub.WithLogger(pubsubLogger(g.log, h)),
	}
	opts = append(opts, cfg.PubSubOptions...)
	if g.ps, err = pubsub.NewGossipSub(ctx, h, opts...); err != nil {
		cancel()
		return nil, fmt.Errorf("gossip: start gossipsub: %w", err)
	}
	if err := g.join(); err != nil {
		cancel()
		return nil, err
	}
	events, err := g.capacity.EventHandler()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gossip: peer events of %s: %w", topics.Capacity, err)
	}
	if err := g.joinBroadcast(); err != nil {
		cancel()
		return nil, err
	}
	h.SetStreamHandler(topics.BookSync, g.serveSync)
	go g.deliver()
	go g.deliverBroadcasts()
	go g.syncLoop(events)
	go g.repairLoop()
	return g, nil
}

func (g *Gossip) join() error {
	// Validators are cheap (a decode, a few comparisons, a read-locked map
	// lookup) and never wait on anything, so they run inline in gossipsub's
	// validation workers.
	if err := g.ps.RegisterTopicValidator(g.topics.Capacity, pubsub.ValidatorEx(g.validateCapacity), pubsub.WithValidatorInline(true)); err != nil {
		return fmt.Errorf("gossip: validator for %s: %w", g.topics.Capacity, err)
	}
	var err error
	if g.capacity, err = g.ps.Join(g.topics.Capacity); err != nil {
		return fmt.Errorf("gossip: join %s: %w", g.topics.Capacity, err)
	}
	if g.sub, err = g.capacity.Subscribe(pubsub.WithBufferSize(1024)); err != nil {
		return fmt.Errorf("gossip: subscribe %s: %w", g.topics.Capacity, err)
	}
	return nil
}

// deliver folds accepted capacity ads into the Book until Close.
func (g *Gossip) deliver() {
	defer close(g.done)
	for {
		msg, err := g.sub.Next(g.ctx)
		if err != nil {
			return // cancelled by Close
		}
		ad, ok := msg.ValidatorData.(Ad)
		if !ok {
			g.log.Error("capacity message without a validated ad", "from", msg.GetFrom())
			continue
		}
		// The validator checked the seq, but a newer ad from the same peer
		// may have been applied since: Apply decides again. The Book keeps
		// the signed message to serve book syncs.
		signed, err := proto.Marshal(msg.Message)
		if err != nil {
			g.log.Error("re-encode a validated message", "err", err)
			continue
		}
		if err := g.cfg.Book.applySigned(ad, signed, g.cfg.Clock.Now()); err != nil {
			g.log.Debug("ad not applied", "peer", ad.Peer, "seq", ad.Seq, "err", err)
			continue
		}
		if g.cfg.OnAd != nil {
			g.cfg.OnAd(ad.clone())
		}
	}
}

// PublishAd publishes ad, authored by this node, on the capacity topic. It
// sets ad.Peer to this node and encodes it; the ad goes
// through the same validator as peers' ads, so an ad that peers would refuse
// (bad fields, a seq not above the last one published) is refused here with
// a *MessageError. It folds into this node's own Book like any other.
func (g *Gossip) PublishAd(ctx context.Context, ad Ad) error {
	if g.ctx.Err() != nil {
		return ErrClosed
	}
	ad.Peer = g.self
	data, err := EncodeAd(ad)
	if err != nil {
		return fmt.Errorf("gossip: publish ad %d: %w", ad.Seq, err)
	}
	if err := g.capacity.Publish(ctx, data); err != nil {
		var verr pubsub.ValidationError
		if errors.As(err, &verr) {
			// Our validator refused our own ad: say why, in its words.
			if _, derr := DecodeAd(data, g.self, g.cfg.Clock.Now()); derr != nil {
				err = derr
			} else if serr := g.cfg.Book.CheckSeq(g.self, ad.Seq, g.cfg.Clock.Now()); serr != nil {
				err = serr
			}
		}
		return fmt.Errorf("gossip: publish ad %d: %w", ad.Seq, err)
	}
	return nil
}

// Book returns the Book this Gossip folds ads into.
func (g *Gossip) Book() *Book { return g.cfg.Book }

// Topics returns the topic names this Gossip joined.
func (g *Gossip) Topics() Topics { return g.topics }

// Stats returns a snapshot of the counters.
func (g *Gossip) Stats() Stats { return g.counters.snapshot() }

// PeerScores returns the gossipsub score of every connected peer, as of the
// last inspection (every Config.ScoreInspectPeriod).
func (g *Gossip) PeerScores() map[peer.ID]float64 {
	g.scoresMu.Lock()
	defer g.scoresMu.Unlock()
	return maps.Clone(g.scores)
}

func (g *Gossip) setScores(s map[peer.ID]float64) {
	g.scoresMu.Lock()
	g.scores = maps.Clone(s)
	g.scoresGen++
	g.scoresMu.Unlock()
}

// MeshReady is closed when this node's capacity mesh first gets a peer.
// Ads published before that reach only direct peers; pass it as
// AdvertiserConfig.Republish so the node's ad is published again then.
func (g *Gossip) MeshReady() <-chan struct{} { return g.counters.meshUp }

// ListPeers returns the peers this node exchanges capacity ads with.
func (g *Gossip) ListPeers() []peer.ID { return g.capacity.ListPeers() }

// Close leaves the topics, stops gossipsub and waits for the delivery loop.
// It does not close the host. Gossipsub's own goroutines end when their
// context is cancelled; gossipsub offers no way to wait for them, but they
// hold nothing of ours.
func (g *Gossip) Close() error {
	g.closeOnce.Do(func() {
		g.serveMu.Lock()
		g.closing = true
		g.serveMu.Unlock()
		g.host.RemoveStreamHandler(g.topics.BookSync)
		g.sub.Cancel() // the delivery loop's Next returns
		g.cancel()     // the sync loop, syncs and serves in flight end
		if g.bsub != nil {
			g.bsub.Cancel()
		}
		<-g.done
		<-g.bdone
		<-g.syncDone
		<-g.repairDone
		g.serving.Wait()
		_ = g.capacity.Close()
		if g.broadcast != nil {
			_ = g.broadcast.Close()
		}
	})
	return nil
}
