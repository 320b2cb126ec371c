package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/markettest"
)

// scaleupCards is the size a running elastic job grows to.
const scaleupCards = 1000

// elasticSpec is an elastic job of one card that may grow to max.
func elasticSpec(id string, max int) market.JobSpec {
	s := sleepSpec(id, 1)
	s.Elastic = &market.Elastic{Min: 1, Max: max}
	return s
}

// scaleupVirtual and scaleupReal grow a running elastic job from 1 card to 1000 (or half
// the mesh's cards, if fewer): on the virtual mesh in protocol time and
// round trips, and on the full-node mesh in real time, from the scale
// request until every card runs.
func scaleupVirtual(ctx context.Context, r *runner) error {
	for _, vl := range virtualLatencies {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		v, err := newVirtualMesh(r.cfg.VirtualNodes, r.cfg.CardsPerNode, r.cfg.Seed, virtualOptions{Latency: vl.d})
		if err != nil {
			return err
		}
		to := min(scaleupCards, r.cfg.VirtualNodes*r.cfg.CardsPerNode/2)
		if _, _, err := v.place(ctx, elasticSpec("grow", to), 10*time.Second); err != nil {
			return err
		}
		coord := v.h.Coordinator("grow")
		t0, sent0 := v.h.Now, v.h.Sent
		if err := v.h.Step(coord, market.ScaleJob{Now: v.h.Now, Job: "grow", Cards: to}); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		grown := func() bool { rec, _ := v.h.Job("grow"); return markettest.LiveCards(rec) >= to }
		ok, err := runUntil(ctx, v.h, grown, 30*time.Second)
		if err != nil {
			return err
		}
		if !ok {
			rec, _ := v.h.Job("grow")
			return fmt.Errorf("elastic job at %d of %d cards after 30 s of virtual time", markettest.LiveCards(rec), to)
		}
		d := v.h.Now.Sub(t0)
		c := fmt.Sprintf("1 → %d cards, %d nodes", to, r.cfg.VirtualNodes)
		r.row(Row{Scenario: ScenarioScaleup, Case: c, Clock: vl.clock, Metric: "time", Value: ms(d), Unit: "ms", N: 1})
		r.row(Row{Scenario: ScenarioScaleup, Case: c, Clock: vl.clock, Metric: "round trips", Value: v.rtts(d), Unit: "RTT", N: 1,
			Note: fmt.Sprintf("%d messages", v.h.Sent-sent0)})
	}
	return nil
}

// scaleupReal is the full-node mesh's half of the scale-up scenario.
func scaleupReal(ctx context.Context, r *runner) error {
	m, err := r.fullMesh(ctx)
	if err != nil {
		return err
	}
	to := min(scaleupCards, m.cards/2)
	if to < scaleupCards {
		r.note("scaleup: the %d-node mesh holds %d cards, so the job grows to %d, not %d", r.cfg.Nodes, m.cards, to, scaleupCards)
	}
	gw := m.c.Gateway()
	var took []time.Duration
	for i := range r.cfg.samples(3, 1) {
		id := fmt.Sprintf("grow-%d", i)
		if _, err := m.submit(ctx, gw, elasticSpec(id, to)); err != nil {
			return fmt.Errorf("submit %s: %w", id, err)
		}
		if _, err := m.waitRunning(ctx, id, time.Minute); err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := gw.Scale(ctx, id, to); err != nil {
			return fmt.Errorf("scale %s: %w", id, err)
		}
		reached, err := waitCards(ctx, m, id, to, time.Minute)
		if err != nil {
			m.cancelAll(ctx, []string{id})
			return fmt.Errorf("%w (at %d of %d cards)", err, reached, to)
		}
		took = append(took, time.Since(t0))
		if err := m.cancelAll(ctx, []string{id}); err != nil {
			return err
		}
	}
	med := medianOf(took)
	r.row(Row{Scenario: ScenarioScaleup, Case: fmt.Sprintf("1 → %d cards, %d full nodes", to, r.cfg.Nodes), Clock: ClockReal, Metric: "median", Value: ms(med), Unit: "ms", N: len(took),
		Note: "scale request until every card runs (record polled every 20 ms)"})
	return nil
}

// waitCards polls the job's record through the gateway until cards of it
// run, and returns the last count seen.
func waitCards(ctx context.Context, m *fullMesh, job string, cards int, timeout time.Duration) (int, error) {
	gw := m.c.Gateway()
	deadline := time.Now().Add(timeout)
	seen := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		rec, err := gw.Job(pctx, job)
		cancel()
		if err == nil {
			seen = markettest.LiveCards(rec)
			if seen >= cards {
				return seen, nil
			}
		}
		if time.Now().After(deadline) {
			return seen, fmt.Errorf("job %s: %d of %d cards running after %v", job, seen, cards, timeout)
		}
		select {
		case <-ctx.Done():
			return seen, ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling the record
		}
	}
}
