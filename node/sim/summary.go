package sim

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
)

// Summary is what a demo did: placement and reroute latency, utilization
// and cost, and the invariant checks.
type Summary struct {
	Seed  uint64
	Mesh  string // Describe(plan)
	Nodes int
	Cards int
	Chaos bool
	// ChurnFrom says where the churn came from (with Chaos): the tiers'
	// churn or an availability trace.
	ChurnFrom string
	// Churned lists the departures and returns carried out, with when
	// (after the workload started).
	Churned  []ChaosEvent
	Workload string
	Duration time.Duration // asked
	Elapsed  time.Duration // of the workload (shorter when stopped early)
	// Stopped is the phase the demo was in when ctx ended it: "" when it
	// ran its Duration; PhaseStarting or PhaseForming when no job ran.
	Stopped Phase
	// Started is how many nodes were up when it was stopped while
	// starting or forming.
	Started int
	// Formed is how far the mesh had formed when the workload started.
	Formed Formation
	Jobs   Counts
	// Placement is the latency from submission to every share running, of
	// each kind of job and of all ("all").
	Placement []Latency
	// Reroutes is the latency from a share's loss being noticed
	// (rerouting) to the job running whole again.
	Reroutes Latency
	Left     int // suppliers that left or crashed
	Joined   int // suppliers that came back
	Training ScaleResult
	// Utilization is each model's busy card-time over its card-time up.
	Utilization []ModelBusy
	// Cost is the spend and normalized compute of each kind of job and of
	// all ("all").
	Cost       []Cost
	Invariants []Check
	// Unfinished lists the jobs that failed, and jobs that were waiting or
	// rerouting at the end (at most 8 of those), with why.
	Unfinished []string
	// Ends counts how the attempts that are over ended: "exited",
	// "preempted", "lost: <reason>"...
	Ends map[string]int
}

// Latency summarizes a set of durations.
type Latency struct {
	Kind               string
	Count              int
	P50, P90, P99, Max time.Duration
}

// LatencyOf summarizes ds (nearest-rank percentiles).
func LatencyOf(kind string, ds []time.Duration) Latency {
	l := Latency{Kind: kind, Count: len(ds)}
	if len(ds) == 0 {
		return l
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	l.P50, l.P90, l.P99, l.Max = Percentile(s, 0.5), Percentile(s, 0.9), Percentile(s, 0.99), s[len(s)-1]
	return l
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 1) of
// sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Cost is the bill of a kind of job.
type Cost struct {
	Kind string
	// CNY is what the coordinators billed.
	CNY float64
	// CUHours is the normalized compute delivered: card-hours × compute
	// units (A100 = 1). Cards of unknown compute are left out of both
	// CUHours and the CNY that PerCUHour divides.
	CUHours float64
	// PerCUHour is CNY per CU-hour on cards of known compute.
	PerCUHour float64
	// UnknownCardHours are card-hours on cards of unknown compute.
	UnknownCardHours float64
}

// Check is one invariant check.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// OK reports whether every invariant held.
func (s *Summary) OK() bool {
	for _, c := range s.Invariants {
		if !c.OK {
			return false
		}
	}
	return true
}

// summarize builds the Summary from what the observer saw.
func (d *demo) summarize(form Formation, elapsed time.Duration) *Summary {
	d.mu.Lock()
	scale := d.scale
	source := d.source
	churnOf := d.churnOf
	d.mu.Unlock()
	o := d.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &Summary{Seed: d.cfg.Seed, Mesh: Describe(d.plan), Nodes: len(d.plan), Chaos: d.cfg.Chaos, Workload: source,
		Duration: d.cfg.Duration, Elapsed: elapsed, Formed: form, Jobs: o.countsLocked(), Left: o.left, Joined: o.joined,
		Training: scale, Utilization: o.busyLocked(), ChurnFrom: churnOf, Churned: slices.Clone(o.churned)}
	for _, p := range d.plan {
		s.Cards += p.Cards
	}
	byKind := map[string][]time.Duration{}
	var all []time.Duration
	for _, id := range o.order {
		j := o.jobs[id]
		if !j.acked || j.running.IsZero() {
			continue
		}
		lat := max(j.running.Sub(j.submitted), 0)
		byKind[j.kind] = append(byKind[j.kind], lat)
		all = append(all, lat)
	}
	for _, k := range kindOrder(byKind) {
		s.Placement = append(s.Placement, LatencyOf(k, byKind[k]))
	}
	s.Placement = append(s.Placement, LatencyOf("all", all))
	s.Reroutes = LatencyOf("reroute", o.reroutes)
	s.Ends = map[string]int{}
	for _, j := range o.jobs {
		for _, p := range j.rec.Placements {
			switch p.State {
			case market.PlacementExited, market.PlacementStopped:
				s.Ends[string(p.State)]++
			case market.PlacementLost, market.PlacementRejected:
				key := string(p.State)
				if p.Cause != "" {
					key += " (" + string(p.Cause) + ")"
				}
				if r := reasonClass(p.Reason); r != "" && r != string(p.Cause) {
					key += ": " + r
				}
				s.Ends[key]++
			}
		}
	}
	s.Cost = o.costsLocked()
	s.Invariants = o.checksLocked()
	for _, id := range o.order {
		j := o.jobs[id]
		switch j.state {
		case market.JobFailed:
			s.Unfinished = append(s.Unfinished, fmt.Sprintf("%s (%s, %s): failed: %s", id, j.kind, text.Count(j.spec.Cards, "card"), j.rec.Reason))
		case market.JobPending, market.JobBidding, market.JobPlacing, market.JobRerouting:
			if len(s.Unfinished) < 8 {
				reason := j.rec.Reason
				if !j.hasRec {
					reason = "no record from its coordinator " + j.from
				}
				line := fmt.Sprintf("%s (%s, %s): %s", id, j.kind, text.Count(j.spec.Cards, "card"), j.state)
				if reason != "" {
					line += ": " + reason
				}
				s.Unfinished = append(s.Unfinished, line)
			}
		}
	}
	return s
}

func kindOrder[V any](m map[string]V) []string {
	rank := map[string]int{KindInference: 0, KindPreemptibleBatch: 1, KindFineTune: 2, KindGang: 3, KindTraining: 4}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int {
		ra, oka := rank[a]
		rb, okb := rank[b]
		switch {
		case oka && okb:
			return ra - rb
		case oka:
			return -1
		case okb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return ks
}

func (o *observer) costsLocked() []Cost {
	byKind := map[string]*Cost{}
	total := &Cost{Kind: "all"}
	for _, j := range o.jobs {
		if !j.hasRec {
			continue
		}
		c := byKind[j.kind]
		if c == nil {
			c = &Cost{Kind: j.kind}
			byKind[j.kind] = c
		}
		for _, p := range j.rec.Placements {
			cu := 0.0
			if m, ok := o.cat.Lookup(p.Model); ok {
				cu = m.ComputeUnits
			}
			for _, x := range []*Cost{c, total} {
				x.CNY += p.CostCNY
				if cu > 0 {
					x.CUHours += p.CardSeconds * cu / 3600
					x.PerCUHour += p.CostCNY // CNY on known compute, divided below
				} else {
					x.UnknownCardHours += p.CardSeconds / 3600
				}
			}
		}
	}
	var out []Cost
	for _, k := range kindOrder(byKind) {
		out = append(out, *byKind[k])
	}
	out = append(out, *total)
	for i := range out {
		if out[i].CUHours > 0 {
			out[i].PerCUHour /= out[i].CUHours
		} else {
			out[i].PerCUHour = 0
		}
	}
	return out
}

// checksLocked checks the invariants of DESIGN.md that a demo can see.
func (o *observer) checksLocked() []Check {
	var checks []Check
	// 1. No card is awarded to two live jobs at once: no card is held by
	// two processes at any sample.
	c := Check{Name: "no card held by two jobs at once", OK: len(o.violations) == 0,
		Detail: text.Count(o.samples, "look") + " at every node's processes"}
	if !c.OK {
		c.Detail = fmt.Sprintf("%s, first: %s", text.Count(len(o.violations), "time"), o.violations[0])
	}
	checks = append(checks, c)

	// 2. No acknowledged job is lost.
	acked, accounted := 0, 0
	var lost []string
	for _, id := range o.order {
		j := o.jobs[id]
		if !j.acked {
			continue
		}
		acked++
		if j.hasRec && j.rec.State != market.JobMoved {
			accounted++
		} else {
			lost = append(lost, id)
		}
	}
	c = Check{Name: "no acknowledged job lost", OK: len(lost) == 0,
		Detail: fmt.Sprintf("%d of %d held by their coordinators at the end", accounted, acked)}
	if !c.OK {
		c.Detail += fmt.Sprintf("; missing: %s", strings.Join(first(lost, 5), ", "))
	}
	checks = append(checks, c)

	// A job fails only by its own exit or a spec the mesh can never hold
	// (refused at once): never because a supplier went away.
	var badFail []string
	for _, id := range o.order {
		j := o.jobs[id]
		if j.hasRec && j.rec.State == market.JobFailed && j.rec.ExitCode == nil && len(j.rec.Placements) > 0 {
			badFail = append(badFail, fmt.Sprintf("%s (%s)", id, j.rec.Reason))
		}
	}
	c = Check{Name: "no job failed but by its own exit", OK: len(badFail) == 0, Detail: fmt.Sprintf("%d failed", o.countsLocked().Failed)}
	if !c.OK {
		c.Detail = strings.Join(first(badFail, 3), "; ")
	}
	checks = append(checks, c)

	// 4. No winner is paid more than the job's max price, nor below its bid.
	var badPrice []string
	placements := 0
	for _, id := range o.order {
		j := o.jobs[id]
		if !j.hasRec {
			continue
		}
		for _, p := range j.rec.Placements {
			if p.State == market.PlacementRejected || p.State == market.PlacementAwarded {
				continue
			}
			placements++
			if p.PriceCNY > j.rec.Spec.MaxPriceCNY+1e-9 || p.PriceCNY < p.BidCNY-1e-9 {
				badPrice = append(badPrice, fmt.Sprintf("%s share %d: paid %.2f, bid %.2f, max %.2f", id, p.Share, p.PriceCNY, p.BidCNY, j.rec.Spec.MaxPriceCNY))
			}
		}
	}
	c = Check{Name: "every price between the supplier's bid and the job's max", OK: len(badPrice) == 0,
		Detail: text.Count(placements, "placement")}
	if !c.OK {
		c.Detail = strings.Join(first(badPrice, 3), "; ")
	}
	checks = append(checks, c)

	// 3 (as a demo sees it). A share's attempts carry rising epochs.
	var badEpoch []string
	for _, id := range o.order {
		j := o.jobs[id]
		if !j.hasRec {
			continue
		}
		last := map[int]uint64{}
		for _, p := range j.rec.Placements {
			if e, ok := last[p.Share]; ok && p.Epoch <= e {
				badEpoch = append(badEpoch, fmt.Sprintf("%s share %d: epoch %d after %d", id, p.Share, p.Epoch, e))
			}
			last[p.Share] = p.Epoch
		}
	}
	c = Check{Name: "a share's attempts carry rising epochs", OK: len(badEpoch) == 0, Detail: "every record"}
	if !c.OK {
		c.Detail = strings.Join(first(badEpoch, 3), "; ")
	}
	checks = append(checks, c)
	return checks
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// WriteText writes the summary as the tables the demo prints at the end.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	switch s.Stopped {
	case PhaseStarting, PhaseForming:
		fmt.Fprintf(&b, "gpumesh demo · seed %d · %s\n", s.Seed, s.Mesh)
		if s.Stopped == PhaseStarting {
			fmt.Fprintf(&b, "stopped while starting: %d of %s up\n", s.Started, text.Count(s.Nodes, "node"))
		} else {
			f := s.Formed
			fmt.Fprintf(&b, "stopped while the mesh formed: %d of %s up; the gateway heard %d of them, %d of %s, %d of %s\n",
				f.Up, text.Count(s.Nodes, "node"), f.Members, f.Coordinators, text.Count(f.Coordinating, "coordinator"), f.Book, text.Count(f.Cards, "card"))
		}
		b.WriteString("nothing ran: no job was submitted, no supplier left\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	chaos := "off"
	if s.Chaos {
		chaos = fmt.Sprintf("on: %s left, %d came back", text.Count(s.Left, "supplier"), s.Joined)
		if s.ChurnFrom != "" {
			chaos += " (" + s.ChurnFrom + ")"
		}
	}
	fmt.Fprintf(&b, "gpumesh demo · seed %d · %s of %s · %s · chaos %s\n", s.Seed, round(s.Elapsed), round(s.Duration), s.Mesh, chaos)
	fmt.Fprintf(&b, "workload: %s\n\n", s.Workload)
	j := s.Jobs
	fmt.Fprintf(&b, "jobs: %d submitted, %d placed, %d succeeded, %d running at the end, %d waiting, %d failed, %d refused, %s\n\n",
		j.Submitted, j.Placed, j.Succeeded, j.Running, j.Waiting, j.Failed, j.Refused, text.Count(j.Rerouted, "reroute"))

	for _, u := range s.Unfinished {
		fmt.Fprintf(&b, "  unfinished: %s\n", u)
	}
	if len(s.Unfinished) > 0 {
		b.WriteString("\n")
	}
	if len(s.Ends) > 0 {
		var keys []string
		for k := range s.Ends {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString("attempts that ended\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "  %5d  %s\n", s.Ends[k], k)
		}
		b.WriteString("\n")
	}
	b.WriteString("placement latency (submit → every share running)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  kind\tjobs\tp50\tp90\tp99\tmax\t")
	for _, l := range s.Placement {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t\n", l.Kind, l.Count, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max))
	}
	tw.Flush()
	r := s.Reroutes
	if r.Count > 0 {
		fmt.Fprintf(&b, "\nreroutes: %d, from a lost share noticed to the job whole again: p50 %s, p90 %s, p99 %s, max %s\n",
			r.Count, ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max))
	} else {
		b.WriteString("\nreroutes: none\n")
	}
	if t := s.Training; t.Job != "" {
		switch {
		case t.Err != "":
			fmt.Fprintf(&b, "training job %s: not scaled: %s\n", t.Job, t.Err)
		default:
			fmt.Fprintf(&b, "training job %s: %d → %s at %s: %d running after %s", t.Job, t.From, text.Count(t.To, "card"), round(t.At), t.Reached, ms(t.Took))
			if t.Down {
				b.WriteString("; back to 8 later")
			}
			b.WriteString("\n")
		}
	}

	b.WriteString("\nutilization by model (busy card-time / card-time up)\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  model\tcards up\tbusy at end\tutilization\t")
	for _, u := range s.Utilization {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%.0f%%\t\n", u.Model, u.Up, u.Busy, 100*u.Utilization)
	}
	tw.Flush()

	b.WriteString("\ncost (billed per second; CU = compute units, A100 = 1)\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  kind\tCNY\tCU-hours\tCNY per CU-hour\t")
	unknown := 0.0
	for _, c := range s.Cost {
		per := "-"
		if c.CUHours > 0 {
			per = fmt.Sprintf("%.2f", c.PerCUHour)
		}
		fmt.Fprintf(tw, "  %s\t%.4f\t%.4f\t%s\t\n", c.Kind, c.CNY, c.CUHours, per)
		if c.Kind == "all" {
			unknown = c.UnknownCardHours
		}
	}
	tw.Flush()
	if unknown > 0 {
		fmt.Fprintf(&b, "  (%.4f card-hours on cards of unpublished compute — Hygon, Kunlunxin — are not in CU-hours)\n", unknown)
	}

	b.WriteString("\ninvariants\n")
	for _, c := range s.Invariants {
		mark := "✓"
		if !c.OK {
			mark = "✗ FAILED:"
		}
		fmt.Fprintf(&b, "  %s %s (%s)\n", mark, c.Name, c.Detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// ms formats a latency in milliseconds below 10 s, else seconds.
func ms(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	case d < 10*time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// Durations and lease names in a placement's reason ("no lease renewal
// for 5.057s", "lease L4 expired"), which reasonClass blurs.
var (
	reasonDuration = regexp.MustCompile(`\b\d+(\.\d+)?(ms|s)\b`)
	reasonLease    = regexp.MustCompile(`\bL\d+\b`)
)

// reasonClass is a reason with its durations and lease names blurred, so
// that attempts that ended the same way count together.
func reasonClass(reason string) string {
	reason = reasonDuration.ReplaceAllString(reason, "…")
	return reasonLease.ReplaceAllString(reason, "L…")
}
