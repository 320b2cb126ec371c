package probe

import "testing"

// Run: go test -run '^$' -bench JudgeH100 -benchtime 3x ./node/probe/
//
// The coordinator's CPU cost of checking one H100's answer at the default
// sizes (128 MiB, rounds for 1 s at 3350 GB/s, 4096 blocks, 2 checked).
func BenchmarkJudgeH100Card(b *testing.B) {
	cfg := Config{}.WithDefaults()
	w := Size(3350, cfg.Target, cfg.Words, 81920)
	seed := Seed([32]byte{7}, 0)
	b.ResetTimer()
	for b.Loop() {
		for k := range cfg.Checks {
			_ = Block(seed, w, cfg.Blocks, k)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/card")
}
