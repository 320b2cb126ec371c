package gossip

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

// recorder is a Publisher that keeps what it is given.
type recorder struct {
	mu    sync.Mutex
	ads   []Ad
	fails int  // fail this many publishes first
	block bool // block every publish until its ctx ends
}

var errTestPublish = errors.New("test: publish failed")

func (r *recorder) PublishAd(ctx context.Context, ad Ad) error {
	r.mu.Lock()
	if r.block {
		r.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	defer r.mu.Unlock()
	if r.fails > 0 {
		r.fails--
		return errTestPublish
	}
	r.ads = append(r.ads, ad)
	return nil
}

func (r *recorder) published() []Ad {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Ad(nil), r.ads...)
}

// waitAds waits until r holds n ads and returns the last.
func (r *recorder) waitAds(t *testing.T, n int) Ad {
	t.Helper()
	eventually(t, 5*time.Second, "the advertiser publishes", func() bool { return len(r.published()) >= n })
	ads := r.published()
	if len(ads) != n {
		t.Fatalf("%d ads published, want %d", len(ads), n)
	}
	return ads[n-1]
}

// waitDue waits until the advertiser's next timer is due at want.
func waitDue(t *testing.T, c *ManualClock, want time.Time) {
	t.Helper()
	eventually(t, 5*time.Second, "the advertiser schedules its next publish at "+want.String(), func() bool {
		due, ok := c.NextDue()
		return ok && due.Equal(want)
	})
}

func card(t *testing.T, key string, i int, state CardState) SupplyCard {
	t.Helper()
	m, ok := device.DefaultCatalog().Lookup(key)
	if !ok {
		t.Fatalf("no model %s in the catalog", key)
	}
	return SupplyCard{State: state, Card: device.Card{
		ID: key + "-" + string(rune('0'+i)), Vendor: m.Vendor, Model: key, Known: true, Index: i,
		MemoryMiB: m.MemoryGiB*1024 - 300, ComputeUnits: m.ComputeUnits, Health: device.Healthy(),
	}}
}

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func newTestAdvertiser(t *testing.T, pub Publisher, s Supply, cfg AdvertiserConfig) (*Advertiser, *ManualClock) {
	t.Helper()
	clock := NewManualClock(t0)
	cfg.Clock = clock
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 0.5 }
	}
	a, err := NewAdvertiser(pub, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, clock
}

func TestAdvertiserPublishesTheSupplyAtOnce(t *testing.T) {
	sick := card(t, "h100-sxm-80g", 3, CardFree)
	sick.Card.Health = device.Unhealthy("Xid 79")
	s := Supply{
		Region: "cn-east",
		Cards: []SupplyCard{
			card(t, "h100-sxm-80g", 0, CardFree), card(t, "h100-sxm-80g", 1, CardFree),
			card(t, "h100-sxm-80g", 2, CardBusy), sick,
			card(t, "rtx4090-48g", 4, CardReserved),
		},
		Prices:   map[string]float64{"rtx4090-48g": 2.5},
		Since:    t0.Add(-time.Hour),
		MTBF:     36 * time.Hour,
		Sessions: 3,
	}
	r := &recorder{}
	newTestAdvertiser(t, r, s, AdvertiserConfig{})
	ad := r.waitAds(t, 1)

	h100, _ := device.DefaultCatalog().Lookup("h100-sxm-80g")
	want := []CardGroup{
		{Model: "h100-sxm-80g", Vendor: device.VendorNVIDIA, MemoryMiB: h100.MemoryGiB*1024 - 300, ComputeUnits: h100.ComputeUnits,
			Free: 2, Busy: 1, PriceCNY: h100.DefaultPriceCNY()},
		{Model: "rtx4090-48g", Vendor: device.VendorNVIDIA, MemoryMiB: 48*1024 - 300, ComputeUnits: s.Cards[4].Card.ComputeUnits,
			Reserved: 1, PriceCNY: 2.5},
	}
	if !reflect.DeepEqual(ad.Cards, want) {
		t.Fatalf("groups %+v\nwant   %+v", ad.Cards, want)
	}
	if ad.Region != "cn-east" || ad.Availability != (Availability{Uptime: time.Hour, MTBF: 36 * time.Hour, Sessions: 3}) {
		t.Fatalf("ad %+v", ad)
	}
	if !ad.IssuedAt.Equal(t0) || ad.ExpiresAt.Sub(ad.IssuedAt) != 30*time.Second || ad.Seq != uint64(t0.UnixMicro()) {
		t.Fatalf("issued %s, expires %s, seq %d: want issued now, 3 refreshes of 10 s, seq from the clock", ad.IssuedAt, ad.ExpiresAt, ad.Seq)
	}
	if h100.DefaultPriceCNY() <= 0 {
		t.Fatal("catalog default price for the H100 must be positive")
	}
}

func TestAdvertiserCoalescesChanges(t *testing.T) {
	r := &recorder{}
	s := Supply{Cards: []SupplyCard{card(t, "h100-sxm-80g", 0, CardFree)}}
	a, clock := newTestAdvertiser(t, r, s, AdvertiserConfig{})
	first := r.waitAds(t, 1)
	ctx := context.Background()
	for i := range 5 {
		s.Region = "r" + string(rune('0'+i))
		if err := a.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Changes within MinInterval of the last publish wait for it to pass.
	waitDue(t, clock, t0.Add(250*time.Millisecond))
	if n := len(r.published()); n != 1 {
		t.Fatalf("%d ads before MinInterval passed, want 1", n)
	}
	clock.Advance(250 * time.Millisecond)
	second := r.waitAds(t, 2)
	if second.Region != "r4" || second.Seq <= first.Seq {
		t.Fatalf("coalesced ad %+v: want the last supply and a higher seq than %d", second, first.Seq)
	}
	// Then nothing until the refresh: 10 s later.
	waitDue(t, clock, t0.Add(250*time.Millisecond+10*time.Second))
	// A change long after the last publish goes out at once.
	clock.Advance(2 * time.Second)
	s.Region = "later"
	if err := a.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if third := r.waitAds(t, 3); third.Region != "later" || !third.IssuedAt.Equal(clock.Now()) {
		t.Fatalf("third ad %+v", third)
	}
}

// Cards reserved for a bid and freed again before the change interval
// passed: the ad would say what the last one said, so none goes out, and
// the refresh stays where it was.
func TestAdvertiserDoesNotPublishAChangeItUndid(t *testing.T) {
	r := &recorder{}
	free := Supply{Cards: []SupplyCard{card(t, "h100-sxm-80g", 0, CardFree)}}
	a, clock := newTestAdvertiser(t, r, free, AdvertiserConfig{})
	r.waitAds(t, 1)
	waitDue(t, clock, t0.Add(5*time.Second)) // the first refresh: half an interval
	ctx := context.Background()
	reserved := Supply{Cards: []SupplyCard{card(t, "h100-sxm-80g", 0, CardReserved)}}
	if err := a.Update(ctx, reserved); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(ctx, free); err != nil {
		t.Fatal(err)
	}
	waitDue(t, clock, t0.Add(250*time.Millisecond))
	clock.Advance(250 * time.Millisecond)
	waitDue(t, clock, t0.Add(5*time.Second))
	if n := len(r.published()); n != 1 {
		t.Fatalf("%d ads, want 1: a change undone within the interval was published", n)
	}
	// A change that stands goes out (at once: the interval since the last
	// publish has passed), and the refresh follows it.
	if err := a.Update(ctx, reserved); err != nil {
		t.Fatal(err)
	}
	if ad := r.waitAds(t, 2); ad.Cards[0].Reserved != 1 || !ad.IssuedAt.Equal(t0.Add(250*time.Millisecond)) {
		t.Fatalf("second ad %+v: want the card reserved, now", ad)
	}
	waitDue(t, clock, t0.Add(250*time.Millisecond+10*time.Second))
}

// The least time between two changes grows with the mesh, so that the
// mesh as a whole publishes about MeshChangeRate changes a second, up to
// MaxChangeInterval.
func TestChangeIntervalScalesWithTheMesh(t *testing.T) {
	for _, c := range []struct {
		peers int
		want  time.Duration
	}{
		{1, 250 * time.Millisecond}, {5, 250 * time.Millisecond}, {40, 2 * time.Second}, {100, 5 * time.Second}, {100000, 5 * time.Second},
	} {
		r := &recorder{}
		peers := c.peers
		s := Supply{Cards: []SupplyCard{card(t, "l40s-48g", 0, CardFree)}}
		a, clock := newTestAdvertiser(t, r, s, AdvertiserConfig{PeerCount: func() int { return peers }})
		r.waitAds(t, 1)
		s.Cards[0].State = CardBusy
		if err := a.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		waitDue(t, clock, t0.Add(c.want))
		clock.Advance(c.want)
		if ad := r.waitAds(t, 2); ad.Cards[0].Busy != 1 {
			t.Errorf("%d peers: ad %+v, want the card busy", c.peers, ad)
		}
		a.Close()
	}
}

func TestAdvertiserRefreshes(t *testing.T) {
	r := &recorder{}
	_, clock := newTestAdvertiser(t, r, Supply{Cards: []SupplyCard{card(t, "l40s-48g", 0, CardFree)}}, AdvertiserConfig{})
	r.waitAds(t, 1)
	// The first refresh comes after a random fraction of the interval
	// (Rand = 0.5: 5 s), the next ones every interval (±10%: 10 s).
	waitDue(t, clock, t0.Add(5*time.Second))
	clock.Advance(5 * time.Second)
	second := r.waitAds(t, 2)
	waitDue(t, clock, t0.Add(15*time.Second))
	clock.Advance(10 * time.Second)
	third := r.waitAds(t, 3)
	if !third.IssuedAt.Equal(t0.Add(15*time.Second)) || third.Seq <= second.Seq || !third.ExpiresAt.Equal(t0.Add(45*time.Second)) {
		t.Fatalf("refresh %+v", third)
	}
}

// Each node refreshes every PeerCount/MeshRefreshRate within [MinRefresh,
// MaxRefresh], so the mesh as a whole stays near MeshRefreshRate ads a
// second whatever its size; ads live three intervals.
func TestRefreshScalesWithTheMesh(t *testing.T) {
	for _, c := range []struct {
		peers          int
		refresh, life  time.Duration
		firstAfterHalf time.Duration
	}{
		{1, 10 * time.Second, 30 * time.Second, 5 * time.Second},
		{100, 250 * time.Second, 750 * time.Second, 125 * time.Second},
		{1000, 40 * time.Minute, MaxTTL, 20 * time.Minute},
		{100000, 40 * time.Minute, MaxTTL, 20 * time.Minute},
	} {
		r := &recorder{}
		peers := c.peers
		_, clock := newTestAdvertiser(t, r, Supply{Cards: []SupplyCard{card(t, "l40s-48g", 0, CardFree)}},
			AdvertiserConfig{PeerCount: func() int { return peers }})
		ad := r.waitAds(t, 1)
		if got := ad.ExpiresAt.Sub(ad.IssuedAt); got != c.life {
			t.Errorf("%d peers: ad lives %s, want %s", c.peers, got, c.life)
		}
		waitDue(t, clock, t0.Add(c.firstAfterHalf))
	}
}

func TestAdvertiserRefusesBadSupply(t *testing.T) {
	r := &recorder{}
	good := Supply{Region: "home", Cards: []SupplyCard{card(t, "rtx4090-24g", 0, CardFree)}}
	a, _ := newTestAdvertiser(t, r, good, AdvertiserConfig{})
	r.waitAds(t, 1)
	weird := card(t, "rtx4090-24g", 1, CardFree)
	weird.State = 7
	for _, c := range []struct {
		s    Supply
		want string
	}{
		{Supply{Cards: good.Cards, Prices: map[string]float64{"rtx4090-24g": math.NaN()}}, "price of rtx4090-24g"},
		{Supply{Cards: good.Cards, Prices: map[string]float64{"rtx4090-24g": -3}}, "price of rtx4090-24g"},
		{Supply{Cards: good.Cards, Prices: map[string]float64{"rtx4090-24g": 1e9}}, "price of rtx4090-24g"},
		{Supply{Cards: good.Cards, Prices: map[string]float64{"h100-sxm": 10}}, `price for model "h100-sxm"`},
		{Supply{Cards: good.Cards, Region: strings.Repeat("x", MaxLabelLen+1)}, "region"},
		{Supply{Cards: []SupplyCard{weird}}, "unknown state 7"},
		{Supply{Cards: good.Cards, Sessions: -1}, "sessions"},
	} {
		err := a.Update(context.Background(), c.s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("supply %+v: err %v, want one naming %q", c.s, err, c.want)
		}
	}
	if _, err := NewAdvertiser(r, Supply{Cards: []SupplyCard{weird}}, AdvertiserConfig{Clock: NewManualClock(t0)}); err == nil {
		t.Error("NewAdvertiser took a bad supply")
	}
	// Nothing was published and the good supply still stands.
	if ads := r.published(); len(ads) != 1 || ads[0].Region != "home" {
		t.Fatalf("published %+v", ads)
	}
}

func TestAdvertiserConfigChecks(t *testing.T) {
	for _, cfg := range []AdvertiserConfig{
		{MinInterval: -1}, {MinRefresh: time.Minute, MaxRefresh: time.Second},
		{MeshChangeRate: -1}, {MinInterval: time.Second, MaxChangeInterval: time.Millisecond},
		{MeshRefreshRate: -1}, {MeshRefreshRate: math.NaN()}, {ExpiryFactor: -2},
	} {
		if _, err := NewAdvertiser(&recorder{}, Supply{}, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestAdvertiserRetriesAfterAFailedPublish(t *testing.T) {
	r := &recorder{fails: 1}
	_, clock := newTestAdvertiser(t, r, Supply{}, AdvertiserConfig{})
	waitDue(t, clock, t0.Add(time.Second))
	if len(r.published()) != 0 {
		t.Fatal("a failed publish was recorded")
	}
	clock.Advance(time.Second)
	if ad := r.waitAds(t, 1); !ad.IssuedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("retry %+v", ad)
	}
}

func TestAdvertiserRepublishesOnSignal(t *testing.T) {
	r := &recorder{}
	kick := make(chan struct{})
	_, clock := newTestAdvertiser(t, r, Supply{}, AdvertiserConfig{Republish: kick})
	r.waitAds(t, 1)
	kick <- struct{}{}
	waitDue(t, clock, t0.Add(250*time.Millisecond))
	clock.Advance(250 * time.Millisecond)
	r.waitAds(t, 2)
	close(kick) // counts once, then the advertiser stops listening
	waitDue(t, clock, t0.Add(500*time.Millisecond))
	clock.Advance(250 * time.Millisecond)
	r.waitAds(t, 3)
	waitDue(t, clock, t0.Add(500*time.Millisecond+10*time.Second))
}

func TestAdvertiserCloseStopsAPublishInFlight(t *testing.T) {
	r := &recorder{block: true}
	a, err := NewAdvertiser(r, Supply{}, AdvertiserConfig{Clock: NewManualClock(t0), PublishTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a blocked publish")
	}
	if err := a.Update(context.Background(), Supply{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close: %v", err)
	}
	a.Close() // twice is fine
}

// A restarted node's ads win over the ones it published before: sequence
// numbers come from the clock.
func TestSeqSurvivesRestart(t *testing.T) {
	r := &recorder{}
	clock := NewManualClock(t0)
	a, err := NewAdvertiser(r, Supply{}, AdvertiserConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	before := r.waitAds(t, 1)
	a.Close()
	clock.Advance(time.Second)
	b, err := NewAdvertiser(r, Supply{}, AdvertiserConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if after := r.waitAds(t, 2); after.Seq <= before.Seq {
		t.Fatalf("seq after restart %d, before %d", after.Seq, before.Seq)
	}
}

func TestCardStateNames(t *testing.T) {
	for s, want := range map[CardState]string{CardFree: "free", CardReserved: "reserved", CardBusy: "busy", 9: "state(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}
