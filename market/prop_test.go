package market_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// The property tests build random meshes, submit random concurrent jobs,
// and inject random message loss, duplication, reordering, partitions,
// stopped nodes, false failure hints, cancellations, scaling and card
// failures; then they heal the mesh and let it settle. Throughout they
// check the market's invariants:
//
//   - no card is ever running for two jobs (the simulated executor never
//     starts a process on a card another process holds);
//   - no reservation outlives its lease;
//   - every job ends terminal or is legitimately waiting;
//   - clearing prices are at most the job's max price and at least every
//     winner's bid;
//   - epochs only rise, usage is billed only while an attempt is current,
//     and a share has at most one live attempt.

var propModels = []string{"a100-80g", "rtx4090-24g", "h100-sxm-80g", "l40s-48g"}

// propConfig shortens the coordinator's retry backoff so a settling mesh
// retries often within the test's virtual time.
func propConfig(id string) market.Config {
	cfg := market.DefaultConfig(id)
	cfg.RetryMax = 2 * time.Second
	return cfg
}

type world struct {
	t     *rapid.T
	h     *markettest.Harness
	specs map[string]market.JobSpec
	seen  map[string]market.JobRecord // last record of each job
	usage map[string]float64          // job/share/epoch → card-seconds when it stopped being live
}

func drawSpec(t *rapid.T, id string) market.JobSpec {
	s := market.JobSpec{ID: id, Command: []string{"work"}, MaxPriceCNY: rapid.Float64Range(2, 40).Draw(t, id+"/max")}
	if rapid.Bool().Draw(t, id+"/model") {
		s.Models = []string{rapid.SampledFrom(propModels).Draw(t, id+"/models")}
	}
	switch rapid.IntRange(0, 5).Draw(t, id+"/shape") {
	case 0, 1: // any layout
		s.Cards = rapid.IntRange(1, 8).Draw(t, id+"/cards")
		if rapid.IntRange(0, 3).Draw(t, id+"/elastic") == 0 {
			s.Elastic = &market.Elastic{Min: 1, Max: 12}
		}
	case 2: // gang
		k := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, id+"/per")
		s.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: k}
		s.Cards = k * rapid.IntRange(1, 3).Draw(t, id+"/nodes")
	case 3:
		s.Layout.Mode = market.LayoutOneNode
		s.Cards = rapid.IntRange(1, 4).Draw(t, id+"/cards")
	case 4:
		s.Kind = market.KindService
		s.Cards = rapid.IntRange(1, 2).Draw(t, id+"/cards")
		s.Replicas = rapid.IntRange(1, 3).Draw(t, id+"/replicas")
	case 5:
		s.Kind = market.KindPreemptible
		s.Cards = rapid.IntRange(1, 4).Draw(t, id+"/cards")
	}
	if rapid.Bool().Draw(t, id+"/dur") {
		s.ExpectedDuration = market.Duration(time.Duration(rapid.IntRange(1, 48).Draw(t, id+"/hours")) * time.Hour)
	}
	return s
}

// runFor decides how long each execution runs: batch work 1–8s, exit code
// non-zero now and then; services forever. It depends only on the attempt,
// so a replay does the same.
func runFor(e market.Execution) (time.Duration, int, bool) {
	if e.Kind == market.KindService {
		return 0, 0, true
	}
	h := uint64(0)
	for _, c := range fmt.Sprintf("%s/%d/%d", e.Job, e.Share, e.Epoch) {
		h = h*31 + uint64(c)
	}
	code := 0
	if h%17 == 0 {
		code = 3
	}
	return time.Duration(1000+h%7000) * time.Millisecond, code, false
}

func TestMarketInvariantsUnderFaults(t *testing.T) {
	var stats struct{ jobs, ran, lost, preempted int }
	defer func() {
		// Guard against a vacuous pass: the random worlds must have run
		// jobs and lost shares to faults.
		t.Logf("%d jobs, %d ran, %d attempts lost, %d preempted", stats.jobs, stats.ran, stats.lost, stats.preempted)
		if !t.Failed() && (stats.ran < stats.jobs/4 || stats.lost == 0) {
			t.Errorf("the random worlds exercised too little: %+v", stats)
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		loss := rapid.Float64Range(0, 0.25).Draw(t, "loss")
		dup := rapid.Float64Range(0, 0.2).Draw(t, "dup")
		jitter := time.Duration(rapid.IntRange(0, 30).Draw(t, "jitter_ms")) * time.Millisecond
		stopDelay := time.Duration(rapid.IntRange(0, 500).Draw(t, "stop_ms")) * time.Millisecond
		h := markettest.New(markettest.Options{Seed: rapid.Uint64().Draw(t, "seed"), TickEvery: 20 * time.Millisecond,
			Jitter: jitter, Loss: loss, Duplicate: dup, Run: runFor, StopDelay: stopDelay})
		w := &world{t: t, h: h, specs: map[string]market.JobSpec{}, seen: map[string]market.JobRecord{}, usage: map[string]float64{}}
		h.AfterStep = w.checkStep
		h.OnReady = w.checkReady

		nodes := rapid.IntRange(3, 10).Draw(t, "nodes")
		for i := 0; i < nodes; i++ {
			id := fmt.Sprintf("n%d", i)
			cfg := propConfig(id)
			var spec []string
			for m := rapid.IntRange(0, 2).Draw(t, id+"/models"); m >= 0; m-- {
				spec = append(spec, fmt.Sprintf("%s:%d", rapid.SampledFrom(propModels).Draw(t, id+"/model"), rapid.IntRange(1, 6).Draw(t, id+"/n")))
			}
			cfg.Cards = uniqueCards(id, spec)
			if rapid.Bool().Draw(t, id+"/mtbf?") {
				cfg.Availability.MTBF = market.Duration(time.Duration(rapid.IntRange(1, 500).Draw(t, id+"/mtbf")) * time.Hour)
			}
			if rapid.Bool().Draw(t, id+"/price?") {
				cfg.Prices.PerModel = map[string]float64{rapid.SampledFrom(propModels).Draw(t, id+"/pm"): rapid.Float64Range(0.5, 30).Draw(t, id+"/price")}
			}
			h.MustAdd(cfg)
		}

		// The chaos: jobs and faults at random times over 8 virtual seconds.
		type action struct {
			at time.Duration
			do func()
		}
		var plan []action
		jobs := rapid.IntRange(1, 8).Draw(t, "jobs")
		for i := 0; i < jobs; i++ {
			spec := drawSpec(t, fmt.Sprintf("j%d", i))
			w.specs[spec.ID] = spec
			plan = append(plan, action{time.Duration(rapid.IntRange(0, 4000).Draw(t, "submit_ms")) * time.Millisecond, func() {
				if _, err := h.Submit(spec); err != nil && !strings.Contains(err.Error(), "invalid") {
					t.Fatalf("submit %s: %v", spec.ID, err)
				}
			}})
		}
		members := h.Members()
		for f := rapid.IntRange(0, 12).Draw(t, "faults"); f > 0; f-- {
			at := time.Duration(rapid.IntRange(0, 8000).Draw(t, "fault_ms")) * time.Millisecond
			node := rapid.SampledFrom(members).Draw(t, "fault_node")
			other := rapid.SampledFrom(members).Draw(t, "other_node")
			job := fmt.Sprintf("j%d", rapid.IntRange(0, jobs-1).Draw(t, "fault_job"))
			var do func()
			switch rapid.IntRange(0, 7).Draw(t, "fault") {
			case 0:
				do = func() { h.SetCut(node, true) }
			case 1:
				do = func() { h.SetCut(node, false) }
			case 2:
				do = func() { h.SetDown(node, true) }
			case 3:
				do = func() { h.SetDown(node, false) }
			case 4: // a hint, often false
				do = func() { _ = h.PeerLost(other, node) }
			case 5:
				do = func() { _ = h.Step(h.Coordinator(job), market.CancelJob{Now: h.Now, Job: job}) }
			case 6:
				n := rapid.IntRange(1, 12).Draw(t, "scale")
				do = func() { _ = h.Step(h.Coordinator(job), market.ScaleJob{Now: h.Now, Job: job, Cards: n}) }
			case 7:
				do = func() { w.breakCard(node) }
			}
			plan = append(plan, action{at, do})
		}
		slices.SortStableFunc(plan, func(a, b action) int { return int(a.at - b.at) })
		start := h.Now
		for _, a := range plan {
			h.RunFor(start.Add(a.at).Sub(h.Now))
			a.do()
		}

		// Heal everything and let the mesh settle.
		h.SetFaults(0, 0, 0)
		for _, id := range members {
			h.SetCut(id, false)
			h.SetDown(id, false)
		}
		h.RunFor(30 * time.Second)
		w.checkSettled()
		for id := range w.specs {
			r, _ := h.Job(id)
			stats.jobs++
			if !r.RunningAt.IsZero() {
				stats.ran++
			}
			for _, p := range r.Placements {
				if p.State == market.PlacementLost {
					stats.lost++
				}
				if p.Cause == market.CausePreempted {
					stats.preempted++
				}
			}
		}
		if len(h.Violations) > 0 {
			t.Fatalf("violations:\n%s", strings.Join(h.Violations, "\n"))
		}
	})
}

// uniqueCards builds a node's cards from "model:n" parts, numbering them
// across parts.
func uniqueCards(id string, parts []string) []device.Card {
	var out []device.Card
	for _, p := range parts {
		for _, c := range markettest.MustCards(id, p) {
			c.ID = fmt.Sprintf("%s-g%d", id, len(out))
			c.Index = len(out)
			out = append(out, c)
		}
	}
	return out
}

func (w *world) breakCard(node string) {
	p := w.h.Peer(node)
	cards := p.Node.Cards()
	if len(cards) == 0 {
		return
	}
	var next []device.Card
	for i, cs := range cards {
		c := cs.Card
		if i == 0 {
			c.Health = device.Unhealthy("Xid 79")
		}
		next = append(next, c)
	}
	_ = w.h.SetCards(node, next)
}

// checkStep runs after every step of a node: none of its reservations may
// have outlived its lease.
func (w *world) checkStep(p *markettest.Peer) {
	for _, c := range p.Node.Cards() {
		if c.Lease != "" && c.Until.Before(w.h.Now) {
			w.t.Fatalf("%v %s: card %s still reserved under %s, which lapsed at %v", w.h.Now, p.ID, c.Card.ID, c.Lease, c.Until)
		}
	}
}

// checkReady checks every job record a coordinator persists against the
// one before it.
func (w *world) checkReady(p *markettest.Peer, rd market.Ready) {
	for _, r := range rd.Jobs {
		prev, seen := w.seen[r.ID]
		if seen && r.Epoch < prev.Epoch {
			w.t.Fatalf("%s: epoch fell from %d to %d", r.ID, prev.Epoch, r.Epoch)
		}
		if seen && r.CostCNY < prev.CostCNY-1e-9 {
			w.t.Fatalf("%s: bill fell from %v to %v", r.ID, prev.CostCNY, r.CostCNY)
		}
		if seen && prev.State.Terminal() && r.State != prev.State {
			w.t.Fatalf("%s: left terminal state %s for %s", r.ID, prev.State, r.State)
		}
		sum := 0.0
		liveShare := map[int]bool{}
		lastEpoch := map[int]uint64{}
		for _, pl := range r.Placements {
			if pl.PriceCNY > r.Spec.MaxPriceCNY+1e-9 || pl.PriceCNY < pl.BidCNY-1e-9 {
				w.t.Fatalf("%s share %d epoch %d: paid %v per card-hour, bid %v, max %v", r.ID, pl.Share, pl.Epoch, pl.PriceCNY, pl.BidCNY, r.Spec.MaxPriceCNY)
			}
			if pl.Epoch < lastEpoch[pl.Share] {
				w.t.Fatalf("%s share %d: epoch %d after epoch %d", r.ID, pl.Share, pl.Epoch, lastEpoch[pl.Share])
			}
			lastEpoch[pl.Share] = pl.Epoch
			if pl.Epoch > r.Epoch {
				w.t.Fatalf("%s: placement epoch %d above the job's %d", r.ID, pl.Epoch, r.Epoch)
			}
			live := pl.State == market.PlacementAwarded || pl.State == market.PlacementAccepted || pl.State == market.PlacementRunning
			if live && liveShare[pl.Share] {
				w.t.Fatalf("%s share %d has two live attempts", r.ID, pl.Share)
			}
			liveShare[pl.Share] = liveShare[pl.Share] || live
			key := fmt.Sprintf("%s/%d/%d", r.ID, pl.Share, pl.Epoch)
			if frozen, ok := w.usage[key]; ok && pl.CardSeconds > frozen+1e-9 {
				w.t.Fatalf("%s: usage billed after the attempt ended (%v → %v)", key, frozen, pl.CardSeconds)
			}
			if !live && pl.State != market.PlacementStopping {
				if _, ok := w.usage[key]; !ok {
					w.usage[key] = pl.CardSeconds
				}
			}
			sum += pl.CostCNY
		}
		if math.Abs(sum-r.CostCNY) > 1e-6 {
			w.t.Fatalf("%s: bill %v is not the sum of its placements' %v", r.ID, r.CostCNY, sum)
		}
		w.seen[r.ID] = r
	}
}

// checkSettled checks, once the mesh has healed and settled, that every job
// has ended or is legitimately waiting: running whole, or pending with a
// reason while the free cards could not place it.
func (w *world) checkSettled() {
	for id, spec := range w.specs {
		r, ok := w.h.Job(id)
		if !ok {
			continue // never submitted: an invalid spec
		}
		switch r.State {
		case market.JobSucceeded, market.JobFailed, market.JobCancelled:
			continue
		case market.JobRunning:
			if spec.KindOrDefault() == market.KindService {
				running := 0
				for _, p := range r.Placements {
					if p.State == market.PlacementRunning {
						running++
					}
				}
				if running != spec.ReplicaCount() {
					w.t.Fatalf("%s: service running with %d of %d replicas", id, running, spec.ReplicaCount())
				}
			}
			continue
		case market.JobPending, market.JobRerouting:
			if r.Reason == "" {
				w.t.Fatalf("%s: %s with no reason", id, r.State)
			}
			if r.State == market.JobPending && w.placeableNow(spec, r) {
				w.t.Fatalf("%s: pending (%s) though free cards could place it:\n%s", id, r.Reason, w.freeCards())
			}
		default:
			w.t.Fatalf("%s: stuck in %s after the mesh settled (%s)", id, r.State, r.Reason)
		}
	}
}

// placeableNow reports whether the free, healthy cards of the mesh could
// place the whole job as its spec stands (its current card count), each
// share's cards of one model unless the job mixes models.
func (w *world) placeableNow(spec market.JobSpec, r market.JobRecord) bool {
	f := market.FilterOf(&spec)
	perNode := map[string]int{} // a node's cards one share may take: its largest model's
	for _, p := range w.h.Peers() {
		perModel := map[string]int{}
		for _, c := range p.Node.Cards() {
			if c.State != market.CardFree {
				continue
			}
			if len(f.Models) > 0 && !slices.Contains(f.Models, c.Card.Model) {
				continue
			}
			if !priceOK(p, c.Card, spec) {
				continue
			}
			model := c.Card.Model
			if spec.MixedModels {
				model = "*"
			}
			perModel[model]++
			perNode[p.ID] = max(perNode[p.ID], perModel[model])
		}
	}
	total := 0
	for _, k := range perNode {
		total += k
	}
	switch {
	case spec.KindOrDefault() == market.KindService: // replicas on distinct nodes
		n := 0
		for _, k := range perNode {
			if k >= spec.Cards {
				n++
			}
		}
		return n >= spec.ReplicaCount()
	case spec.LayoutMode() == market.LayoutPerNode:
		n := 0
		for _, k := range perNode {
			if k >= spec.Layout.PerNode {
				n++
			}
		}
		return n >= r.Cards/spec.Layout.PerNode
	case spec.LayoutMode() == market.LayoutOneNode:
		for _, k := range perNode {
			if k >= spec.Cards {
				return true
			}
		}
		return false
	}
	return total >= r.Cards
}

// priceOK reports whether node p asks at most the job's max for card.
func priceOK(p *markettest.Peer, card device.Card, spec market.JobSpec) bool {
	for _, o := range p.Node.Ad().Offers {
		if o.Model == card.Model {
			price := o.PriceCNY
			if spec.KindOrDefault() == market.KindPreemptible {
				price = o.PreemptiblePriceCNY
			}
			return price <= spec.MaxPriceCNY
		}
	}
	return false
}

func (w *world) freeCards() string {
	var lines []string
	for _, p := range w.h.Peers() {
		for _, c := range p.Node.Cards() {
			lines = append(lines, fmt.Sprintf("  %s %s %s %s", p.ID, c.Card.ID, c.Card.Model, c.State))
		}
	}
	return strings.Join(lines, "\n")
}
