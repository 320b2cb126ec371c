package procbench

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/sim/bench"
)

// One job at a time. Under the load, 32 submitters keep about 32 jobs in
// flight, so a job's submit → running is mostly its wait behind the
// others: at 100 jobs/s, some 300 ms. After the load, Config.Singles
// jobs go in one after another through the nodes in turn, each once the
// one before ended, and their submit → running at the coordinator is
// what a job waits on a mesh with nothing else to do: the figure the
// issue asks to hold under 50 ms.

// singleWait bounds the wait for one job to run and end.
const singleWait = 10 * time.Second

// singles submits cfg.Singles jobs one at a time and returns their
// samples, with what their records say.
func (r *run) singles(ctx context.Context, c *cluster, w *watch) []sample {
	var out []sample
	for i := range r.cfg.Singles {
		if ctx.Err() != nil {
			break
		}
		node := i % len(c.procs)
		cl, err := client.New(c.procs[node].api, client.WithToken(c.token))
		if err != nil {
			panic(err) // the address is ours and well formed
		}
		id, err := jobID()
		if err != nil {
			break
		}
		sm := sample{id: id, node: node, sent: time.Now()}
		_, err = cl.Submit(ctx, benchJob(id))
		cl.CloseIdleConnections()
		if err != nil {
			if ctx.Err() == nil {
				r.note("a job submitted alone was refused: %v", err)
			}
			continue
		}
		sm.acked, sm.status = time.Now(), 201
		out = append(out, sm)
		if !r.waitEnded(ctx, w, id) && ctx.Err() == nil {
			r.note("job %s, submitted alone, was not heard ended within %v", id, singleWait)
		}
	}
	if ctx.Err() == nil {
		r.records(ctx, c, out)
	}
	return out
}

// waitEnded waits until job was heard ended, singleWait passes or ctx
// ends.
func (r *run) waitEnded(ctx context.Context, w *watch, job string) bool {
	deadline := time.After(singleWait)
	for {
		if _, ended := w.counts([]string{job}); ended == 1 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-w.changed:
		}
	}
}

// singleRows reports the jobs submitted one at a time.
func (r *run) singleRows(samples []sample) {
	run, atCoord := runningTimes(samples)
	const c = "one job at a time"
	if len(run) > 0 {
		r.row(bench.Row{Case: c, Clock: bench.ClockReal, Metric: "submit → running p50", Value: ms(quantile(run, 0.5)), Unit: "ms", N: len(run),
			Note: "jobs submitted after the load, each once the one before ended, through the nodes in turn; from the send to the coordinator's running_at"})
	}
	if len(atCoord) > 0 {
		p50 := quantile(atCoord, 0.5)
		r.row(target(bench.Row{Case: c, Clock: bench.ClockReal, Metric: "submit → running at the coordinator p50", Value: ms(p50), Unit: "ms", N: len(atCoord),
			Note: "the record's running_at − submitted_at, with nothing else queued"}, "< 50 ms", p50 < 50*time.Millisecond))
	}
	if len(run) < len(samples) {
		r.note("%d of %d jobs submitted alone were not running by the end", len(samples)-len(run), len(samples))
	}
}
