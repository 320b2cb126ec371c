package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// CardState is what a card is doing, as its node advertises it.
type CardState uint8

// The card states. Only free cards can be bid on; reserved cards are
// promised under a short lease to a bid in flight; busy cards run a job.
const (
	CardFree CardState = iota
	CardReserved
	CardBusy
)

func (s CardState) String() string {
	switch s {
	case CardFree:
		return "free"
	case CardReserved:
		return "reserved"
	case CardBusy:
		return "busy"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// SupplyCard is one local card and its state.
type SupplyCard struct {
	Card  device.Card
	State CardState
}

// Supply is what a node offers; the Advertiser turns it into ads.
type Supply struct {
	// Region is the supplier's label ("cn-east"); may be empty.
	Region string
	// Cards are the node's cards. Unhealthy ones are left out of the ad.
	Cards []SupplyCard
	// Prices maps model keys to CNY per card-hour. A model without an entry
	// asks the catalog's default (device.Model.DefaultPriceCNY), or for a
	// model the catalog does not know, the same estimate from the card's
	// compute units or memory.
	Prices map[string]float64
	// Since is when this node's session began; uptime is measured from it.
	// Zero means when the Advertiser started.
	Since time.Time
	// MTBF is the node's mean time between failures from its history; 0
	// when it has none.
	MTBF time.Duration
	// Sessions counts the node's sessions in its history (this one included).
	Sessions int
}

// Publisher publishes a node's own ads; *Gossip is one.
type Publisher interface {
	// PublishAd publishes ad as this node's. It may block on the network
	// until ctx ends.
	PublishAd(ctx context.Context, ad Ad) error
}

var _ Publisher = (*Gossip)(nil)

// AdvertiserConfig configures an Advertiser. The zero value is usable: every
// field has the default its comment states.
type AdvertiserConfig struct {
	// Clock drives publishing. Default: SystemClock().
	Clock Clock
	// Logger gets publish failures. Default: discard.
	Logger *slog.Logger
	// Catalog gives default prices. Default: device.DefaultCatalog().
	Catalog *device.Catalog
	// MinInterval is the least time between two publishes: changes within
	// it are coalesced into one ad. Default: 250 ms (at most 4 ads a second).
	// In a larger mesh the interval grows with it (MeshChangeRate).
	MinInterval time.Duration
	// MeshChangeRate is the rate, in ads per second, that changes of supply
	// across the whole mesh should stay under: each node publishes a change
	// at most every PeerCount()/MeshChangeRate, within [MinInterval,
	// MaxChangeInterval]. Default: 20. Why: every ad reaches every node
	// about six times over (gossipsub's mesh degree), so a burst of
	// placements that reserves and frees cards on every node at 4 ads a
	// second each would cost each node of a 40-node mesh about a thousand
	// messages a second, enough to starve a small machine of the CPU its
	// membership probes need; at 20 a second it stays near a hundred.
	// A change a node undoes within the interval (cards reserved for a bid
	// that lost) is never published at all.
	MeshChangeRate float64
	// MaxChangeInterval caps the interval MeshChangeRate gives, so that a
	// change reaches a large mesh within it. Default: 5 s.
	MaxChangeInterval time.Duration
	// MinRefresh and MaxRefresh bound the refresh interval, the time after
	// which an unchanged supply is published again. Default: 10 s and 40 min
	// (so that ExpiryFactor intervals fit in MaxTTL).
	MinRefresh, MaxRefresh time.Duration
	// MeshRefreshRate is the refresh rate, in ads per second, that the whole
	// mesh should stay under: each node refreshes every
	// PeerCount()/MeshRefreshRate, within [MinRefresh, MaxRefresh]. Default:
	// 0.4. Why: every refresh reaches every node, and costs each node about
	// 2 KB in and 2 KB out (six copies from its mesh peers, and the IHAVE
	// gossip about it), so at a fixed interval each node's idle traffic
	// would grow with the mesh (10 s at 1000 nodes: ~40 KB/s); at 0.4 ads a
	// second it stays under 2 KB/s. A small mesh refreshes every 10 s (ads
	// expire after 30 s); 100 nodes every 250 s; 1000 nodes every 40 min.
	// A dead node's ads leave the Book at once through membership
	// (Book.Hide); expiry is the backstop.
	MeshRefreshRate float64
	// PeerCount estimates the mesh's size; node passes the Book's Len.
	// Default: a function returning 1.
	PeerCount func() int
	// ExpiryFactor sets an ad's lifetime to this many refresh intervals, so
	// that an ad survives the loss of all but one of its refreshes. Default:
	// 3. The lifetime is capped at MaxTTL.
	ExpiryFactor int
	// PublishTimeout bounds one publish. Default: 5 s.
	PublishTimeout time.Duration
	// RetryInterval is the wait after a failed publish. Default: 1 s.
	RetryInterval time.Duration
	// Republish, if set, makes the Advertiser publish again (coalesced like
	// a change) whenever it receives, and once when it is closed: node passes
	// Gossip.MeshReady(). Default: nil.
	Republish <-chan struct{}
	// Rand returns uniform numbers in [0, 1) for the refresh jitter.
	// Default: math/rand/v2's Float64.
	Rand func() float64
}

func (c AdvertiserConfig) withDefaults() (AdvertiserConfig, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.MinInterval, 250*time.Millisecond)
	def(&c.MaxChangeInterval, 5*time.Second)
	def(&c.MinRefresh, 10*time.Second)
	def(&c.MaxRefresh, 40*time.Minute)
	def(&c.PublishTimeout, 5*time.Second)
	def(&c.RetryInterval, time.Second)
	if c.MeshRefreshRate == 0 {
		c.MeshRefreshRate = 0.4
	}
	if c.MeshChangeRate == 0 {
		c.MeshChangeRate = 20
	}
	if c.ExpiryFactor == 0 {
		c.ExpiryFactor = 3
	}
	switch {
	case c.MinInterval < 0, c.MinRefresh < 0, c.PublishTimeout < 0, c.RetryInterval < 0:
		return c, errors.New("gossip: advertiser: negative interval")
	case c.MaxRefresh < c.MinRefresh:
		return c, fmt.Errorf("gossip: advertiser: MaxRefresh %s below MinRefresh %s", c.MaxRefresh, c.MinRefresh)
	case !(c.MeshRefreshRate > 0):
		return c, fmt.Errorf("gossip: advertiser: MeshRefreshRate %v: want > 0", c.MeshRefreshRate)
	case !(c.MeshChangeRate > 0):
		return c, fmt.Errorf("gossip: advertiser: MeshChangeRate %v: want > 0", c.MeshChangeRate)
	case c.MaxChangeInterval < c.MinInterval:
		return c, fmt.Errorf("gossip: advertiser: MaxChangeInterval %s below MinInterval %s", c.MaxChangeInterval, c.MinInterval)
	case c.ExpiryFactor < 1:
		return c, fmt.Errorf("gossip: advertiser: ExpiryFactor %d: want >= 1", c.ExpiryFactor)
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Catalog == nil {
		c.Catalog = device.DefaultCatalog()
	}
	if c.PeerCount == nil {
		c.PeerCount = func() int { return 1 }
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c, nil
}

// Advertiser keeps a node's capacity ad published: at once when the supply
// changes (changes within MinInterval coalesce into one ad), and again every
// refresh interval so that peers' copies never expire while the node lives.
// The first refresh comes after a random fraction of the interval, so
// nodes that start together do not refresh together.
//
// The Advertiser owns one goroutine; Close stops it and waits.
type Advertiser struct {
	cfg     AdvertiserConfig
	pub     Publisher
	updates chan update
	ctx     context.Context // cancelled by Close; bounds publishes in flight
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Time
}

type update struct {
	supply Supply
	taken  chan struct{}
}

// NewAdvertiser checks supply, starts the Advertiser and publishes supply
// at once.
func NewAdvertiser(pub Publisher, supply Supply, cfg AdvertiserConfig) (*Advertiser, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Advertiser{
		cfg: cfg, pub: pub,
		updates: make(chan update),
		done:    make(chan struct{}),
		started: cfg.Clock.Now(),
	}
	if _, err := a.build(supply, a.started, 1, cfg.MinRefresh); err != nil {
		return nil, err
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	go a.run(supply)
	return a, nil
}

// Update replaces the supply. It checks the supply first and returns an
// error naming what is wrong (a bad price, region or card) without changing
// anything. It returns once the Advertiser's goroutine has taken the supply
// and scheduled its publish (at once, or MinInterval after the last one),
// which can take as long as a publish in flight; ctx bounds the wait.
func (a *Advertiser) Update(ctx context.Context, s Supply) error {
	if _, err := a.build(s, a.cfg.Clock.Now(), 1, a.cfg.MinRefresh); err != nil {
		return err
	}
	u := update{supply: s, taken: make(chan struct{})}
	select {
	case a.updates <- u:
	case <-a.ctx.Done():
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-u.taken:
		return nil
	case <-a.done:
		return ErrClosed
	}
}

// Close stops the Advertiser and waits for its goroutine. The last ad stays
// in peers' Books until it expires or membership makes them forget it.
func (a *Advertiser) Close() error {
	a.cancel()
	<-a.done
	return nil
}

// run is the Advertiser's goroutine. It holds the supply and one timer, due
// at the next publish: after the change interval when the supply changed,
// after the refresh interval otherwise. A change whose ad would say what
// the last one said (cards reserved and freed again within the interval)
// is not published; the refresh stays where it was.
func (a *Advertiser) run(supply Supply) {
	defer close(a.done)
	ctx := a.ctx
	clock := a.cfg.Clock
	republish := a.cfg.Republish
	var (
		seq        uint64
		last       Ad        // the last ad published
		lastPub    time.Time // zero: never published
		refreshDue time.Time // when the next refresh is due
		force      bool      // publish even an unchanged ad (Republish)
		due        = clock.Now()
		timer      = clock.NewTimer(0)
		firstTime  = true
	)
	defer func() { timer.Stop() }()
	schedule := func(at time.Time) {
		timer.Stop()
		due = at
		timer = clock.NewTimer(at.Sub(clock.Now()))
	}
	// soon schedules a publish as early as the change interval allows.
	soon := func() {
		at := clock.Now()
		if !lastPub.IsZero() {
			at = later(at, lastPub.Add(a.changeInterval()))
		}
		if at.Before(due) {
			schedule(at)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-a.updates:
			supply = u.supply
			soon()
			close(u.taken)
		case _, ok := <-republish:
			if !ok {
				republish = nil // closed: once is enough
			}
			force = true
			soon()
		case <-timer.C():
			now := clock.Now()
			refresh := a.refreshInterval()
			ad, err := a.build(supply, now, max(seq+1, uint64(now.UnixMicro())), refresh)
			if err == nil && !force && !lastPub.IsZero() && now.Before(refreshDue) && sameOffer(ad, last) {
				schedule(refreshDue) // nothing new to say
				continue
			}
			if err == nil {
				pctx, pcancel := context.WithTimeout(ctx, a.cfg.PublishTimeout)
				err = a.pub.PublishAd(pctx, ad)
				pcancel()
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				a.cfg.Logger.Warn("publish capacity ad", "err", err)
				schedule(now.Add(a.cfg.RetryInterval))
				continue
			}
			seq, lastPub, last, force = ad.Seq, now, ad, false
			next := time.Duration(float64(refresh) * (0.9 + 0.2*a.cfg.Rand()))
			if firstTime {
				next = time.Duration(float64(refresh) * (1 - a.cfg.Rand())) // (0, refresh]
				firstTime = false
			}
			refreshDue = now.Add(max(next, a.cfg.MinInterval))
			schedule(refreshDue)
		}
	}
}

// sameOffer reports whether two ads offer the same: the same cards in the
// same states at the same prices, region and track record. Their times and
// uptime may differ.
func sameOffer(a, b Ad) bool {
	return a.Region == b.Region && a.Availability.MTBF == b.Availability.MTBF && a.Availability.Sessions == b.Availability.Sessions &&
		reflect.DeepEqual(a.Cards, b.Cards) // every field of every group, those added later too
}

// changeInterval is the least time between two publishes now:
// PeerCount()/MeshChangeRate within [MinInterval, MaxChangeInterval].
func (a *Advertiser) changeInterval() time.Duration { return a.cfg.changeFor(a.cfg.PeerCount()) }

func (c AdvertiserConfig) changeFor(peers int) time.Duration {
	d := time.Duration(float64(max(peers, 1)) / c.MeshChangeRate * float64(time.Second))
	return min(max(d, c.MinInterval), c.MaxChangeInterval)
}

// refreshInterval is PeerCount()/MeshRefreshRate within [MinRefresh,
// MaxRefresh].
func (a *Advertiser) refreshInterval() time.Duration { return a.cfg.refreshFor(a.cfg.PeerCount()) }

func (c AdvertiserConfig) refreshFor(peers int) time.Duration {
	d := time.Duration(float64(max(peers, 1)) / c.MeshRefreshRate * float64(time.Second))
	return min(max(d, c.MinRefresh), c.MaxRefresh)
}

// build turns a supply into the ad published at now with sequence number
// seq, valid for ExpiryFactor refresh intervals (at most MaxTTL). Its error
// names the first thing in the supply that no peer would accept.
func (a *Advertiser) build(s Supply, now time.Time, seq uint64, refresh time.Duration) (Ad, error) {
	now = now.Truncate(time.Millisecond) // the wire's precision
	since := s.Since
	if since.IsZero() {
		since = a.started
	}
	ad := Ad{
		Seq:       seq,
		IssuedAt:  now,
		ExpiresAt: now.Add(min(time.Duration(a.cfg.ExpiryFactor)*refresh, MaxTTL)),
		Region:    s.Region,
		Availability: Availability{
			Uptime:   max(now.Sub(since), 0).Truncate(time.Second),
			MTBF:     s.MTBF.Truncate(time.Second),
			Sessions: s.Sessions,
		},
	}
	byModel := map[string]int{}
	for _, sc := range s.Cards {
		c := sc.Card
		if !c.Health.Healthy {
			continue
		}
		i, ok := byModel[c.Model]
		if !ok {
			price, err := a.price(s.Prices, c)
			if err != nil {
				return Ad{}, err
			}
			i = len(ad.Cards)
			byModel[c.Model] = i
			ad.Cards = append(ad.Cards, CardGroup{
				Model: c.Model, Vendor: c.Vendor, MemoryMiB: c.MemoryMiB,
				ComputeUnits: c.ComputeUnits, PriceCNY: price,
			})
		}
		g := &ad.Cards[i]
		g.MemoryMiB = min(g.MemoryMiB, c.MemoryMiB)
		g.Simulated = g.Simulated || c.Simulated() // a group with one simulated card is simulated
		if e, ok := evidenceOf(c); ok {
			g.Evidence = append(g.Evidence, e)
		}
		switch sc.State {
		case CardFree:
			g.Free++
		case CardReserved:
			g.Reserved++
		case CardBusy:
			g.Busy++
		default:
			return Ad{}, fmt.Errorf("gossip: supply: card %s: unknown state %d", c.ID, sc.State)
		}
	}
	sortGroups(ad.Cards)
	tidyEvidence(ad.Cards)
	for model := range s.Prices {
		if _, ok := byModel[model]; !ok && !a.knownModel(model) {
			return Ad{}, fmt.Errorf("gossip: supply: price for model %q: no such model in the catalog or among the cards", model)
		}
	}
	if err := checkAdFields(ad); err != nil {
		return Ad{}, fmt.Errorf("gossip: supply: %w", err)
	}
	return ad, nil
}

func (a *Advertiser) knownModel(key string) bool {
	_, ok := a.cfg.Catalog.Lookup(key)
	return ok
}

// price is the supply's price for c's model, or the catalog's default.
func (a *Advertiser) price(prices map[string]float64, c device.Card) (float64, error) {
	if p, ok := prices[c.Model]; ok {
		if !finiteIn(p, 0, MaxPriceCNY) {
			return 0, fmt.Errorf("gossip: supply: price of %s: %v CNY per card-hour: want a number within [0, %d]", c.Model, p, MaxPriceCNY)
		}
		return p, nil
	}
	if m, ok := a.cfg.Catalog.Lookup(c.Model); ok {
		return m.DefaultPriceCNY(), nil
	}
	// Not in the catalog: the catalog's own estimate from compute units,
	// else from memory.
	return device.Model{ComputeUnits: c.ComputeUnits, MemoryGiB: c.MemoryGiB()}.DefaultPriceCNY(), nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
