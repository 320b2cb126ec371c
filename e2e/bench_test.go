//go:build unix

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// BenchmarkSubmitToRunning measures submit → all shares running for a
// 1-card job on a mesh of 5 real node processes on loopback (issue 5's
// target: median < 100 ms). Each iteration submits one job to a node in
// turn and cancels it once it runs. It reports the median and p99 of the
// coordinator's own measure (the record's running_at − submitted_at) and of
// what the submitter sees (the submit call to the first poll, every 2 ms,
// that reads the job running).
//
//	go test -run '^$' -bench SubmitToRunning -benchtime 50x ./e2e/
func BenchmarkSubmitToRunning(b *testing.B) {
	procs := benchMesh(b, 5, "a100-80g:4")
	var coordMs, clientMs []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := procs[i%len(procs)]
		start := time.Now()
		rec := p.submit(market.JobSpec{AllowSimulated: true, Cards: 1, MaxPriceCNY: 20, Command: []string{"sleep", "60"}})
		var got market.JobRecord
		for {
			r, err := p.job(rec.ID)
			if err == nil && r.State == market.JobRunning {
				got = r
				break
			}
			if time.Since(start) > 20*time.Second {
				b.Fatalf("job %s not running after 20 s: %s", rec.ID, r.State)
			}
			time.Sleep(2 * time.Millisecond) // polling interval
		}
		clientMs = append(clientMs, float64(time.Since(start).Microseconds())/1000)
		if d := time.Since(start); d > time.Second {
			b.Logf("slow placement: %v; explanation %+v", d, got.Explanation)
		}
		coordMs = append(coordMs, float64(got.RunningAt.Sub(got.SubmittedAt).Microseconds())/1000)
		resp, err := p.do(http.MethodDelete, "/v1/jobs/"+rec.ID)
		if err == nil {
			resp.Body.Close()
		}
	}
	b.StopTimer()
	b.ReportMetric(quantile(coordMs, 0.5), "ms-p50-coordinator")
	b.ReportMetric(quantile(coordMs, 0.99), "ms-p99-coordinator")
	b.ReportMetric(quantile(clientMs, 0.5), "ms-p50-client")
	b.ReportMetric(quantile(clientMs, 0.99), "ms-p99-client")
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

// benchMesh starts n node processes with the given cards, joined into one
// mesh, for a benchmark.
func benchMesh(b *testing.B, n int, cards string) []*proc {
	b.Helper()
	t := b
	var procs []*proc
	for i := range n {
		extra := []string{"--sim", cards, "--log-level", "warn"}
		if i > 0 {
			extra = append(extra, "--join", procs[0].joinAddr())
		}
		procs = append(procs, startNode(t, fmt.Sprintf("n%d", i), extra...))
	}
	waitAllSee(t, procs, n, n*4)
	return procs
}
