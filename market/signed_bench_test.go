package market_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// BenchmarkSpecSignature measures what signatures add to a submission and
// to every award a supplier takes: one Verify (canonical JSON + ed25519)
// against one Validate of the same spec, the check every spec already got,
// and against decoding the signed spec from the wire. Reports µs per
// operation and verify/validate.
//
//	go test -run XXX -bench SpecSignature ./market/
func BenchmarkSpecSignature(b *testing.B) {
	k := ownerKey(b, 20)
	spec := market.JobSpec{ID: "j1", Cards: 8, Models: []string{"h100-*", "h200-141g"}, MaxPriceCNY: 30,
		Layout: market.Layout{Mode: market.LayoutPerNode, PerNode: 4}, ExpectedDuration: market.Duration(2 * time.Hour),
		Command: []string{"sh", "-c", "torchrun --nnodes=$NNODES --node_rank=$NODE_RANK train.py --lr 3e-4"},
		Env:     map[string]string{"HF_HOME": "/tmp/hf", "WANDB_MODE": "offline", "NCCL_DEBUG": "WARN"}}
	s, err := market.SignSpec(k, testNetwork, spec, t0)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := json.Marshal(s)
	measure := func(f func()) time.Duration {
		start := time.Now()
		for range b.N {
			f()
		}
		return time.Since(start) / time.Duration(b.N)
	}
	b.ResetTimer()
	verify := measure(func() {
		if err := s.Verify(testNetwork); err != nil {
			b.Fatal(err)
		}
	})
	validate := measure(func() {
		if err := s.Spec.Validate(nil); err != nil {
			b.Fatal(err)
		}
	})
	decode := measure(func() {
		if _, err := market.DecodeSignedSpec(raw); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(verify.Nanoseconds())/1e3, "verify_µs")
	b.ReportMetric(float64(validate.Nanoseconds())/1e3, "validate_µs")
	b.ReportMetric(float64(decode.Nanoseconds())/1e3, "decode_µs")
	b.ReportMetric(float64(verify)/float64(validate), "verify/validate")
	b.ReportMetric(0, "ns/op")
}
