//go:build unix

package e2e

// The chaos suite's judge: what the attempts left behind (markers), the
// jobs settled at the end, and DESIGN.md's invariants checked against both.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// marker is what an attempt left in the marks directory.
type marker struct {
	started, ended time.Time
	pgid           int
	from, at       int  // the step it resumed from and the one it reached (step jobs)
	hasFrom        bool // it wrote where it resumed
	twice          bool // a second attempt started under the same share and epoch
}

// markers returns the markers of a job's attempts by share and epoch.
func (c *cluster) markers(job string) map[[2]uint64]marker {
	out := map[[2]uint64]marker{}
	ents, _ := os.ReadDir(c.marks)
	for _, e := range ents {
		var share int
		var epoch uint64
		name := e.Name()
		if !strings.HasPrefix(name, job+".") {
			continue
		}
		rest := strings.TrimPrefix(name, job+".")
		var kind string
		if i := strings.LastIndexByte(rest, '.'); i >= 0 {
			kind = rest[i+1:]
			if _, err := fmt.Sscanf(rest[:i], "%d.%d", &share, &epoch); err != nil {
				continue
			}
		}
		k := [2]uint64{uint64(share), epoch}
		m := out[k]
		info, err := e.Info()
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(c.marks, name))
		switch kind {
		case "start":
			m.started = info.ModTime()
			fmt.Sscanf(string(b), "%d", &m.pgid)
		case "end":
			m.ended = info.ModTime()
		case "from":
			_, err := fmt.Sscanf(string(b), "%d", &m.from)
			m.hasFrom = err == nil
		case "at":
			fmt.Sscanf(string(b), "%d", &m.at)
		case "twice":
			m.twice = true
		}
		out[k] = m
	}
	return out
}

// attemptStarted reports when share/epoch of job wrote its start marker.
func (c *cluster) attemptStarted(job string, share int, epoch uint64) (time.Time, bool) {
	m, ok := c.markers(job)[[2]uint64{uint64(share), epoch}]
	return m.started, ok && !m.started.IsZero()
}

// settle waits until every job has ended (cancelling the services first)
// and returns the final records; a job still going at the deadline is
// reported with its last record and counted in unsettled.
func (c *cluster) settle(within time.Duration) (recs map[string]market.JobRecord, unsettled int) {
	c.t.Helper()
	for _, j := range c.jobs {
		if j.spec.Kind == market.KindService && !j.cancelled {
			c.cancel(j)
		}
	}
	out := map[string]market.JobRecord{}
	errs := map[string]error{}
	deadline := time.Now().Add(within)
	for {
		left := 0
		for _, j := range c.jobs {
			if r, ok := out[j.id]; ok && r.State.Terminal() && len(r.Live()) == 0 {
				continue
			}
			r, err := c.record(j.id)
			if err == nil {
				out[j.id] = r
			}
			errs[j.id] = err
			if err != nil || !r.State.Terminal() || len(r.Live()) > 0 {
				left++
			}
		}
		if left == 0 {
			return out, 0
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	for _, j := range c.jobs {
		if r := out[j.id]; !r.State.Terminal() || len(r.Live()) > 0 {
			c.t.Errorf("job %s did not end within %v: %s (%v)", j.id, within, describe(&r), errs[j.id])
			unsettled++
		}
	}
	return out, unsettled
}

// billSlack is how much more usage than its award-to-end interval a
// placement may carry: the runner's and coordinator's clocks are the same
// here, but a report is measured a little after the process ended.
const billSlack = 300 * time.Millisecond

// verify checks DESIGN.md's invariants on the final records and the
// markers, and that no process of any attempt outlives the test's jobs.
// It returns the violations, one line each.
func (c *cluster) verify(recs map[string]market.JobRecord) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	for _, j := range c.jobs {
		rec := recs[j.id]
		// No acknowledged job is lost: it ended by its own exit, or the
		// test cancelled it.
		switch {
		case rec.State == market.JobSucceeded && j.exit == 0:
		case rec.State == market.JobFailed && j.exit != 0 && rec.ExitCode != nil && *rec.ExitCode == j.exit:
		case rec.State == market.JobCancelled && j.cancelled:
		default:
			add("job %s lost or wrongly ended: %s (exit %v, wanted exit %d, cancelled %v)", j.id, describe(&rec), rec.ExitCode, j.exit, j.cancelled)
		}
		marks := c.markers(j.id)
		for k, m := range marks {
			if m.twice {
				add("job %s share %d epoch %d: two attempts started under one epoch (two coordinators placed the share)", j.id, k[0], k[1])
			}
		}
		if j.spec.Env[envSteps] != "" {
			bad = append(bad, checkResumes(j.id, marks)...)
		}
		// At most one accepted result per share, and only a result that an
		// attempt really produced.
		exited := map[int][]uint64{}
		var cost float64
		for _, p := range rec.Placements {
			cost += p.CostCNY
			k := [2]uint64{uint64(p.Share), p.Epoch}
			if p.State == market.PlacementExited {
				exited[p.Share] = append(exited[p.Share], p.Epoch)
				if marks[k].ended.IsZero() && (p.ExitCode == nil || *p.ExitCode == j.exit) && j.spec.Kind != market.KindService {
					add("job %s share %d epoch %d: exit accepted, but the attempt never finished its work", j.id, p.Share, p.Epoch)
				}
			}
			// Usage is billed only while the attempt was the share's live
			// one: never beyond its award-to-end interval.
			end := p.EndedAt
			if end.IsZero() {
				end = time.Now()
			}
			if limit := float64(len(p.Cards)) * (end.Sub(p.AwardedAt) + billSlack).Seconds(); p.CardSeconds > limit {
				add("job %s share %d epoch %d (%s): billed %.2f card-seconds, but it was live only %.2f s", j.id, p.Share, p.Epoch, p.State, p.CardSeconds, end.Sub(p.AwardedAt).Seconds())
			}
			if m, ok := marks[k]; (!ok || m.started.IsZero()) && p.CardSeconds > 0.5*float64(len(p.Cards)) {
				add("job %s share %d epoch %d: billed %.2f card-seconds, but its process never started", j.id, p.Share, p.Epoch, p.CardSeconds)
			}
			if p.PriceCNY > j.spec.MaxPriceCNY+1e-9 || p.PriceCNY+1e-9 < p.BidCNY {
				add("job %s share %d epoch %d: price %.4f outside [bid %.4f, max %.4f]", j.id, p.Share, p.Epoch, p.PriceCNY, p.BidCNY, j.spec.MaxPriceCNY)
			}
		}
		bad = append(bad, billedTwice(j.id, rec.Placements)...)
		for share, epochs := range exited {
			if len(epochs) > 1 && j.spec.Kind != market.KindService {
				add("job %s share %d: %d results accepted (epochs %v)", j.id, share, len(epochs), epochs)
			}
		}
		if diff := cost - rec.CostCNY; diff > 1e-6 || diff < -1e-6 {
			add("job %s: bill %.6f CNY, but its placements sum to %.6f", j.id, rec.CostCNY, cost)
		}
	}
	// No card runs two attempts at once, and no share two attempts
	// beyond the fencing grace, as the processes showed.
	c.mu.Lock()
	bad = append(bad, c.doubleUse...)
	bad = append(bad, c.shares.violations(func(job string) bool {
		why, ok := c.bothSides[job]
		if ok {
			c.t.Logf("job %s ran a share on both sides of a partition, on purpose: %s", job, why)
		}
		return ok
	})...)
	c.mu.Unlock()
	return bad
}

// startedAfterEnd lists the attempts that started after their job's end
// as its final record states it: a job that ended must stay ended. A job
// cancelled, or failed by one share's exit, may still see an award made
// just before the end start on its runner before the Stop reaches it: such
// an attempt gets endSlack.
func (c *cluster) startedAfterEnd(recs map[string]market.JobRecord) []string {
	const endSlack = time.Second
	var bad []string
	for _, j := range c.jobs {
		rec := recs[j.id]
		if !rec.State.Terminal() || rec.EndedAt.IsZero() {
			continue
		}
		slack := time.Duration(0)
		if rec.State != market.JobSucceeded {
			slack = endSlack
		}
		for k, m := range c.markers(j.id) {
			if !m.started.IsZero() && m.started.After(rec.EndedAt.Add(slack)) {
				bad = append(bad, fmt.Sprintf("job %s share %d epoch %d started %v after the job %s", j.id, k[0], k[1], m.started.Sub(rec.EndedAt).Round(time.Millisecond), rec.State))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// checkResumes checks where a step job's attempts resumed (.from) against
// the steps attempts reached (.at): an attempt resumes from 0 or from a
// step an attempt that started before it had reached — never from
// progress no attempt made — and, among the attempts one coordinator
// placed in one term (their epochs share its slot of the term's range;
// market/term.go), never from an earlier step than one it placed before:
// that coordinator's latest accepted checkpoint only moves forward.
func checkResumes(job string, marks map[[2]uint64]marker) []string {
	type attempt struct {
		share int
		epoch uint64
		marker
	}
	var as []attempt
	for k, m := range marks {
		if !m.started.IsZero() && m.hasFrom {
			as = append(as, attempt{int(k[0]), k[1], m})
		}
	}
	slices.SortFunc(as, func(a, b attempt) int { return a.started.Compare(b.started) })
	var bad []string
	reached := 0                 // the most any attempt started so far had reached
	last := map[uint64]attempt{} // coordinator run → its latest attempt
	for _, a := range as {
		if a.from > reached {
			bad = append(bad, fmt.Sprintf("job %s share %d epoch %d resumed from step %d, but the attempts before it reached at most step %d",
				job, a.share, a.epoch, a.from, reached))
		}
		run := (a.epoch - 1) / market.EpochsPerSlot
		if prev, ok := last[run]; ok && a.from < prev.from {
			bad = append(bad, fmt.Sprintf("job %s share %d epoch %d resumed from step %d, but epoch %d of the same coordinator and term had resumed from step %d: the checkpoint went back",
				job, a.share, a.epoch, a.from, prev.epoch, prev.from))
		}
		last[run] = a
		reached = max(reached, a.from, a.at)
	}
	return bad
}

// noStrayProcesses waits until no process of the test's jobs is left (a
// stopped attempt has its grace to end), and reports those that stay.
func (c *cluster) noStrayProcesses(within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		left := jobProcs(envMarks, c.marks)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var out []string
			for _, p := range left {
				out = append(out, fmt.Sprintf("process %d (group %d, parent %d, state %c) of a job still runs after every job ended", p.pid, p.pgrp, p.ppid, p.state))
			}
			return out
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// finish settles the jobs, checks every invariant and fails the test on a
// violation. It returns the final records and the number of violations,
// a job that did not end in time counted as one.
func (c *cluster) finish(within time.Duration) (map[string]market.JobRecord, int) {
	c.t.Helper()
	recs, unsettled := c.settle(within)
	if c.t.Failed() && os.Getenv("GPUMESH_CHAOS_LOGS") != "" {
		c.dumpStacks()
	}
	bad := c.verify(recs)
	bad = append(bad, c.startedAfterEnd(recs)...)
	bad = append(bad, c.noStrayProcesses(15*time.Second)...)
	for _, b := range bad {
		c.t.Errorf("invariant violated: %s", b)
	}
	if len(bad) > 0 {
		for _, j := range c.jobs {
			r := recs[j.id]
			c.t.Logf("final %s: %s", j.id, describe(&r))
		}
	}
	return recs, unsettled + len(bad)
}

// billedTwice lists the shares billed twice for the same time: two
// attempts of one share that both carry usage over windows (award to end)
// that overlap by more than the fencing grace. A share's work is billed
// once: an attempt that should never have started, or one that ran on
// beside its replacement, is not paid for the overlap.
func billedTwice(job string, pls []market.Placement) []string {
	var bad []string
	for i, a := range pls {
		for _, b := range pls[i+1:] {
			if a.Share != b.Share || a.CardSeconds <= 0 || b.CardSeconds <= 0 {
				continue
			}
			endA, endB := a.EndedAt, b.EndedAt
			if endA.IsZero() {
				endA = time.Now()
			}
			if endB.IsZero() {
				endB = time.Now()
			}
			start, end := a.AwardedAt, endA
			if b.AwardedAt.After(start) {
				start = b.AwardedAt
			}
			if endB.Before(end) {
				end = endB
			}
			if over := end.Sub(start); over > overlapGrace {
				bad = append(bad, fmt.Sprintf("job %s share %d: epochs %d and %d both billed over the same %v", job, a.Share, a.Epoch, b.Epoch, over.Round(time.Millisecond)))
			}
		}
	}
	return bad
}
