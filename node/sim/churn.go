package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/node/sim/workload"
)

// ChaosEvent is one supplier's leaving or coming back.
type ChaosEvent struct {
	At       time.Duration
	Supplier string
	Up       bool // coming back
	Crash    bool // leaving without a goodbye (home PCs are switched off)
}

// minGap is the least time between two events of one supplier: an outage
// or a session shorter than that after scaling is stretched to it.
const minGap = time.Millisecond

// ChaosSchedule draws when each supplier that does not coordinate leaves
// and comes back within duration: up-sessions from its tier's churn, run
// timeScale times faster. Home PCs crash; café PCs leave gracefully.
func ChaosSchedule(plan []Supplier, duration time.Duration, timeScale float64, seed uint64) []ChaosEvent {
	r := rand.New(rand.NewPCG(seed, 0xc4a05))
	var out []ChaosEvent
	for _, s := range plan {
		if s.Coordinates || s.Churn.MTBF <= 0 {
			continue
		}
		churn := workloadChurn(s, timeScale)
		for i, ss := range workload.Sessions(s.Name, churn, duration, r) {
			if i > 0 {
				out = append(out, ChaosEvent{At: ss.Up, Supplier: s.Name, Up: true})
			}
			if ss.Down != workload.Forever {
				out = append(out, ChaosEvent{At: ss.Down, Supplier: s.Name, Crash: s.Tier == TierHome})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b ChaosEvent) int { return int(a.At - b.At) })
	return out
}

func workloadChurn(s Supplier, timeScale float64) workload.Churn {
	return workload.Churn{MTBF: time.Duration(float64(s.Churn.MTBF) / timeScale), MTTR: time.Duration(float64(s.Churn.MTTR) / timeScale)}
}

// TraceNode is a node of an availability trace and the supplier it
// drives.
type TraceNode struct {
	Node, Supplier string
}

// TraceUse says how an availability trace was laid on a plan.
type TraceUse struct {
	Name string // the trace's
	// Drives pairs trace nodes with suppliers, in plan order.
	Drives []TraceNode
	// Unused lists the trace nodes left without a supplier.
	Unused []string
}

// AvailabilitySchedule lays an availability trace on a plan and returns
// the events within duration, the trace run timeScale times faster.
//
// Only suppliers that do not coordinate come and go. A trace node named
// like such a supplier ("home-3", "cafe-12") drives it; the other trace
// nodes, in name order, drive the suppliers still free, in plan order.
// Suppliers left over stay up; trace nodes left over are unused. A
// supplier is up while its node's sessions say so: one whose first
// session starts later goes down when the workload starts; after its last
// session ends it stays down. Sessions that touch are one; outages and
// sessions shorter than a millisecond once scaled are stretched to one. Home PCs crash; others
// leave gracefully.
func AvailabilitySchedule(plan []Supplier, av workload.Availability, duration time.Duration, timeScale float64) ([]ChaosEvent, TraceUse) {
	use := TraceUse{Name: av.Name}
	var free []Supplier // suppliers that come and go, not yet driven
	for i, s := range plan {
		if i > 0 && !s.Coordinates { // the first is the gateway: it stays
			free = append(free, s)
		}
	}
	take := func(i int) Supplier {
		s := free[i]
		free = slices.Delete(free, i, i+1)
		return s
	}
	driven := map[string]string{} // supplier → trace node
	var rest []string
	for _, n := range av.Nodes() {
		if i := slices.IndexFunc(free, func(s Supplier) bool { return s.Name == n }); i >= 0 {
			driven[take(i).Name] = n
		} else {
			rest = append(rest, n)
		}
	}
	for _, n := range rest {
		if len(free) == 0 {
			use.Unused = append(use.Unused, n)
			continue
		}
		driven[take(0).Name] = n
	}
	var out []ChaosEvent
	for _, s := range plan {
		n, ok := driven[s.Name]
		if !ok {
			continue
		}
		use.Drives = append(use.Drives, TraceNode{Node: n, Supplier: s.Name})
		out = append(out, sessionEvents(s, av.Of(n), duration, timeScale)...)
	}
	slices.SortStableFunc(out, func(a, b ChaosEvent) int { return int(a.At - b.At) })
	return out, use
}

// sessionEvents turns one trace node's sessions into its supplier's events
// within duration.
func sessionEvents(s Supplier, sessions []workload.Session, duration time.Duration, timeScale float64) []ChaosEvent {
	scale := func(d time.Duration) time.Duration {
		if d == workload.Forever {
			return d
		}
		return time.Duration(float64(d) / timeScale)
	}
	var out []ChaosEvent
	up := true // every supplier starts up
	emit := func(at time.Duration, isUp bool) {
		if n := len(out); n > 0 {
			at = max(at, out[n-1].At+minGap)
		}
		if at >= duration || isUp == up {
			return
		}
		out = append(out, ChaosEvent{At: at, Supplier: s.Name, Up: isUp, Crash: !isUp && s.Tier == TierHome})
		up = isUp
	}
	for i, ss := range mergeTouching(sessions) {
		from, to := scale(ss.Up), scale(ss.Down)
		if i == 0 && from >= minGap {
			emit(0, false) // down until its first session
		}
		emit(from, true)
		if to != workload.Forever {
			emit(to, false)
		}
	}
	return out
}

// mergeTouching joins sessions that touch (one ends when the next
// starts): the node stayed up.
func mergeTouching(sessions []workload.Session) []workload.Session {
	var out []workload.Session
	for _, ss := range sessions {
		if n := len(out); n > 0 && out[n-1].Down == ss.Up {
			out[n-1].Down = ss.Down
			continue
		}
		out = append(out, ss)
	}
	return out
}

// runChurn carries out each supplier's events in order, one goroutine per
// supplier, until ctx ends, and waits for them.
func (d *demo) runChurn(ctx context.Context, start time.Time, events []ChaosEvent) {
	bySupplier := map[string][]ChaosEvent{}
	var order []string
	for _, ev := range events {
		if _, ok := bySupplier[ev.Supplier]; !ok {
			order = append(order, ev.Supplier)
		}
		bySupplier[ev.Supplier] = append(bySupplier[ev.Supplier], ev)
	}
	done := make(chan struct{}, len(order))
	for _, name := range order {
		go func() {
			defer func() { done <- struct{}{} }()
			for _, ev := range bySupplier[name] {
				if !d.churn(ctx, start, ev) {
					return
				}
			}
		}()
	}
	for range order {
		<-done
	}
}

// churn carries out one chaos event at its time and reports false once
// ctx has ended or the cluster closed. One that finds the supplier in the
// wrong state (a change still under way) tries again briefly.
func (d *demo) churn(ctx context.Context, start time.Time, ev ChaosEvent) bool {
	if !sleepUntil(ctx, start.Add(ev.At)) {
		return false
	}
	for range 50 {
		var err error
		switch {
		case ev.Up:
			err = d.cluster.Start(ctx, ev.Supplier)
		case ev.Crash:
			err = d.cluster.Crash(ev.Supplier)
		default:
			err = d.cluster.Leave(ev.Supplier)
		}
		if err == nil {
			done := ev
			done.At = time.Since(start)
			d.obs.churn(done)
			return true
		}
		if errors.Is(err, ErrClusterClosed) || ctx.Err() != nil {
			return false
		}
		d.cfg.Logger.Debug("sim: churn", "event", fmt.Sprintf("%+v", ev), "err", err)
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) { // the supplier's previous change is still under way
			return false
		}
	}
	return true
}
