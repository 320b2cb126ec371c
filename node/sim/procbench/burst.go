package procbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/internal/procstat"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/sim/bench"
)

// BurstScenario is the name of the burst scenario in gpumesh bench.
const BurstScenario = "burst"

// Defaults of BurstConfig: the case, 40 nodes × 8 cards, ten
// 64-card and two 256-card jobs.
const (
	DefaultBurstNodes = 40
	DefaultBurstCards = 8
	// DefaultHold is how long the burst's jobs bid, place and wait before
	// they are cancelled.
	DefaultHold = 20 * time.Second
	// DefaultSettle is the watch after the last cancel.
	DefaultSettle = 60 * time.Second
	// QuietBytes is the gossip per node, in bytes a second of gossipsub
	// RPCs received, under which a mesh counts as back to idle.
	QuietBytes = 2048
	// quietWindow is the span a rate is averaged over when it is judged.
	quietWindow = 5 * time.Second
)

// DefaultBurst is the cards of the burst's jobs.
func DefaultBurst() []int { return []int{64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 256, 256} }

// BurstConfig configures RunBurst. Of Config it uses Binary, Nodes
// (default 40), Cards (default 8), Model, Idle, Dir, KeepDir, Progress and
// Logger.
type BurstConfig struct {
	Config
	// Burst is the cards of each job of the burst, all submitted at once.
	// Default DefaultBurst().
	Burst []int
	// Hold is how long the burst's jobs are left before their cancels.
	// Default 20 s.
	Hold time.Duration
	// Settle is how long the mesh is watched after the last cancel, and
	// when the probe job is submitted. Default 60 s.
	Settle time.Duration
	// Probe is the cards of the job submitted after Settle, whose
	// placement time is reported. Default 64 (at most the mesh's cards).
	Probe int
}

func (c BurstConfig) withDefaults() BurstConfig {
	if c.Nodes == 0 {
		c.Nodes = DefaultBurstNodes
	}
	if c.Cards == 0 {
		c.Cards = DefaultBurstCards
	}
	c.Config = c.Config.withDefaults()
	if c.Burst == nil {
		c.Burst = DefaultBurst()
	}
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	if c.Probe == 0 {
		c.Probe = min(64, c.Nodes*c.Cards)
	}
	return c
}

// Validate checks the configuration after defaults.
func (c BurstConfig) Validate() error {
	c = c.withDefaults()
	if err := c.Config.Validate(); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	for _, n := range c.Burst {
		if n < 1 || n > market.MaxCards {
			return bad("burst job of %d cards: want 1 to %d", n, market.MaxCards)
		}
	}
	switch {
	case len(c.Burst) == 0:
		return bad("a burst of no jobs")
	case c.Hold < 0 || c.Settle < 0:
		return bad("hold and settle windows must not be negative")
	case c.Probe < 1 || c.Probe > c.Nodes*c.Cards:
		return bad("probe job of %d cards: the mesh has %d", c.Probe, c.Nodes*c.Cards)
	}
	return nil
}

// tick is what every node reported at one moment.
type tick struct {
	at    time.Time
	nodes []series        // by node; nil where the node did not answer
	cpu   []time.Duration // by node: CPU used so far; -1 where unread
}

// RunBurst starts cfg.Nodes `gpumesh node` processes on loopback, lets
// them form a mesh and watches it idle, then submits cfg.Burst's large
// jobs at once, cancels them all after cfg.Hold, and watches the mesh for
// cfg.Settle: the traffic each node receives, the cards its book still
// shows reserved, and the members it saw suspect or dead. Then it submits
// a cfg.Probe-card job and reports how long it took to run. This is the
// case of a mesh that a burst of large placements and their cancels could
// tip into an overload that outlives them; the rows say whether it
// returned to idle.
func RunBurst(ctx context.Context, cfg BurstConfig) (*bench.Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	base, err := newRun(cfg.Config, BurstScenario, fmt.Sprintf("%s × %s (%s); a burst of %s, cancelled after %v; then a %d-card job",
		processes(cfg.Nodes), text.Count(cfg.Cards, "card"), cfg.Model, burstText(cfg.Burst), cfg.Hold, cfg.Probe))
	if err != nil {
		return nil, err
	}
	r := &burstRun{run: *base, bcfg: cfg}
	return r.conclude(ctx, BurstScenario, r.burst(ctx))
}

type burstRun struct {
	run
	bcfg BurstConfig

	mu    sync.Mutex
	ticks []tick
}

func (r *burstRun) row(row bench.Row) {
	row.Scenario = BurstScenario
	r.res.Rows = append(r.res.Rows, row)
}

func (r *burstRun) burst(ctx context.Context) error {
	ccfg := r.bcfg.Config
	// Gangs across nodes of process-isolated suppliers meet on the
	// suppliers' own network: the nodes must allow it.
	ccfg.nodeArgs = []string{"--job-network", "host"}
	return r.withCluster(ctx, ccfg, "gpumesh-bench-burst-", r.hit)
}

// hit is the burst scenario on a formed cluster.
func (r *burstRun) hit(ctx context.Context, c *cluster, _ time.Duration) error {
	cfg := r.bcfg
	sctx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		r.sample(sctx, c)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopSampling()
			sampling.Wait()
		}
	}
	defer stop()

	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	idleFrom := time.Now()
	cfg.Progress(fmt.Sprintf("watching the idle mesh for %v", cfg.Idle))
	if err := wait(cfg.Idle); err != nil {
		return err
	}
	idleTo := time.Now()

	cfg.Progress(fmt.Sprintf("submitting %s at once", burstText(cfg.Burst)))
	burstAt := time.Now()
	ids, err := r.submitBurst(ctx, c)
	if err != nil {
		return err
	}
	cfg.Progress(fmt.Sprintf("%d jobs accepted; cancelling them after %v", len(ids), cfg.Hold))
	if err := wait(cfg.Hold); err != nil {
		return err
	}
	running := r.countRunning(ctx, c, ids)
	lastCancel, err := r.cancelAll(ctx, c, ids)
	if err != nil {
		return err
	}
	cfg.Progress(fmt.Sprintf("cancelled (%d of %d were running); watching the mesh for %v", running, len(ids), cfg.Settle))
	if err := wait(time.Until(lastCancel.Add(cfg.Settle))); err != nil {
		return err
	}
	settled := time.Now()
	probe, perr := r.probe(ctx, c)
	stop()

	r.mu.Lock()
	ticks := slices.Clone(r.ticks)
	r.mu.Unlock()
	r.report(ticks, idleFrom, idleTo, burstAt, lastCancel, settled, running, len(ids), probe, perr)
	return nil
}

// sample scrapes every node's /metrics about once a second until ctx ends.
func (r *burstRun) sample(ctx context.Context, c *cluster) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		tk := tick{at: time.Now(), nodes: make([]series, len(c.procs)), cpu: make([]time.Duration, len(c.procs))}
		for i, p := range c.procs {
			tk.cpu[i] = -1
			if u, err := procstat.Read(p.cmd.Process.Pid); err == nil {
				tk.cpu[i] = u.CPU
			}
		}
		var wg sync.WaitGroup
		for i, p := range c.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s, err := c.scrape(ctx, p); err == nil {
					tk.nodes[i] = s
				}
			}()
		}
		wg.Wait()
		r.mu.Lock()
		r.ticks = append(r.ticks, tk)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// submitBurst submits every job of the burst at once, each through
// another node, and returns the IDs of those accepted.
func (r *burstRun) submitBurst(ctx context.Context, c *cluster) ([]string, error) {
	cfg := r.bcfg
	ids := make([]string, len(cfg.Burst))
	errs := make([]error, len(cfg.Burst))
	var wg sync.WaitGroup
	for i, n := range cfg.Burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := c.client(i, cfg.RetryFor)
			if err != nil {
				errs[i] = err
				return
			}
			defer cl.CloseIdleConnections()
			id, err := jobID()
			if err != nil {
				errs[i] = err
				return
			}
			spec := market.JobSpec{ID: id, Cards: n, AllowSimulated: true, Network: market.NetworkHost, Command: []string{"sleep", "3600"}}
			if _, err := cl.Submit(ctx, spec); err != nil {
				errs[i] = fmt.Errorf("submitting a %d-card job: %w", n, err)
				return
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ids, nil
}

// client is a client of node i mod the nodes, with the owner token.
func (c *cluster) client(i int, retryFor time.Duration) (*client.Client, error) {
	return client.New(c.procs[i%len(c.procs)].api, client.WithToken(c.token), client.WithSubmitRetry(retryFor, nil))
}

// countRunning is how many of ids run, as the nodes they were submitted
// to see them.
func (r *burstRun) countRunning(ctx context.Context, c *cluster, ids []string) int {
	n := 0
	for i, id := range ids {
		cl, err := c.client(i, 0)
		if err != nil {
			continue
		}
		if rec, err := cl.Job(ctx, id); err == nil && rec.State == market.JobRunning {
			n++
		}
		cl.CloseIdleConnections()
	}
	return n
}

// cancelAll cancels every job at once and returns when the last cancel
// was acknowledged.
func (r *burstRun) cancelAll(ctx context.Context, c *cluster, ids []string) (time.Time, error) {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := c.client(i, 0)
			if err != nil {
				errs[i] = err
				return
			}
			defer cl.CloseIdleConnections()
			if _, err := cl.Cancel(ctx, id); err != nil {
				errs[i] = fmt.Errorf("cancelling %s: %w", id, err)
			}
		}()
	}
	wg.Wait()
	return time.Now(), errors.Join(errs...)
}

// probeResult is the probe job's way to running.
type probeResult struct {
	took  time.Duration // submission sent → running_at
	state market.JobState
	why   string
}

// probe submits a cfg.Probe-card job, waits (at most 30 s) until it runs,
// and cancels it.
func (r *burstRun) probe(ctx context.Context, c *cluster) (probeResult, error) {
	cfg := r.bcfg
	cl, err := c.client(0, cfg.RetryFor)
	if err != nil {
		return probeResult{}, err
	}
	defer cl.CloseIdleConnections()
	id, err := jobID()
	if err != nil {
		return probeResult{}, err
	}
	cfg.Progress(fmt.Sprintf("submitting a %d-card job", cfg.Probe))
	sent := time.Now()
	if _, err := cl.Submit(ctx, market.JobSpec{ID: id, Cards: cfg.Probe, AllowSimulated: true, Network: market.NetworkHost, Command: []string{"sleep", "3600"}}); err != nil {
		return probeResult{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = cl.Cancel(cctx, id)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := cl.Job(ctx, id)
		if err == nil && !rec.RunningAt.IsZero() {
			return probeResult{took: rec.RunningAt.Sub(sent), state: rec.State}, nil
		}
		if time.Now().After(deadline) {
			pr := probeResult{state: rec.State, why: rec.Reason}
			return pr, fmt.Errorf("the %d-card job did not run within 30 s (%s: %s)", cfg.Probe, rec.State, rec.Reason)
		}
		select {
		case <-ctx.Done():
			return probeResult{}, ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
}

// report turns the ticks into rows.
func (r *burstRun) report(ticks []tick, idleFrom, idleTo, burstAt, lastCancel, settled time.Time, running, jobs int, probe probeResult, perr error) {
	cfg := r.bcfg
	counter := func(name string) func(t tick, i int) (float64, bool) {
		return func(t tick, i int) (float64, bool) {
			if t.nodes[i] == nil {
				return 0, false
			}
			return t.nodes[i].sum(name), true
		}
	}
	gossipIn := counter("gpumesh_gossip_received_bytes_total")
	netIn := counter("gpumesh_network_received_bytes_total")
	cpu := func(t tick, i int) (float64, bool) {
		if t.cpu[i] < 0 {
			return 0, false
		}
		return 100 * t.cpu[i].Seconds(), true // so that a rate is % of a core
	}
	// rate is the mean of a counter's rate per node between the ticks
	// nearest to from and to, and the highest node's.
	rate := func(of func(tick, int) (float64, bool), from, to time.Time) (mean, most float64, ok bool) {
		a, b := nearest(ticks, from), nearest(ticks, to)
		if a < 0 || b <= a {
			return 0, 0, false
		}
		dt := ticks[b].at.Sub(ticks[a].at).Seconds()
		n := 0
		for i := range ticks[a].nodes {
			x, ok1 := of(ticks[a], i)
			y, ok2 := of(ticks[b], i)
			if !ok1 || !ok2 {
				continue
			}
			v := (y - x) / dt
			mean += v
			most = max(most, v)
			n++
		}
		if n == 0 {
			return 0, 0, false
		}
		return mean / float64(n), most, true
	}
	reserved := func(t tick) (most int) {
		for _, s := range t.nodes {
			if s != nil {
				most = max(most, int(s.sum("gpumesh_mesh_cards", `state="reserved"`)))
			}
		}
		return most
	}
	changesOf := func(from, to time.Time, kinds ...string) (n float64) {
		a, b := nearest(ticks, from), nearest(ticks, to)
		if a < 0 || b < a {
			return 0
		}
		for i := range ticks[a].nodes {
			x, y := ticks[a].nodes[i], ticks[b].nodes[i]
			if x == nil || y == nil {
				continue
			}
			for _, k := range kinds {
				n += y.sum("gpumesh_member_changes_total", k) - x.sum("gpumesh_member_changes_total", k)
			}
		}
		return n
	}
	changes := func(from, to time.Time) float64 { return changesOf(from, to, `kind="suspect"`, `kind="dead"`) }

	if mean, most, ok := rate(gossipIn, idleFrom, idleTo); ok {
		r.row(bench.Row{Case: "idle, per node", Clock: bench.ClockReal, Metric: "gossip received", Value: mean / 1024, Unit: "KB/s", N: cfg.Nodes,
			Note: fmt.Sprintf("gossipsub RPCs (ads, bid requests, control) before the burst; the busiest node %.2f KB/s", most/1024)})
	}
	if mean, most, ok := rate(netIn, idleFrom, idleTo); ok {
		r.row(bench.Row{Case: "idle, per node", Clock: bench.ClockReal, Metric: "all received", Value: mean / 1024, Unit: "KB/s", N: cfg.Nodes,
			Note: fmt.Sprintf("every protocol (membership probes, gossip, the market's streams); the busiest node %.2f KB/s", most/1024)})
	}
	if mean, most, ok := rate(cpu, idleFrom, idleTo); ok {
		r.row(bench.Row{Case: "idle, per node", Clock: bench.ClockReal, Metric: "CPU", Value: mean, Unit: "%", N: cfg.Nodes,
			Note: fmt.Sprintf("of one core; the busiest node %.1f%%", most)})
	}
	// The storm's peak: the highest mean over quietWindow from the burst on.
	peak := 0.0
	for i := range ticks {
		if ticks[i].at.Before(burstAt) {
			continue
		}
		if mean, _, ok := rate(gossipIn, ticks[i].at.Add(-quietWindow), ticks[i].at); ok {
			peak = max(peak, mean)
		}
	}
	r.row(bench.Row{Case: "burst, per node", Clock: bench.ClockReal, Metric: "gossip received peak", Value: peak / 1024, Unit: "KB/s", N: cfg.Nodes,
		Note: fmt.Sprintf("the highest %v mean from the burst until the probe job; %d of %d burst jobs ran before the cancels", quietWindow, running, jobs)})

	// When did it return to quiet, and stay there: traffic under
	// QuietBytes and no card reserved in any book, from then to the end.
	quietAt := time.Time{}
	last := len(ticks) - 1
	for last >= 0 && ticks[last].at.After(settled) {
		last-- // the probe job's own reservations are not the burst's
	}
	for i := last; i >= 0 && !ticks[i].at.Before(lastCancel); i-- {
		mean, _, ok := rate(gossipIn, ticks[i].at.Add(-quietWindow), ticks[i].at)
		if !ok || mean >= QuietBytes || reserved(ticks[i]) > 0 {
			break
		}
		quietAt = ticks[i].at.Add(-quietWindow)
	}
	if quietAt.Before(lastCancel) && !quietAt.IsZero() {
		quietAt = lastCancel
	}
	row := bench.Row{Case: "after the last cancel", Clock: bench.ClockReal, Metric: "back to idle", Unit: "s",
		Note: fmt.Sprintf("from the last cancel until gossip stays under %.0f KB/s per node (%v means) and no book shows a card reserved", float64(QuietBytes)/1024, quietWindow)}
	if quietAt.IsZero() {
		row.Value = settled.Sub(lastCancel).Seconds()
		row.Note = "NOT back to idle by the end of the watch; " + row.Note
		r.row(target(row, "≤ 60 s", false))
	} else {
		row.Value = quietAt.Sub(lastCancel).Seconds()
		r.row(target(row, "≤ 60 s", row.Value <= 60))
	}
	end := settled
	// The end's figures come from the last tick of the watch in which
	// every node answered its scrape: a node that did not could hide a
	// reserved card, and a total without it would count too little.
	whole := -1
	for i := len(ticks) - 1; i >= 0 && !ticks[i].at.Before(end.Add(-10*time.Second)); i-- {
		if !ticks[i].at.After(end) && answered(ticks[i]) == len(ticks[i].nodes) {
			whole = i
			break
		}
	}
	if whole < 0 {
		r.note("the last 10 s of the watch had no scrape that every node answered: the end's figures (gossip, CPU, cards reserved, the whole run's totals) are not measured")
	}
	if mean, most, ok := rate(gossipIn, end.Add(-10*time.Second), end); ok {
		r.row(target(bench.Row{Case: "after the last cancel", Clock: bench.ClockReal, Metric: "gossip received at the end", Value: mean / 1024, Unit: "KB/s", N: cfg.Nodes,
			Note: fmt.Sprintf("per node, the last 10 s of the %v watch; the busiest node %.2f KB/s", cfg.Settle, most/1024)}, "< 2 KB/s", mean < QuietBytes))
	}
	if mean, most, ok := rate(netIn, end.Add(-10*time.Second), end); ok {
		r.row(bench.Row{Case: "after the last cancel", Clock: bench.ClockReal, Metric: "all received at the end", Value: mean / 1024, Unit: "KB/s", N: cfg.Nodes,
			Note: fmt.Sprintf("per node, every protocol; the busiest node %.2f KB/s", most/1024)})
	}
	if mean, most, ok := rate(cpu, end.Add(-10*time.Second), end); ok {
		r.row(bench.Row{Case: "after the last cancel", Clock: bench.ClockReal, Metric: "CPU at the end", Value: mean, Unit: "%", N: cfg.Nodes,
			Note: fmt.Sprintf("per node, of one core, the last 10 s of the watch; the busiest node %.1f%%", most)})
	}
	if i := whole; i >= 0 {
		n := reserved(ticks[i])
		r.row(target(bench.Row{Case: "after the last cancel", Metric: "cards reserved", Value: float64(n), Unit: "cards",
			Note: "the most any node's book shows reserved at the end of the watch"}, "0", n == 0))
	} else {
		r.row(target(bench.Row{Case: "after the last cancel", Metric: "cards reserved", Unit: "cards",
			Note: "NOT measured: no scrape that every node answered in the last 10 s of the watch"}, "0", false))
	}
	during := changes(burstAt, end)
	after := changes(lastCancel, end)
	lastChange := ""
	for i := range ticks {
		if i > 0 && !ticks[i].at.Before(lastCancel) && !ticks[i].at.After(end) && changes(ticks[i-1].at, ticks[i].at) > 0 {
			lastChange = fmt.Sprintf("; the last seen %.0f s after the last cancel", ticks[i].at.Sub(lastCancel).Seconds())
		}
	}
	r.row(target(bench.Row{Case: "after the last cancel", Metric: "members seen suspect or dead", Value: after, Unit: "changes",
		Note: fmt.Sprintf("gpumesh_member_changes_total, summed over the nodes, during the watch%s; from the burst on: %.0f (no node failed)", lastChange, during)}, "0", after == 0))
	// Of those, the members some node declared dead: a suspicion is one
	// node's probe unanswered (the member may refute it); a death takes
	// the member out of the mesh until it rejoins.
	dead := changesOf(lastCancel, end, `kind="dead"`)
	r.row(target(bench.Row{Case: "after the last cancel", Metric: "members declared dead", Value: dead, Unit: "changes",
		Note: fmt.Sprintf("of the row above, the kind=\"dead\" changes; from the burst on: %.0f", changesOf(burstAt, end, `kind="dead"`))}, "0", dead == 0))
	// What the membership transport dropped, and the metadata updates
	// memberlist dropped and the nodes made again, over the whole run:
	// news lost this way reaches a node late, or (before the nodes made
	// dropped updates again) never.
	if i := whole; i >= 0 {
		total := func(name string, labels ...string) (n float64) {
			for _, s := range ticks[i].nodes {
				if s != nil {
					n += s.sum(name, labels...)
				}
			}
			return n
		}
		// Most drops on sending are dials that failed while the mesh
		// formed (a member gossiped before libp2p knew its addresses):
		// the count from the burst on says what the burst cost.
		since := ""
		if a := nearest(ticks, burstAt); a >= 0 && a <= i {
			var before float64
			for _, s := range ticks[a].nodes {
				if s != nil {
					before += s.sum("gpumesh_membership_dropped_packets_total")
				}
			}
			since = fmt.Sprintf("; from the burst on: %.0f", total("gpumesh_membership_dropped_packets_total")-before)
		}
		r.row(bench.Row{Case: "the whole run", Metric: "membership packets dropped", Value: total("gpumesh_membership_dropped_packets_total"), Unit: "packets",
			Note: fmt.Sprintf("summed over the nodes: %.0f on sending, %.0f on receiving, of %.0f received; dials to members that failed: %.0f%s",
				total("gpumesh_membership_dropped_packets_total", `direction="send"`), total("gpumesh_membership_dropped_packets_total", `direction="receive"`),
				total("gpumesh_membership_packets_total", `direction="received"`), total("gpumesh_membership_dial_failures_total"), since)})
		r.row(bench.Row{Case: "the whole run", Metric: "metadata updates redone", Value: total("gpumesh_membership_metadata_updates_redone_total"), Unit: "updates",
			Note: "summed over the nodes: updates of a node's metadata that memberlist dropped (a refutation won the race) and the node made again"})
	}
	row = bench.Row{Case: fmt.Sprintf("a %d-card job after the watch", cfg.Probe), Clock: bench.ClockReal, Metric: "submit → running", Unit: "ms"}
	if perr != nil {
		row.Value = 30000
		row.Note = "not running: " + perr.Error()
		r.row(target(row, "< 1 s", false))
	} else {
		row.Value = ms(probe.took)
		r.row(target(row, "< 1 s", probe.took < time.Second))
	}
}

// answered is how many nodes answered t's scrape.
func answered(t tick) int {
	n := 0
	for _, s := range t.nodes {
		if s != nil {
			n++
		}
	}
	return n
}

// nearest is the index of the tick nearest to at, or -1 when there is
// none.
func nearest(ticks []tick, at time.Time) int {
	best, bestD := -1, time.Duration(1<<62)
	for i, t := range ticks {
		d := t.at.Sub(at)
		if d < 0 {
			d = -d
		}
		if d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// burstText is "ten 64-card and two 256-card jobs" in figures: "10 × 64
// cards, 2 × 256 cards".
func burstText(burst []int) string {
	counts := map[int]int{}
	var sizes []int
	for _, n := range burst {
		if counts[n] == 0 {
			sizes = append(sizes, n)
		}
		counts[n]++
	}
	var parts []string
	for _, n := range sizes {
		parts = append(parts, fmt.Sprintf("%d × %s", counts[n], text.Count(n, "card")))
	}
	return strings.Join(parts, ", ") + " jobs"
}
