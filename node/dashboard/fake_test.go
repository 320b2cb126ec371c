package dashboard

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
)

// fakeMesh is an api.Backend holding a small mesh the test changes: three
// members, some cards, jobs and their logs, offers and earnings. As a node
// does, it lists, cancels and scales jobs for their owner only (every job
// is ownerKey's). Its methods are safe for concurrent use, as the API's
// request goroutines need.
type fakeMesh struct {
	mu      sync.Mutex
	peers   []api.Peer
	jobs    []market.JobRecord
	logs    map[string]string // job → stdout of share 0
	cards   []api.Card
	offers  []api.Offer
	subs    map[chan api.Event]bool
	start   time.Time
	cancels int
}

var (
	_ api.Backend     = (*fakeMesh)(nil)
	_ api.OfferLister = (*fakeMesh)(nil)
)

// ownerKey owns every job of the fake; ownerToken is its owner token.
var ownerKey = func() owner.Key {
	k, err := owner.KeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	if err != nil {
		panic(err)
	}
	return k
}()

const ownerToken = "owner-tok-5b9e2c41a7"

// isOwner reports whether the request acts as the jobs' owner.
func isOwner(ctx context.Context) bool {
	c, _ := api.CallerFrom(ctx)
	return c.Owner == ownerKey.ID()
}

// The fake mesh's identities.
const (
	peerSelf  = "12D3KooWSe1fNodeAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"
	peerTwo   = "12D3KooWTwoNodeBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2"
	peerThree = "12D3KooWThreeNodeCcccccccccccccccccccccccccccccccccc3"
	jobTrain  = "j-train-llama-0001"
	jobEval   = "j-eval-0002"
	jobQueued = "j-sweep-0003"
)

func newFakeMesh() *fakeMesh {
	now := time.Now()
	f := &fakeMesh{subs: map[chan api.Event]bool{}, start: now.Add(-2*time.Hour - 5*time.Minute), logs: map[string]string{}}
	f.peers = []api.Peer{
		{ID: peerSelf, Self: true, State: "alive", Region: "cn-east", Cards: 2, FreeCards: 1, Models: []string{"h100-sxm-80g"}, Coordinator: true},
		{ID: peerTwo, State: "alive", Region: "cn-east", Cards: 8, FreeCards: 4, Models: []string{"rtx4090-48g"}, RTTMillis: 3.2, Coordinator: true},
		{ID: peerThree, State: "alive", Region: "cn-north", Cards: 4, FreeCards: 4, Models: []string{"mtt-s4000-48g"}, RTTMillis: 28.5},
	}
	f.cards = []api.Card{
		{Card: device.Card{ID: "GPU-a1", Vendor: device.VendorNVIDIA, Model: "h100-sxm-80g", Health: device.Healthy()}, Healthy: true, State: "running", Job: jobTrain, Epoch: 1},
		{Card: device.Card{ID: "GPU-a2", Vendor: device.VendorNVIDIA, Model: "h100-sxm-80g", Health: device.Healthy()}, Healthy: true, State: "free"},
	}
	f.jobs = []market.JobRecord{
		{
			ID: jobTrain, State: market.JobRunning, Coordinator: peerSelf, Term: 1, Epoch: 2, Cards: 5,
			Spec: market.JobSpec{ID: jobTrain, Name: "llama fine-tune", Cards: 5, MaxPriceCNY: 30, Elastic: &market.Elastic{Min: 1, Max: 8},
				Command: []string{"torchrun", "train.py"}, Env: map[string]string{"HF_TOKEN": "hf_secret_value"}},
			Placements: []market.Placement{
				{Share: 0, Epoch: 1, Node: peerSelf, Cards: []string{"GPU-a1"}, Model: "h100-sxm-80g", State: market.PlacementRunning, PriceCNY: 22.5, StartedAt: now.Add(-30 * time.Minute), CardSeconds: 1800, CostCNY: 11.25},
				{Share: 1, Epoch: 2, Node: peerTwo, Cards: []string{"GPU-b1", "GPU-b2", "GPU-b3", "GPU-b4"}, Model: "rtx4090-48g", State: market.PlacementRunning, PriceCNY: 4.5, StartedAt: now.Add(-20 * time.Minute), CardSeconds: 4800, CostCNY: 6},
			},
			CardSeconds: 6600, CostCNY: 17.25, ClearingPriceCU: 7.1,
			SubmittedAt: now.Add(-31 * time.Minute), RunningAt: now.Add(-30 * time.Minute),
		},
		{
			ID: jobEval, State: market.JobRunning, Coordinator: peerSelf, Term: 1, Epoch: 1, Cards: 2,
			Spec: market.JobSpec{ID: jobEval, Cards: 2, MaxPriceCNY: 10, Command: []string{"python", "eval.py"}},
			Placements: []market.Placement{
				{Share: 0, Epoch: 1, Node: peerThree, Cards: []string{"MT-1", "MT-2"}, Model: "mtt-s4000-48g", State: market.PlacementRunning, PriceCNY: 3, StartedAt: now.Add(-5 * time.Minute)},
			},
			SubmittedAt: now.Add(-6 * time.Minute), RunningAt: now.Add(-5 * time.Minute),
		},
		{
			ID: jobQueued, State: market.JobPending, Reason: "waiting for capacity: no bids", Coordinator: peerSelf, Cards: 64,
			Spec:        market.JobSpec{ID: jobQueued, Cards: 64, MaxPriceCNY: 5, Command: []string{"sweep"}},
			SubmittedAt: now.Add(-time.Minute),
		},
	}
	for i := range f.jobs {
		f.jobs[i].Spec.Owner = string(ownerKey.ID())
	}
	f.logs[jobTrain] = "step 1/3 loss=0.42\nstep 2/3 loss=0.31\n"
	f.offers = []api.Offer{
		{Node: peerTwo, Region: "cn-east", Model: "rtx4090-48g", Vendor: "nvidia", MemoryMiB: 49152, ComputeUnits: 0.53, Free: 4, Total: 8,
			PriceCNY: 4.5, PricePerCUCNY: 4.5 / 0.53, Reliability: api.Reliability{UptimeSeconds: 3 * 3600, Seen: &api.Seen{Lost: 1, Ended: 3, MTBFSeconds: 5 * 3600}}},
		{Node: peerSelf, Self: true, Region: "cn-east", Model: "h100-sxm-80g", Vendor: "nvidia", MemoryMiB: 81920, ComputeUnits: 3.17, Free: 1, Total: 2,
			PriceCNY: 22.5, PricePerCUCNY: 22.5 / 3.17, Reliability: api.Reliability{MTBFSeconds: 720 * 3600, UptimeSeconds: 2*3600 + 300}},
		{Node: peerThree, Region: "cn-north", Model: "mtt-s4000-48g", Vendor: "mthreads", MemoryMiB: 49152, ComputeUnits: 0.31, Free: 0, Total: 4, PriceCNY: 3},
	}
	return f
}

// update changes the fake under its lock.
func (f *fakeMesh) update(fn func(f *fakeMesh)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// emit sends ev to every subscriber without blocking.
func (f *fakeMesh) emit(ev api.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	for ch := range f.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

func (f *fakeMesh) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *fakeMesh) job(id string) (int, bool) {
	i := slices.IndexFunc(f.jobs, func(j market.JobRecord) bool { return j.ID == id })
	return i, i >= 0
}

func (f *fakeMesh) Status(context.Context) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	st := api.Status{
		At: now,
		Node: api.NodeStatus{PeerID: peerSelf, Version: "v0.1.0-test", StartedAt: f.start, UptimeSeconds: now.Sub(f.start).Seconds(),
			Reachability: api.ReachabilityPublic, Region: "cn-east", Coordinator: true, Cards: slices.Clone(f.cards)},
		Jobs: api.JobsStatus{ByState: map[string]int{},
			Placement: api.PlacementStatus{WindowSeconds: 300, Count: 12, P50Seconds: 0.38, P99Seconds: 1.9},
			Reroutes:  api.RerouteStatus{WindowSeconds: 3600, Count: 1, MedianSeconds: 6.5}},
		Gossip: api.GossipStatus{MeshPeers: 2, MessagesPerSecond: 3.4, BytesInPerSecond: 2100, BytesOutPerSecond: 1800,
			Rejected: map[string]uint64{}, Ignored: map[string]uint64{}},
		Warnings: []string{},
		Earnings: &api.Earnings{
			Today: api.Earned{CNY: 11.25, CardSeconds: 1800}, Week: api.Earned{CNY: 96.5, CardSeconds: 15440}, Total: api.Earned{CNY: 412.75, CardSeconds: 66040},
			TodaySince: now.Truncate(24 * time.Hour), WeekSince: now.Add(-72 * time.Hour).Truncate(24 * time.Hour), Since: now.Add(-40 * 24 * time.Hour),
			ByModel: []api.ModelEarned{{Model: "h100-sxm-80g", Today: api.Earned{CNY: 11.25, CardSeconds: 1800}, Week: api.Earned{CNY: 96.5, CardSeconds: 15440}, Total: api.Earned{CNY: 412.75, CardSeconds: 66040}}},
		},
	}
	for _, p := range f.peers {
		st.Mesh.Members.Add(p.State)
		if p.State == "alive" {
			st.Mesh.AddRegion(p.Region, p.Cards)
		}
	}
	st.Mesh.AddCards(api.Capacity{Model: "h100-sxm-80g", Vendor: "nvidia", Free: 1, Busy: 1})
	st.Mesh.AddCards(api.Capacity{Model: "rtx4090-48g", Vendor: "nvidia", Free: 4, Busy: 4})
	st.Mesh.AddCards(api.Capacity{Model: "mtt-s4000-48g", Vendor: "mthreads", Free: 2, Busy: 2})
	for _, j := range f.jobs {
		st.Jobs.ByState[string(j.State)]++
	}
	for _, c := range f.cards {
		if !c.Healthy {
			st.Warnings = append(st.Warnings, fmt.Sprintf("card %s unhealthy: %s", c.ID, c.Health.Reason))
		}
	}
	return st, nil
}

func (f *fakeMesh) Peers(context.Context) ([]api.Peer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.peers), nil
}

// Jobs lists the jobs to their owner, and none to anyone else.
func (f *fakeMesh) Jobs(ctx context.Context) ([]market.JobRecord, error) {
	if !isOwner(ctx) {
		return nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.jobs), nil
}

func (f *fakeMesh) Job(ctx context.Context, id string) (market.JobRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i, ok := f.job(id); ok {
		if !isOwner(ctx) {
			return market.JobRecord{}, api.Errorf(http.StatusForbidden, "job %s belongs to another owner", id)
		}
		return f.jobs[i], nil
	}
	return market.JobRecord{}, api.Errorf(http.StatusNotFound, "no job %q", id)
}

func (f *fakeMesh) Offers(context.Context) ([]api.Offer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.offers), nil
}

func (f *fakeMesh) Cards(context.Context) ([]api.Card, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cards), nil
}

// Logs writes what the job printed so far and, when following a running
// job, waits for the request to end as a live attempt's stream would.
func (f *fakeMesh) Logs(ctx context.Context, req api.LogRequest, w io.Writer, flush func()) error {
	f.mu.Lock()
	i, ok := f.job(req.Job)
	out := f.logs[req.Job]
	running := ok && f.jobs[i].State == market.JobRunning
	f.mu.Unlock()
	if !ok {
		return api.Errorf(http.StatusNotFound, "no job %q", req.Job)
	}
	if !isOwner(ctx) {
		return api.Errorf(http.StatusForbidden, "job %s belongs to another owner", req.Job)
	}
	if req.Stream == "stderr" {
		out = "warning: stderr of share " + fmt.Sprint(req.Share) + "\n"
	}
	if req.Offset < int64(len(out)) {
		io.WriteString(w, out[req.Offset:])
	}
	flush()
	if req.Follow && running {
		<-ctx.Done()
	}
	return nil
}

func (f *fakeMesh) Subscribe() (<-chan api.Event, func()) {
	ch := make(chan api.Event, 64)
	f.mu.Lock()
	f.subs[ch] = true
	f.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.subs, ch)
			f.mu.Unlock()
			close(ch)
		})
	}
}

func (f *fakeMesh) Ready() map[string]error { return map[string]error{"mesh": nil} }

func (f *fakeMesh) Drain(context.Context) error { return nil }
func (f *fakeMesh) Metrics() http.Handler       { return nil }

func (f *fakeMesh) Submit(context.Context, market.JobSpec) (market.JobRecord, error) {
	return market.JobRecord{}, api.Errorf(http.StatusNotImplemented, "the dashboard does not submit")
}

// Cancel cancels a job for its owner, as a coordinator would, and says so
// on the event stream.
func (f *fakeMesh) Cancel(ctx context.Context, id string) (market.JobRecord, error) {
	f.mu.Lock()
	i, ok := f.job(id)
	if !ok || !isOwner(ctx) {
		f.mu.Unlock()
		return market.JobRecord{}, api.Errorf(http.StatusForbidden, "job %s: not yours to cancel", id)
	}
	f.cancels++
	from := f.jobs[i].State
	f.jobs[i].State, f.jobs[i].Reason = market.JobCancelled, "cancelled by its owner"
	rec := f.jobs[i]
	f.mu.Unlock()
	f.emit(api.Event{Type: "end", Job: id, From: string(from), State: string(market.JobCancelled), Reason: rec.Reason, Owner: rec.Spec.Owner})
	return rec, nil
}

// Scale sets an elastic job's cards for its owner.
func (f *fakeMesh) Scale(ctx context.Context, id string, cards int) (market.JobRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.job(id)
	if !ok || !isOwner(ctx) {
		return market.JobRecord{}, api.Errorf(http.StatusForbidden, "job %s: not yours to scale", id)
	}
	if el := f.jobs[i].Spec.Elastic; el == nil || cards < el.Min || cards > el.Max {
		return market.JobRecord{}, &api.HTTPError{Status: http.StatusBadRequest, Field: "cards", Err: fmt.Errorf("cards %d outside the elastic range", cards)}
	}
	f.jobs[i].Cards = cards
	return f.jobs[i], nil
}

func (f *fakeMesh) cancelled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancels
}
