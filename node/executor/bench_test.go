package executor

import (
	"testing"
	"time"
)

// BenchmarkAttemptStart measures what an attempt costs the node from Start
// to Done for a job that exits at once (`true`): in process mode (the
// baseline), in the sandbox with no network, and in the sandbox with
// egress (which runs ip and nft). It reports ms/attempt for each.
//
//	go test -run '^$' -bench AttemptStart ./node/executor/
func BenchmarkAttemptStart(b *testing.B) {
	for _, mode := range []struct {
		name string
		iso  Isolation
		net  NetworkMode
	}{{"process", IsolationProcess, ""}, {"sandbox-none", IsolationSandbox, NetworkNone}, {"sandbox-egress", IsolationSandbox, NetworkEgress}} {
		b.Run(mode.name, func(b *testing.B) {
			ex, err := New(Config{Root: b.TempDir(), Isolation: mode.iso, Grace: time.Second})
			if err != nil {
				b.Skipf("%s: %v", mode.name, err)
			}
			defer ex.Close()
			if !ex.Capabilities().Provides(mode.net) {
				b.Skipf("%s: this host cannot provide network %q", mode.name, mode.net)
			}
			i := 0
			start := time.Now()
			for b.Loop() {
				r, err := ex.Start(Attempt{JobID: "bench", Share: i, Command: []string{"true"}, Limits: Limits{Network: mode.net}})
				if err != nil {
					b.Fatal(err)
				}
				<-r.Done()
				if res := r.Result(); res.ExitCode != 0 {
					b.Fatalf("attempt %d: %+v", i, res)
				}
				i++
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(i), "ms/attempt")
			b.ReportMetric(0, "ns/op")
		})
	}
}
