package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/sim"
)

// placementSizes are the job sizes placed, and how many times each is
// placed on the full-node mesh (real time) and on the virtual mesh.
var placementSizes = []struct{ cards, real, virtual int }{
	{1, 20, 20}, {8, 10, 10}, {64, 6, 6}, {1000, 3, 3},
}

// placementVirtual and placementReal time submit → every share running for jobs of 1, 8, 64
// and 1000 cards: on the full-node mesh in real time (sizes beyond its
// capacity are shrunk to half its cards, with a note), and on the
// virtual mesh of VirtualNodes × CardsPerNode in protocol time and round
// trips at both latencies. Jobs of one size are placed one after the
// other, each cancelled before the next.
func placementVirtual(ctx context.Context, r *runner) error {
	for _, vl := range virtualLatencies {
		r.cfg.Progress(fmt.Sprintf("placement: virtual mesh of %d nodes, %v one-way", r.cfg.VirtualNodes, vl.d))
		v, err := newVirtualMesh(r.cfg.VirtualNodes, r.cfg.CardsPerNode, r.cfg.Seed, virtualOptions{Latency: vl.d})
		if err != nil {
			return err
		}
		line := Line{Name: fmt.Sprintf("%s, %d nodes", vl.clock, r.cfg.VirtualNodes)}
		for _, sz := range capSizes(r.cfg.VirtualNodes*r.cfg.CardsPerNode, nil) {
			cards := sz.cards
			var lat, wall []time.Duration
			msgs := 0
			for i := range r.cfg.samples(sz.virtual, 2) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				id := fmt.Sprintf("p%d-%d", cards, i)
				began := time.Now()
				d, m, err := v.place(ctx, sleepSpec(id, cards), 30*time.Second)
				if err != nil {
					return err
				}
				lat, wall, msgs = append(lat, d), append(wall, time.Since(began)), msgs+m
				v.cancel(id)
			}
			l := sim.LatencyOf("", lat)
			c := text.Count(cards, "card")
			if vl.clock == ClockVirtualLAN {
				// The same placements in real time: what the market cores
				// of every node spend on it on this machine, in one process
				// (messages delivered in memory), plus the protocol time at
				// 0.5 ms links.
				w := sim.LatencyOf("", wall)
				total := w.P50 + l.P50
				r.row(target(Row{Scenario: ScenarioPlacement, Case: c + ", market core in memory", Clock: ClockReal, Metric: "median", Value: ms(total), Unit: "ms", N: w.Count,
					Note: fmt.Sprintf("%.0f ms of computation on %d nodes + %.1f ms protocol time at 0.5 ms links", ms(w.P50), r.cfg.VirtualNodes, ms(l.P50))},
					"< 1000 ms", total < time.Second))
			}
			row := Row{Scenario: ScenarioPlacement, Case: c, Clock: vl.clock, Metric: "median", Value: ms(l.P50), Unit: "ms", N: l.Count}
			r.row(row)
			row.Metric, row.Value = "p99", ms(l.P99)
			r.row(row)
			rt := v.rtts(l.P50)
			r.row(target(Row{Scenario: ScenarioPlacement, Case: c, Clock: vl.clock, Metric: "median round trips", Value: rt, Unit: "RTT", N: l.Count,
				Note: fmt.Sprintf("%.0f messages per job", float64(msgs)/float64(len(lat)))}, "≤ 3 RTT", rt <= 3.05))
			line.Points = append(line.Points, Point{X: float64(cards), Y: ms(l.P50)})
		}
		r.plotLine(placementPlot(), line)
	}
	return nil
}

// placementPlot is the plot of placement latency against job size.
func placementPlot() Plot {
	return Plot{File: "placement.svg", Title: "Placement latency (median) vs job size", XLabel: "cards per job", YLabel: "submit → all shares running (ms)", LogX: true, LogY: true}
}

// placementReal is runPlacement's real-time half.
func placementReal(ctx context.Context, r *runner) error {
	m, err := r.fullMesh(ctx)
	if err != nil {
		return err
	}
	gw := m.c.Gateway()
	line := Line{Name: fmt.Sprintf("real, %d full nodes", r.cfg.Nodes)}
	for _, sz := range capSizes(m.cards, func(want, limit int) {
		r.note("placement: the %d-node mesh holds %d cards, so its largest job is %d cards, not %d (run with --nodes %d or more for the full size)",
			r.cfg.Nodes, m.cards, limit, want, (2*want+r.cfg.CardsPerNode-1)/r.cfg.CardsPerNode+sim.DefaultCoordinators(r.cfg.Nodes))
	}) {
		cards := sz.cards
		var lat []time.Duration
		for i := range r.cfg.samples(sz.real, 1) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			id := fmt.Sprintf("place-%d-%d", cards, i)
			t0, err := m.submit(ctx, gw, sleepSpec(id, cards))
			if err != nil {
				return fmt.Errorf("submit %s: %w", id, err)
			}
			at, err := m.waitRunning(ctx, id, time.Minute)
			if err != nil {
				m.cancelAll(ctx, []string{id}) // a job left waiting would hold cards and coordinators
				return err
			}
			lat = append(lat, at.Sub(t0))
			if err := m.cancelAll(ctx, []string{id}); err != nil {
				return err
			}
		}
		l := sim.LatencyOf("", lat)
		c := text.Count(cards, "card")
		row := Row{Scenario: ScenarioPlacement, Case: c, Clock: ClockReal, Metric: "median", Value: ms(l.P50), Unit: "ms", N: l.Count}
		if sz.want == 1000 {
			row = target(row, "< 1000 ms", l.P50 < time.Second)
		}
		r.row(row)
		row = Row{Scenario: ScenarioPlacement, Case: c, Clock: ClockReal, Metric: "p99", Value: ms(l.P99), Unit: "ms", N: l.Count}
		r.row(row)
		line.Points = append(line.Points, Point{X: float64(cards), Y: ms(l.P50)})
	}
	r.plotLine(placementPlot(), line)
	return nil
}

// placementSize is a job size to place on a mesh.
type placementSize struct{ want, cards, real, virtual int }

// capSizes returns placementSizes, each at most half of capacity cards
// (the 1000 cards are a quarter of a 1000 × 4 mesh; shrunk
// reports each size cut), without repeats.
func capSizes(capacity int, shrunk func(want, limit int)) []placementSize {
	var out []placementSize
	limit := max(capacity/2, 1)
	for _, sz := range placementSizes {
		ps := placementSize{want: sz.cards, cards: sz.cards, real: sz.real, virtual: sz.virtual}
		if ps.cards > limit {
			ps.cards = limit
			if shrunk != nil {
				shrunk(sz.cards, limit)
			}
		}
		if len(out) > 0 && out[len(out)-1].cards == ps.cards {
			out[len(out)-1].want = ps.want
			continue
		}
		out = append(out, ps)
	}
	return out
}

// controllers counts the coordinators without cards of a plan.
func controllers(plan []sim.Supplier) int {
	n := 0
	for _, s := range plan {
		if s.Tier == sim.TierControl {
			n++
		}
	}
	return n
}
